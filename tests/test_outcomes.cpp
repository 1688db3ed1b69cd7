// How a run failed, named from its own diagnostics (exploded / collapsed / slow), each rule at its
// boundary; the evidence a group's description gives; the accuracy AUC; the three-word verdicts
// of the comparisons; per-seed points on charts; the "equivalence" margins of a compare config;
// the held-out set drawn per seed.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/study/instability.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/study/svg.hpp"
#include "normlab/train/setup.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;

namespace {

// A finished 6-block run of a 10-label task (chance 0.1) ending at trained accuracy `accuracy`
// with the given held-out losses per evaluation (steps 100, 200, ...).
study::RunResult run_with(double accuracy, const std::vector<double>& losses) {
  study::RunResult r;
  r.finished = true;
  r.loss = {2.3, 2.0};
  r.baseline.uniform_loss = std::log(10.0);
  r.baseline.uniform_accuracy = 0.1;
  r.planned_steps = int64_t(100 * losses.size());
  for (size_t i = 0; i < losses.size(); ++i)
    r.evals.push_back({int64_t(100 * (i + 1)), {losses[i], accuracy, 100}, {}, {}, NAN});
  return r;
}

// Diagnostics with block gradient norms {early x3, middle x2, last} and residual RMS 1 -> growth.
void add_diagnostics(study::RunResult& r, int64_t step, double early, double last, double rms = 1.0) {
  study::Diagnostics d;
  d.step = step;
  d.residual_rms.assign(6, rms);
  d.layer_grad_norms = {early, early, early, 0.01, 0.01, last};
  r.diagnostics.push_back(d);
}

}  // namespace

TEST_CASE("outcomes: collapsed needs chance-level or constant output and vanished early gradients, at the boundary") {
  study::RunResult r = run_with(0.1, {2.30, 2.30, 2.30});
  add_diagnostics(r, 25, 0.1, 0.1);
  add_diagnostics(r, 100, 1e-7, 4e-2);  // post-LN at lr 0.03: blocks 0-2 at 1e-7 against block 5's 4e-2
  CHECK(study::classify(r) == study::Outcome::collapsed);
  // The ratio just under / at the stated fraction of the last block's norm.
  r.diagnostics.back().layer_grad_norms = {0.99e-2, 1e-5, 1e-5, 0.01, 0.01, 1.0};
  CHECK(study::classify(r) == study::Outcome::collapsed);
  r.diagnostics.back().layer_grad_norms = {study::kCollapseGradRatio, 1e-5, 1e-5, 0.01, 0.01, 1.0};
  CHECK(study::classify(r) == study::Outcome::at_chance);  // gradients alive: no mechanism named
  // Only the last diagnostics step decides; the first half of the blocks (0-2 of 6) are "early".
  r.diagnostics.back().layer_grad_norms = {1e-7, 1e-7, 1e-7, 1e-7, 1e-7, 1.0};
  CHECK(study::classify(r) == study::Outcome::collapsed);
  r.diagnostics.back().layer_grad_norms = {1e-7, 1e-7, 0.02, 1e-7, 1e-7, 1.0};
  CHECK(study::classify(r) == study::Outcome::at_chance);
  // Above chance: collapsed only when the output is constant (>= 90% one label).
  r.diagnostics.back().layer_grad_norms = {1e-7, 1e-7, 1e-7, 0.01, 0.01, 4e-2};
  r.evals.back().trained.accuracy = 0.2;  // weak level: c + 0.05 (1 - c) = 0.145
  CHECK(study::classify(r) == study::Outcome::weak);
  r.evals.back().top_prediction_share = study::kConstantPredictionShare;
  CHECK(study::classify(r) == study::Outcome::collapsed);
  r.evals.back().top_prediction_share = std::nextafter(study::kConstantPredictionShare, 0.0);
  CHECK(study::classify(r) == study::Outcome::weak);
  // No diagnostics: no mechanism can be named.
  r.evals.back().trained.accuracy = 0.1;
  r.diagnostics.clear();
  CHECK(study::classify(r) == study::Outcome::at_chance);
}

TEST_CASE("outcomes: exploded by residual RMS growth short of learned, at the boundary") {
  study::RunResult r = run_with(0.1, {2.3, 2.3, 2.3});
  add_diagnostics(r, 25, 0.1, 0.1, 2.0);
  add_diagnostics(r, 100, 0.1, 0.1, 2.0 * study::kExplodeRmsFactor);
  CHECK(study::classify(r) == study::Outcome::at_chance);  // exactly 100x: not past the factor
  r.diagnostics.back().residual_rms[4] = std::nextafter(2.0 * study::kExplodeRmsFactor, 1e9);
  CHECK(study::classify(r) == study::Outcome::exploded);
  r.diagnostics.back().residual_rms[4] = NAN;  // a block's RMS gone non-finite
  CHECK(study::classify(r) == study::Outcome::exploded);
  // A run that learned keeps its word: growth alone does not make it a failure.
  r.diagnostics.back().residual_rms[4] = 1e6;
  r.evals.back().trained.accuracy = 0.5;
  CHECK(study::classify(r) == study::Outcome::learned);
  // Held-out loss past 2 ln K explodes at any accuracy below solved's precedence (see the thresholds test).
  r.evals.back().trained.loss = 2 * std::log(10.0) + 0.01;
  CHECK(study::classify(r) == study::Outcome::exploded);
  CHECK(study::outcome_evidence(r).find("held-out loss 4.62") != std::string::npos);
}

TEST_CASE("outcomes: slow = above chance, short of solved, held-out loss still falling over the last 3 evaluations") {
  // Pre-LN without warmup at lr 0.01: accuracy 0.535 and the loss still falling.
  study::RunResult r = run_with(0.535, {1.5, 1.3, 1.2, 1.1});
  CHECK(study::classify(r) == study::Outcome::slow);
  CHECK(study::has_learned(study::Outcome::slow));  // not a failure of stability
  // The fall over the last 3 evaluations just at / under 5%.
  r = run_with(0.535, {1.0, 0.975, 0.95});
  CHECK(study::classify(r) == study::Outcome::slow);
  r = run_with(0.535, {1.0, 0.975, std::nextafter(0.95, 1.0)});
  CHECK(study::classify(r) == study::Outcome::learned);
  // Falling at each evaluation: a flat step breaks it.
  r = run_with(0.535, {1.0, 1.0, 0.8});
  CHECK(study::classify(r) == study::Outcome::learned);
  // Fewer than 3 evaluations: no trend.
  r = run_with(0.535, {1.0, 0.5});
  CHECK(study::classify(r) == study::Outcome::learned);
  // Solved comes first; at chance level a falling loss is not "slow".
  r = run_with(0.96, {1.0, 0.5, 0.1});
  CHECK(study::classify(r) == study::Outcome::solved);
  const double weak_at = 0.1 + study::kChanceShare * 0.9;
  r = run_with(std::nextafter(weak_at, 0.0), {2.3, 2.2, 2.0});
  CHECK(study::classify(r) == study::Outcome::at_chance);
  r = run_with(weak_at, {2.3, 2.2, 2.0});
  CHECK(study::classify(r) == study::Outcome::slow);
  CHECK(std::string(study::outcome_name(study::Outcome::slow)) == "slow");
}

TEST_CASE("outcomes: a group's failures described with the evidence of its diagnostics") {
  std::vector<study::RunResult> runs;
  for (int seed = 0; seed < 5; ++seed) {
    study::RunResult r = run_with(0.1, {2.19, 2.30, 2.30});
    add_diagnostics(r, 25, 0.3, 0.3);
    add_diagnostics(r, 100, seed == 0 ? 1e-7 : 1e-6, 4e-2);
    add_diagnostics(r, 450, 2e-7, 4e-2);
    r.evals.back().top_prediction_share = 0.99;
    runs.push_back(r);
  }
  std::vector<const study::RunResult*> group;
  for (const study::RunResult& r : runs) group.push_back(&r);
  CHECK(study::describe_failures(group) ==
        "collapsed in 5/5 — blocks 0–2 gradient norms 2e-07 by step 100 (block 5: 0.04); 99% of held-out "
        "predictions one label");
  runs[1].evals.back().top_prediction_share = 0.72;
  CHECK(study::describe_failures(group).find("72–99% of held-out predictions one label") != std::string::npos);
  runs[1].evals.back().top_prediction_share = 0.99;
  // Mixed outcomes: one clause each, in a fixed order, learned seeds not mentioned.
  runs[3] = run_with(0.6, {1.5, 1.3, 1.2});
  runs[4] = run_with(0.9, {0.5, 0.5, 0.5});
  runs[2].diverged = true;
  runs[2].diverged_at = 130;
  const std::string mixed = study::describe_failures(group);
  CHECK(mixed ==
        "diverged in 1/5 — non-finite at step 130; collapsed in 2/5 — blocks 0–2 gradient norms 2e-07 by "
        "step 100 (block 5: 0.04); 99% of held-out predictions one label; slow in 1/5 — held-out loss still "
        "falling at the end: 1.5 → 1.2 over steps 100–300");
  runs = {run_with(0.9, {0.5, 0.5, 0.5})};
  group = {&runs[0]};
  CHECK(study::describe_failures(group).empty());
}

TEST_CASE("outcomes: a collapse is dated from the last time the gradients vanished, not from one they recovered from") {
  study::RunResult r = run_with(0.1, {2.30, 2.30, 2.30});
  add_diagnostics(r, 25, 0.3, 0.3);
  add_diagnostics(r, 100, 1e-7, 4e-2);  // vanished ...
  add_diagnostics(r, 200, 0.2, 4e-2);   // ... recovered ...
  add_diagnostics(r, 300, 2e-7, 4e-2);  // ... and vanished again, to the end
  add_diagnostics(r, 450, 2e-7, 4e-2);
  r.evals.back().top_prediction_share = 0.99;
  REQUIRE(study::classify(r) == study::Outcome::collapsed);
  CHECK(study::describe_failures({&r}) ==
        "collapsed in 1/1 — blocks 0–2 gradient norms 2e-07 by step 300 (block 5: 0.04); 99% of held-out predictions "
        "one label");
}

namespace {

// A diagnostics record of a 6-block run with attention figures: every layer at entropy `entropy`
// and max logit `logit` but layer 4 at `entropy4` / `logit4`; the output's |log Z| at `log_z`.
study::Diagnostics attention_record(int64_t step, double entropy, double logit, double entropy4, double logit4,
                                    double log_z, double early_grad = 0.1) {
  study::Diagnostics d;
  d.step = step;
  d.residual_rms.assign(6, 1.0);
  d.layer_grad_norms = {early_grad, early_grad, early_grad, 0.01, 0.01, 0.04};
  d.attention_entropy_mean.assign(6, entropy);
  d.attention_max_logit.assign(6, logit);
  d.attention_entropy_mean[4] = entropy4;
  d.attention_max_logit[4] = logit4;
  d.log_z_max_abs = log_z;
  return d;
}

}  // namespace

TEST_CASE(
    "outcomes: attention entropy collapse and logit divergence in the rules' order, each just inside and outside") {
  // Step 1 at the initial weights: entropy 2.1 nats, max logit 1.2, |log Z| 2.4 in every layer.
  auto run = [](double entropy4, double logit4, double log_z, double accuracy = 0.1, double early_grad = 0.1) {
    study::RunResult r = run_with(accuracy, {2.30, 2.30, 2.30});
    r.diagnostics.push_back(attention_record(1, 2.1, 1.2, 2.1, 1.2, 2.4));
    r.diagnostics.push_back(attention_record(150, 2.0, 1.5, entropy4, logit4, log_z, early_grad));
    r.diagnostics.push_back(attention_record(400, 2.0, 1.5, entropy4, logit4, log_z, early_grad));
    return r;
  };
  // Layer 4's entropy fell from 2.1 to 0.05 nats while its max logit grew 40x: entropy collapse.
  study::RunResult r = run(0.05, 48.0, 3.0);
  CHECK(study::classify(r) == study::Outcome::entropy_collapse);
  CHECK(std::string(study::outcome_name(study::Outcome::entropy_collapse)) == "attention entropy collapse");
  CHECK(study::outcome_evidence(r) ==
        "the attention entropy of layer 4 fell from 2.1 to 0.05 nats by step 150 while its max |logit| grew 40.0x (1.2 "
        "to 48)");
  // Just outside on entropy (0.42 = 0.2 x 2.1 is not below) and on growth (just under 5 x 1.2): at chance.
  CHECK(study::classify(run(study::kEntropyCollapseFraction * 2.1, 48.0, 3.0)) == study::Outcome::at_chance);
  CHECK(study::classify(run(std::nextafter(study::kEntropyCollapseFraction * 2.1, 0.0), 48.0, 3.0)) ==
        study::Outcome::entropy_collapse);
  const double grown = study::kLogitGrowthFactor * 1.2;  // 6
  CHECK(study::classify(run(0.05, std::nextafter(grown, 0.0), 3.0)) == study::Outcome::at_chance);
  CHECK(study::classify(run(0.05, grown, 3.0)) == study::Outcome::entropy_collapse);
  // Above chance, short of learned (weak level) it is still named; at the learned level it is not a failure.
  CHECK(study::classify(run(0.05, 48.0, 3.0, 0.2)) == study::Outcome::entropy_collapse);
  const double learned_at = 0.1 + study::kLearnedShare * 0.9;
  CHECK(study::classify(run(0.05, 48.0, 3.0, learned_at)) == study::Outcome::learned);
  CHECK(study::classify(run(0.05, 48.0, 3.0, std::nextafter(learned_at, 0.0))) == study::Outcome::entropy_collapse);
  // Before "collapsed" in the order: vanished early gradients with it are still this word; without
  // it, collapsed.
  CHECK(study::classify(run(0.05, 48.0, 3.0, 0.1, 1e-7)) == study::Outcome::entropy_collapse);
  CHECK(study::classify(run(1.9, 1.5, 3.0, 0.1, 1e-7)) == study::Outcome::collapsed);
  // The output's |log Z| just beyond 30 at the end: logit divergence, before entropy collapse.
  CHECK(study::classify(run(1.9, 1.5, study::kLogZBound)) == study::Outcome::at_chance);
  r = run(0.05, 48.0, std::nextafter(study::kLogZBound, 100.0));
  CHECK(study::classify(r) == study::Outcome::logit_divergence);
  CHECK(std::string(study::outcome_name(study::Outcome::logit_divergence)) == "logit divergence");
  r = run(1.9, 1.5, 45.2);
  CHECK(study::classify(r) == study::Outcome::logit_divergence);
  CHECK(study::outcome_evidence(r) == "the output's |log Z| reached 45.2 by step 150 (bound 30; 2.4 at step 1)");
  // Exploded by residual RMS comes first.
  r.diagnostics.back().residual_rms[2] = 1e3;
  CHECK(study::classify(r) == study::Outcome::exploded);
  // A learned run keeps its word whatever its log Z.
  CHECK(study::classify(run(1.9, 1.5, 45.2, learned_at)) == study::Outcome::learned);
  // Records from before step-1 diagnostics: no initial value, so no entropy collapse is named.
  r = run(0.05, 48.0, 3.0);
  r.diagnostics.erase(r.diagnostics.begin());
  CHECK(study::classify(r) == study::Outcome::at_chance);

  // Slow comes first in the rules; below the learned level its evidence adds a collapsed attention.
  r = run(0.05, 48.0, 3.0, 0.2);
  r.evals = run_with(0.2, {2.0, 1.9, 1.8}).evals;
  REQUIRE(study::classify(r) == study::Outcome::slow);
  CHECK(study::outcome_evidence(r) ==
        "held-out loss still falling at the end: 2 → 1.8 over steps 100–300; the attention entropy of layer 4 "
        "fell from 2.1 to 0.05 nats by step 150 while its max |logit| grew 40.0x (1.2 to 48)");
  r = run(1.9, 1.5, 3.0, 0.2);
  r.evals = run_with(0.2, {2.0, 1.9, 1.8}).evals;
  CHECK(study::outcome_evidence(r) == "held-out loss still falling at the end: 2 → 1.8 over steps 100–300");

  // A group: one clause per word with the range of the runs' evidence, in the rules' order.
  std::vector<study::RunResult> runs = {run(0.05, 48.0, 3.0), run(0.2, 15.0, 3.0), run(1.9, 1.5, 45.2),
                                        run(1.9, 1.5, 3.0, 0.9)};
  runs[1].diagnostics[1].attention_entropy_mean[4] = 1.0;  // layer 4 collapsed from step 400 in this seed
  std::vector<const study::RunResult*> group;
  for (const study::RunResult& one : runs) group.push_back(&one);
  CHECK(study::describe_failures(group) ==
        "logit divergence in 1/4 — the output's |log Z| reached 45.2 by step 150 (bound 30; 2.4 at step 1); "
        "attention entropy collapse in 2/4 — the attention entropy of layer 4 fell from 2.1 to 0.05–0.2 nats by step "
        "150–400 while its max |logit| grew 12.5–40.0x (to 15–48)");
}

TEST_CASE("accuracy AUC: trapezoids over evaluations to the budget's end, a diverged run at the uniform guess after") {
  study::RunResult r = run_with(0.0, {1.0, 1.0, 1.0});
  r.evals[0].trained.accuracy = 0.2;
  r.evals[1].trained.accuracy = 0.6;
  r.evals[2].trained.accuracy = 1.0;
  // Steps 100..300: (0.4 + 0.8) x 100 / 200 = 0.6.
  CHECK(r.accuracy_auc() == doctest::Approx(0.6));
  r.planned_steps = 500;  // held at 1.0 to step 500: (0.4 + 0.8 + 2) x 100 / 400
  CHECK(r.accuracy_auc() == doctest::Approx(0.8));
  r.diverged = true;
  r.diverged_at = 300;  // from step 300 on: the uniform guess 0.1
  CHECK(r.accuracy_auc() == doctest::Approx((40 + 80 + 0 + 20) / 400.0));
  r.evals.resize(1);
  r.diverged = false;
  r.planned_steps = 100;
  CHECK(r.accuracy_auc() == doctest::Approx(0.2));  // one evaluation at the end: its value
  r.evals.clear();
  CHECK(std::isnan(r.accuracy_auc()));
}

TEST_CASE("verdicts: differs / equivalent within the margin / undecided with the seeds needed, Holm over the family") {
  auto comparison = [](std::vector<double> loss_differences) {
    study::Comparison c;
    c.variant = "none", c.reference = "pre-ln";
    c.trained_loss = normlab::t_interval(loss_differences);
    c.accuracy_auc = normlab::t_interval({0.001, -0.001, 0.0, 0.002, -0.002});
    c.trained_accuracy = normlab::t_interval({0, 0, 0, 0, 0});  // every pair identical (zero spread)
    return c;
  };
  const std::vector<study::Comparison> comparisons{comparison({0.30, 0.31, 0.29, 0.30, 0.32}),  // far from 0: differs
                                                   comparison({0.001, -0.002, 0.0, 0.002,
                                                               0.0}),  // tight around 0: equivalent within 0.05
                                                   comparison({0.1, -0.2, 0.05, 0.15, -0.1})};  // wide: undecided
  study::EquivalenceMargins margins;
  const auto tests = study::test_comparisons(comparisons, margins);
  REQUIRE(tests.size() == 3);
  REQUIRE(tests[0].size() == 3);
  CHECK(tests[0][0].endpoint == "held-out loss");
  CHECK(tests[0][0].verdict == study::Verdict::differs);
  CHECK(tests[1][0].verdict == study::Verdict::equivalent);
  CHECK(tests[2][0].verdict == study::Verdict::undecided);
  CHECK(tests[1][2].verdict == study::Verdict::equivalent);  // identical in all 5 pairs
  // Holm over the 18 p-values: never below the unadjusted one, at most 18x it.
  for (const auto& row : tests)
    for (const study::EndpointTest& t : row) {
      CHECK(t.holm_difference >= t.p_difference);
      CHECK(t.holm_difference <= std::min(1.0, 18 * t.p_difference) + 1e-12);
    }
  // Undecided: the seeds that would show equivalence from the observed spread (sd of the differences).
  const normlab::Interval& wide = tests[2][0].difference;
  CHECK(tests[2][0].seeds_for_equivalence);
  CHECK(tests[2][0].seeds_needed ==
        std::max<size_t>(6, normlab::seeds_for_equivalence(wide.standard_error * std::sqrt(5.0), wide.mean,
                                                           margins.loss, 0.05 / 18)));
  const std::string text = study::describe_test(tests[2][0]);
  CHECK(text.find("undecided: ") == 0);
  CHECK(text.find(fmt::format("about {} pairs would show equivalence within ±0.05", tests[2][0].seeds_needed)) !=
        std::string::npos);
  CHECK(study::describe_test(tests[1][2]) == "equivalent within ±0.02: identical in all 5 pairs, Holm p 0");
  CHECK(study::describe_test(tests[0][0]).find("differs: higher by 0.304 (95% CI") == 0);
  // Zero spread is said, never as a zero-width interval.
  CHECK(study::describe_difference(normlab::t_interval({0.1, 0.1, 0.1}), true) == "the same +0.100 in all 3 pairs");
  CHECK(study::describe_difference(normlab::t_interval({0.02}), true) == "+0.020 from 1 pair, no interval");
}

TEST_CASE("verdicts: each endpoint is judged against its own margin (loss, accuracy AUC, accuracy set apart)") {
  study::Comparison c;
  c.variant = "none", c.reference = "pre-ln";
  // The same differences on every endpoint, 0.015 from 0 with a small spread: inside a margin of
  // 0.03, outside one of 0.01.
  const std::vector<double> differences{0.014, 0.016, 0.015, 0.015, 0.014, 0.016};
  c.trained_loss = c.accuracy_auc = c.trained_accuracy = normlab::t_interval(differences);
  study::EquivalenceMargins margins;
  margins.loss = 0.05, margins.accuracy_auc = 0.03, margins.accuracy = 0.01;
  const auto tests = study::test_comparisons({c}, margins);
  REQUIRE(tests.size() == 1);
  REQUIRE(tests[0].size() == 3);
  CHECK(tests[0][1].endpoint == "accuracy AUC");
  CHECK(tests[0][1].margin == 0.03);
  CHECK(tests[0][1].p_equivalence == normlab::p_equivalence(c.accuracy_auc, 0.03));
  CHECK(tests[0][1].verdict == study::Verdict::equivalent);
  CHECK(study::describe_test(tests[0][1]).find("equivalent within ±0.03: ") == 0);
  CHECK(tests[0][2].endpoint == "accuracy");
  CHECK(tests[0][2].margin == 0.01);
  CHECK(tests[0][2].verdict == study::Verdict::differs);
  CHECK(tests[0][0].margin == 0.05);
}

TEST_CASE("charts: per-seed points drawn as circles beside the mean") {
  study::Chart chart;
  study::Series s{"pre-ln", "#0072B2", {0.001, 0.01}, {0.5, 0.7}, {}, {}, false, true, {}, {}, {}};
  s.point_x = {0.001, 0.001, 0.01};
  s.point_y = {0.4, 0.6, 0.7};
  chart.log_x = true;
  chart.series.push_back(s);
  const std::string svg = study::render_svg(chart);
  size_t seeds = 0;
  for (size_t at = svg.find("class=\"seed\""); at != std::string::npos; at = svg.find("class=\"seed\"", at + 1))
    ++seeds;
  CHECK(seeds == 3);
}

TEST_CASE("compare config: equivalence margins read, defaults stated, bad values refused naming the key") {
  TempDir tmp("normlab_equivalence");
  tmp.write("base.json", R"({"task": {"name": "reverse", "max_len": 8, "eval_max_len": 12}, "train": {"steps": 5}})");
  const study::ComparePlan defaults =
      study::load_compare_plan(tmp.write("a.json", R"({"base": "base.json", "grid": {"seeds": [0]}})"));
  CHECK_FALSE(defaults.equivalence.from_config);
  CHECK(defaults.equivalence.loss == 0.05);
  const study::ComparePlan set = study::load_compare_plan(
      tmp.write("b.json", R"({"base": "base.json", "equivalence": {"loss": 0.1, "accuracy_auc": 0.03}})"));
  CHECK(set.equivalence.from_config);
  CHECK(set.equivalence.loss == 0.1);
  CHECK(set.equivalence.accuracy_auc == 0.03);
  CHECK(set.equivalence.accuracy == 0.02);
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"base": "base.json", "equivalence": 0.05})", "equivalence: must be an object"},
           {R"({"base": "base.json", "equivalence": {"loss": 0}})", "equivalence.loss: must be a number in (0, 10]"},
           {R"({"base": "base.json", "equivalence": {"accuracy": 1.5}})",
            "equivalence.accuracy: must be a number in (0, 1]"},
           {R"({"base": "base.json", "equivalence": {"acc": 0.1}})", "equivalence.acc: unknown key"}}) {
    CHECK_THROWS_WITH_AS(study::load_compare_plan(tmp.write("bad.json", text)), doctest::Contains(message.c_str()),
                         InputError);
  }
}

TEST_CASE("held-out set: drawn per train.seed, the same for two runs of one seed") {
  train::RunConfig c;
  c.task.name = data::TaskKind::reverse;
  c.task.max_len = 8;
  c.task.eval_max_len = 12;
  c.task.eval_examples = 64;
  const data::Task task = train::build_task(c);
  c.train.seed = 0;
  const data::Dataset seed0 = train::load_valid_set(c, task);
  const data::Dataset again = train::load_valid_set(c, task);
  c.train.seed = 1;
  const data::Dataset seed1 = train::load_valid_set(c, task);
  REQUIRE(seed0.examples().size() == 64);
  auto same = [](const data::Dataset& a, const data::Dataset& b) {
    for (size_t i = 0; i < a.examples().size(); ++i)
      if (a.examples()[i].tokens != b.examples()[i].tokens) return false;
    return true;
  };
  CHECK(same(seed0, again));
  CHECK_FALSE(same(seed0, seed1));
}
