// The convergence gate, learning-rate sensitivity and direction words (docs/compare.md:
// "The convergence gate", "Learning-rate sensitivity", "How sure"): LR sensitivity against hand
// computations; the plateau rule at its boundary; a fixture whose best rate is at the edge of the
// range extends the search; a fixture whose best runs are still improving makes the Answer say so
// and state no ratio; strict and slow-inclusive boundaries where they differ, with the failure
// counts adding up; the better variant named in every comparison; each run's own chance level.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/study/convergence.hpp"
#include "normlab/study/findings.hpp"
#include "normlab/study/outcome.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/search.hpp"
#include "normlab/study/sensitivity.hpp"
#include "normlab/study/statistics.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace normlab;
using normlab::test::TempDir;

namespace {

const double kLnK = std::log(10.0);

// A finished run of a 10-label task (chance 0.1, ln K = ln 10) of `variant` at `lr`, seed `seed`,
// ending at trained accuracy `accuracy`, with the given held-out losses at steps 100, 200, ...
study::RunResult run_at(const std::string& variant, double lr, uint64_t seed, double accuracy,
                        const std::vector<double>& losses) {
  study::RunResult r;
  r.spec.variant = variant;
  r.spec.config.optim.lr = lr;
  r.spec.name = fmt::format("{}_lr{:g}_s{}", variant, lr, seed);
  r.spec.config.task.name = data::TaskKind::reverse;
  r.spec.config.train.seed = int64_t(seed);
  r.spec.config.train.batch_size = 16;
  r.finished = true;
  r.loss = {2.3, 2.0};
  r.baseline.uniform_loss = kLnK;
  r.baseline.uniform_accuracy = 0.1;
  r.planned_steps = int64_t(100 * losses.size());
  for (size_t i = 0; i < losses.size(); ++i)
    r.evals.push_back({int64_t(100 * (i + 1)), {losses[i], accuracy, 100}, {}, {}, NAN});
  return r;
}

// A search plan over `rates` for `variants` and seeds 0..seeds-1, one setting, no further rounds.
study::ComparePlan search_plan(const std::vector<std::string>& variants, const std::vector<double>& rates, int seeds) {
  study::ComparePlan plan;
  plan.variants = variants;
  plan.settings = {""};
  plan.lrs = rates;
  for (int s = 0; s < seeds; ++s) plan.seeds.push_back(uint64_t(s));
  plan.search.from = rates.front();
  plan.search.to = rates.back();
  plan.search.points = int(rates.size());
  plan.search.rounds = 0;
  plan.search.max_new = 1;
  plan.search.min = plan.search.from;
  plan.search.max = plan.search.to;
  return plan;
}

// The plan a report needs beside the study's: a base config to describe.
study::ComparePlan report_plan(study::ComparePlan plan) {
  plan.base.task.name = data::TaskKind::reverse;
  plan.title = "normlab compare report";
  return plan;
}

// The runs as a report draws them: each training-loss point with its step and gradient norm.
std::vector<study::RunResult> report_runs(std::vector<study::RunResult> runs) {
  for (study::RunResult& r : runs) {
    r.steps.clear();
    for (size_t i = 0; i < r.loss.size(); ++i) r.steps.push_back(double(i + 1));
    r.grad_norm.assign(r.loss.size(), 1.0);
  }
  return runs;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

// Held-out loss trajectories: flat (plateaued) or falling by 20% per evaluation (still improving).
std::vector<double> plateau(double end) { return {end * 1.002, end * 1.001, end}; }
std::vector<double> falling(double end) { return {end / 0.64, end / 0.8, end}; }

}  // namespace

TEST_CASE("LR sensitivity: the mean over log lr of loss minus its minimum, against hand computations") {
  // Three rates a decade apart, losses 1.0, 0.5, 2.0: trapezoids of equal width in ln lr average
  // (1.0 + 0.5) / 2 and (0.5 + 2.0) / 2, i.e. 1.0; minus the lowest, 0.5.
  const std::vector<double> lrs{0.001, 0.01, 0.1};
  CHECK(study::sensitivity_of(lrs, {1.0, 0.5, 2.0}, 0.001, 0.1) == doctest::Approx(0.5).epsilon(1e-12));
  // Half a decade in from each end: the ends interpolate to 0.75 and 1.25 (linear in ln lr); two
  // trapezoids of half a decade each: ((0.75 + 0.5) / 2 + (0.5 + 1.25) / 2) / 2 = 0.75; minus 0.5.
  CHECK(study::sensitivity_of(lrs, {1.0, 0.5, 2.0}, std::pow(10.0, -2.5), std::pow(10.0, -1.5)) ==
        doctest::Approx(0.25).epsilon(1e-12));
  // A flat curve loses nothing; a range the points do not cover has no value.
  CHECK(study::sensitivity_of(lrs, {0.7, 0.7, 0.7}, 0.001, 0.1) == 0.0);
  CHECK(std::isnan(study::sensitivity_of(lrs, {1.0, 0.5, 2.0}, 0.0005, 0.1)));
  CHECK(std::isnan(study::sensitivity_of(lrs, {1.0, 0.5, 2.0}, 0.01, 0.01)));

  // Curves: a diverged run and one above ln K both count as ln K; two seeds.
  std::vector<study::RunResult> runs;
  runs.push_back(run_at("pre-ln", 0.001, 0, 0.6, plateau(1.0)));
  runs.push_back(run_at("pre-ln", 0.01, 0, 0.9, plateau(0.5)));
  runs.push_back(run_at("pre-ln", 0.1, 0, 0.1, plateau(50.0)));  // above ln K: cut to ln K
  runs.push_back(run_at("pre-ln", 0.001, 1, 0.6, plateau(0.8)));
  runs.push_back(run_at("pre-ln", 0.01, 1, 0.9, plateau(0.6)));
  runs.push_back(run_at("pre-ln", 0.1, 1, 0.1, plateau(1.0)));
  runs.back().diverged = true;  // diverged: ln K
  std::vector<const study::RunResult*> pointers;
  for (const study::RunResult& r : runs) pointers.push_back(&r);
  const study::LossCurve curve = study::loss_curve("pre-ln", "", pointers);
  REQUIRE(curve.lrs == lrs);
  REQUIRE(curve.seeds == std::vector<uint64_t>{0, 1});
  CHECK(curve.loss[2][0] == kLnK);
  CHECK(curve.loss[2][1] == kLnK);
  CHECK(curve.capped == std::vector<int>{0, 0, 2});
  CHECK(curve.mean[0].mean == doctest::Approx(0.9));
  CHECK(curve.best == 1);
  CHECK(curve.best_lr() == 0.01);
  CHECK(curve.best_loss() == doctest::Approx(0.55));
  CHECK(curve.best_interior());
  // Seed 0: ((1.0 + 0.5) / 2 + (0.5 + ln 10) / 2) / 2 - 0.5; seed 1: ((0.8 + 0.6) / 2 + (0.6 + ln 10) / 2) / 2 - 0.6.
  const double s0 = ((1.0 + 0.5) / 2 + (0.5 + kLnK) / 2) / 2 - 0.5;
  const double s1 = ((0.8 + 0.6) / 2 + (0.6 + kLnK) / 2) / 2 - 0.6;
  const study::Sensitivity sens = study::lr_sensitivity(curve, 0.001, 0.1);
  REQUIRE(sens.per_seed.size() == 2);
  CHECK(sens.per_seed[0] == doctest::Approx(s0).epsilon(1e-12));
  CHECK(sens.per_seed[1] == doctest::Approx(s1).epsilon(1e-12));
  CHECK(sens.interval.mean == doctest::Approx((s0 + s1) / 2).epsilon(1e-12));
  // The 95% t interval over 2 seeds: mean ± t(1) = 12.706 × sd / sqrt 2, sd = |s0 - s1| / sqrt 2.
  CHECK(sens.interval.high - sens.interval.mean == doctest::Approx(12.706 * std::abs(s0 - s1) / 2).epsilon(1e-3));

  // Another variant on seeds 0 and 1, flat at 0.4 except a worse 0.001 on seed 1: paired difference.
  std::vector<study::RunResult> other;
  for (uint64_t seed : {0, 1})
    for (double lr : lrs) other.push_back(run_at("none", lr, seed, 0.9, plateau(seed == 1 && lr == 0.001 ? 1.2 : 0.4)));
  std::vector<const study::RunResult*> other_pointers;
  for (const study::RunResult& r : other) other_pointers.push_back(&r);
  const study::Sensitivity flat = study::lr_sensitivity(study::loss_curve("none", "", other_pointers), 0.001, 0.1);
  CHECK(flat.per_seed[0] == 0.0);
  CHECK(flat.per_seed[1] == doctest::Approx(((1.2 + 0.4) / 2 + 0.4) / 2 - 0.4).epsilon(1e-12));
  const study::SensitivityDifference d = study::sensitivity_difference(sens, flat);
  CHECK(d.difference.n == 2);
  CHECK(d.difference.mean == doctest::Approx((s0 - 0.0 + s1 - 0.2) / 2).epsilon(1e-12));

  // The common range: where every curve has rates.
  std::vector<const study::RunResult*> narrow;
  for (const study::RunResult& r : other)
    if (r.spec.lr() >= 0.01) narrow.push_back(&r);
  const auto [from, to] = study::common_range({curve, study::loss_curve("none", "", narrow)});
  CHECK(from == 0.01);
  CHECK(to == 0.1);
}

TEST_CASE("convergence gate: plateaued and still improving at the 1% boundary over the last 3 evaluations") {
  CHECK(study::still_improving(run_at("x", 0.01, 0, 0.5, {1.0, 0.995, 0.99})));  // fell by exactly 1%
  CHECK(!study::plateaued(run_at("x", 0.01, 0, 0.5, {1.0, 0.995, 0.99})));
  CHECK(study::plateaued(run_at("x", 0.01, 0, 0.5, {1.0, 0.995, 0.9901})));  // by less
  CHECK(study::plateaued(run_at("x", 0.01, 0, 0.5, {5.0, 1.0, 1.2, 1.1})));  // rose over the last 3
  CHECK(!study::plateaued(run_at("x", 0.01, 0, 0.5, {1.0, 1.0})));           // two evaluations: cannot tell
  CHECK(!study::still_improving(run_at("x", 0.01, 0, 0.5, {2.0, 1.0})));
}

TEST_CASE("convergence gate: still-improving best runs make the Answer open with 'not converged' and state no ratio") {
  const std::vector<double> rates{0.001, 0.01, 0.1};
  // Both variants learn at 0.001 and 0.01 and are at chance at 0.1; their best loss is at 0.01.
  // pre-ln's runs at 0.01 are still falling 20% per evaluation at the last step (300).
  const auto make = [&](bool pre_ln_converged) {
    std::vector<study::RunResult> runs;
    for (const char* variant : {"none", "pre-ln"})
      for (uint64_t seed = 0; seed < 5; ++seed) {
        runs.push_back(run_at(variant, 0.001, seed, 0.6, plateau(1.0 + 0.01 * double(seed))));
        const bool improving = std::string(variant) == "pre-ln" && !pre_ln_converged;
        runs.push_back(run_at(variant, 0.01, seed, 0.7, improving ? falling(0.6) : plateau(0.6 + 0.01 * double(seed))));
        runs.push_back(run_at(variant, 0.1, seed, 0.1, plateau(2.3)));
      }
    return runs;
  };
  const study::ComparePlan plan = search_plan({"none", "pre-ln"}, rates, 5);
  {
    const std::vector<study::RunResult> runs = make(false);
    const auto groups = study::summarize(runs);
    const study::StudyTable table = study::study_table(plan, groups);
    const study::StudyRow* pre = table.find("pre-ln", "");
    REQUIRE(pre);
    CHECK(pre->convergence.bracketed());
    CHECK(pre->convergence.best_lr == 0.01);
    CHECK(pre->convergence.improving == 5);
    CHECK(pre->convergence.judged);
    CHECK(!pre->convergence.converged);
    CHECK(table.find("none", "")->convergence.converged);
    const std::vector<std::string> answer = study::answer(plan, groups);
    INFO(joined(answer));
    REQUIRE(!answer.empty());
    CHECK(
        answer.front() ==
        "not converged: pre-ln's best runs at 0.01 are still improving at step 300 (5 of 5 seeds; 0 of 5 seeds solved "
        "or plateaued) — the boundaries below describe an unfinished race, not stability.");
    CHECK(joined(answer).find("trains at") == std::string::npos);
    CHECK(joined(answer).find("No ratio to none: pre-ln did not converge.") != std::string::npos);
    // The report's first screen says the same from the same table: the verdict opens on pre-ln's
    // failure, its table row says why, and no ratio is stated for it.
    const study::ReportModel report = study::build_report(report_plan(plan), report_runs(runs));
    const std::vector<std::string> verdict = report.summary["verdict"];
    INFO(joined(verdict));
    CHECK(verdict[0] ==
          "Not converged: pre-ln's best runs (lr 0.01) are still improving at step 300 — the boundaries "
          "and ratios below describe an unfinished race, not stability.");
    CHECK(verdict[1].find("1 of 2 variant–setting cells did not converge") == 0);
    CHECK(report.sections[0].table_md.find("| no: 5/5 still improving |") != std::string::npos);
    const nlohmann::json& cells = report.summary["first_screen"];
    REQUIRE(cells.size() == 2);
    CHECK(cells[1]["variant"] == "pre-ln");
    CHECK(cells[1]["converged"] == false);
    CHECK(cells[1]["boundary_ratio_to_none"].is_null());
    CHECK(cells[0]["converged"] == true);
    CHECK(cells[1]["best_lr"].get<double>() == pre->curve.best_lr());
    CHECK(cells[1]["lr_sensitivity"]["mean"].get<double>() == pre->sensitivity.interval.mean);
    CHECK(report.summary["study"] == study::study_json(table));
  }
  {
    const std::vector<study::RunResult> runs = make(true);
    const auto groups = study::summarize(runs);
    const std::string answer = joined(study::answer(plan, groups));
    INFO(answer);
    CHECK(answer.find("not converged") == std::string::npos);
    CHECK(answer.find("not bracketed") == std::string::npos);
    // The same outcomes by both rules (no slow run): the ratio is stated, the slow-inclusive one beside.
    CHECK(answer.find("pre-ln trains at 1.0x [") != std::string::npos);
    CHECK(answer.find("(counting slow runs as learned: 1.0x [") != std::string::npos);
    CHECK(answer.find("disagree") == std::string::npos);
    // Both passed the gate and the rules agree: the first screen states the gate's strict ratio.
    const study::StudyTable table = study::study_table(plan, groups);
    const study::ReportModel report = study::build_report(report_plan(plan), report_runs(runs));
    const nlohmann::json& cells = report.summary["first_screen"];
    REQUIRE(cells.size() == 2);
    CHECK(cells[1]["converged"] == true);
    CHECK(cells[1]["rules_agree"] == true);
    CHECK(cells[1]["boundary_ratio_to_none"]["ratio"].get<double>() == table.find("pre-ln", "")->strict_ratio.ratio);
    const std::vector<std::string> verdict = report.summary["verdict"];
    INFO(joined(verdict));
    CHECK(joined(verdict).find(", boundary 1.0x [0.25x, 4.0x] none's") != std::string::npos);
    CHECK(joined(verdict).find("Not converged") == std::string::npos);
  }
}

TEST_CASE("boundaries by the strict and the slow-inclusive rule differ where slow runs sit below the learned level") {
  const std::vector<double> rates{0.001, 0.01, 0.1, 1.0};
  std::vector<study::RunResult> runs;
  for (const char* variant : {"none", "pre-ln"})
    for (uint64_t seed = 0; seed < 5; ++seed) {
      runs.push_back(run_at(variant, 0.001, seed, 0.6, plateau(1.0)));
      runs.push_back(run_at(variant, 0.01, seed, 0.7, plateau(0.6 + 0.01 * double(seed))));
      if (std::string(variant) == "pre-ln")  // above chance, still falling, short of the learned level 0.325: slow
        runs.push_back(run_at(variant, 0.1, seed, 0.25, falling(1.6)));
      else runs.push_back(run_at(variant, 0.1, seed, 0.1, plateau(2.3)));
      runs.push_back(run_at(variant, 1.0, seed, 0.1, plateau(2.3)));
    }
  CHECK(study::classify(runs[22]) == study::Outcome::slow);
  CHECK(!study::learned_by(runs[22], study::LearnedRule::strict));
  CHECK(study::learned_by(runs[22], study::LearnedRule::slow_inclusive));
  const study::ComparePlan plan = search_plan({"none", "pre-ln"}, rates, 5);
  const auto groups = study::summarize(runs);
  const std::vector<study::VariantBoundary> boundaries = study::lr_boundaries(plan, groups);
  REQUIRE(boundaries.size() == 2);
  const study::VariantBoundary& pre = boundaries[1];
  REQUIRE(pre.variant == "pre-ln");
  REQUIRE(pre.fit.kind == study::BoundaryFit::Kind::boundary);
  REQUIRE(pre.fit_slow_inclusive.kind == study::BoundaryFit::Kind::boundary);
  CHECK(pre.fit.lr50 > 0.01);
  CHECK(pre.fit.lr50 < 0.1);
  CHECK(pre.fit_slow_inclusive.lr50 > 0.1);
  CHECK(pre.fit_slow_inclusive.lr50 < 1.0);
  // none has no slow run: its two fits are the same.
  CHECK(boundaries[0].fit.lr50 == boundaries[0].fit_slow_inclusive.lr50);
  // Above the strict boundary: 10 runs, of which 5 slow (below the learned level) and 5 at chance
  // did not learn; the counts add up.
  CHECK(pre.runs_above.size() == 10);
  CHECK(pre.failing_above == 10);
  CHECK(pre.failures_above == std::map<std::string, int>{{"at chance", 5}, {"slow", 5}});

  const study::StudyTable table = study::study_table(plan, groups);
  const study::StudyRow* row = table.find("pre-ln", "");
  REQUIRE(row);
  CHECK(row->strict_ratio.ratio == doctest::Approx(1.0).epsilon(0.05));
  CHECK(row->slow_inclusive_ratio.ratio > 3);
  CHECK(!row->rules_agree);
  int summed = 0;
  for (const auto& [word, n] : row->failures_above) summed += n;
  CHECK(summed == row->failing_above);
  CHECK(row->failures_text.find("slow below the learned level in 5/10") != std::string::npos);
  CHECK(row->failures_text.find("at chance in 5/10") != std::string::npos);
  const std::string answer = joined(study::answer(plan, groups));
  INFO(answer);
  CHECK(answer.find("pre-ln: half the seeds reach the learned level at lr " + study::format_rate(pre.fit.lr50)) !=
        std::string::npos);
  CHECK(answer.find("(counting slow runs as learned: " + study::format_rate(pre.fit_slow_inclusive.lr50)) !=
        std::string::npos);
  CHECK(answer.find("the two rules disagree, so this ratio is not settled") != std::string::npos);
  // The first screen's table: the strict boundary with the slow-inclusive one beside it, and the
  // ratio to none marked as unsettled since the rules disagree.
  {
    const study::ReportModel report = study::build_report(report_plan(plan), report_runs(runs));
    const std::string& md = report.sections[0].table_md;
    INFO(md);
    CHECK(md.find("| " + study::format_rate(pre.fit.lr50) + " [") != std::string::npos);
    CHECK(md.find("(slow-inclusive " + study::format_rate(pre.fit_slow_inclusive.lr50) + " [") != std::string::npos);
    CHECK(md.find("(rules disagree) | 10 of 10: 5 at chance, 5 slow |") != std::string::npos);
    // One ratio format in the table and the Answer: "1.0x", never "1x".
    const std::string ratio = study::format_ratio(row->strict_ratio.ratio);
    CHECK(ratio.size() == 4);  // "0.9x".."1.1x" style: two significant digits, the zero kept
    CHECK(md.find(ratio + " [") != std::string::npos);
    CHECK(answer.find(ratio + " [") != std::string::npos);
    const std::regex bare(R"((^|[^0-9.])[0-9]x)");  // "1x", "2x": a ratio without its decimal
    CHECK(!std::regex_search(md, bare));
    CHECK(!std::regex_search(answer, bare));
    CHECK(report.summary["first_screen"][1]["boundary_ratio_to_none"]["ratio"].get<double>() ==
          row->strict_ratio.ratio);
    CHECK(joined(report.summary["verdict"].get<std::vector<std::string>>()).find("none's") ==
          std::string::npos);  // no uncaveated ratio
    // The setup says the plan's size by plan_size_sentence, and names the stabilizers only when on.
    CHECK(report.intro[0].find(study::plan_size_sentence(plan)) != std::string::npos);
    CHECK(report.sections[2].title == "Setup");
    CHECK(report.sections[2].text.find("qk_norm") == std::string::npos);
    CHECK(report.sections[2].text.find("z_loss") == std::string::npos);
    study::ComparePlan stabilized = report_plan(plan);
    stabilized.base.model.qk_norm = nn::QkNorm::rmsnorm;
    stabilized.base.optim.z_loss = 1e-4;
    const std::string setup = study::build_report(stabilized, report_runs(runs)).sections[2].text;
    CHECK(setup.find("Query-key normalization (model.qk_norm): rmsnorm.") != std::string::npos);
    CHECK(setup.find("z-loss (optim.z_loss): 0.0001 log(Z)^2 added to the loss.") != std::string::npos);
  }
  // summary.json's boundaries carry both rules.
  const nlohmann::json json = study::boundaries_json(plan, groups);
  CHECK(json[1]["rule"] == "strict");
  CHECK(json[1]["slow_inclusive"]["lr50"].get<double>() == pre.fit_slow_inclusive.lr50);
}

TEST_CASE("convergence gate: a best rate at the edge of the range extends the search, down to search.lr.min") {
  study::LrSearchSpec spec;
  spec.from = 0.001, spec.to = 0.1, spec.points = 3, spec.min = 0.0001, spec.max = 1.0;
  const std::vector<double> tested{0.001, 0.01, 0.1};
  CHECK(study::extension_rates(tested, 0.001, spec) == std::vector<double>{0.0001});  // one round-0 step (10x) down
  CHECK(study::extension_rates(tested, 0.1, spec) == std::vector<double>{1.0});
  CHECK(study::extension_rates(tested, 0.01, spec).empty());  // interior: bracketed
  spec.min = 0.0003;
  CHECK(study::extension_rates(tested, 0.001, spec) == std::vector<double>{0.0003});  // clamped at min
  CHECK(study::extension_rates({0.0003, 0.001, 0.01, 0.1}, 0.0003, spec).empty());    // at the limit

  // End to end through the plan: runs on disk with the lowest loss at the lowest rate.
  TempDir tmp;
  const std::string config = tmp.write("search.json", R"({
    "base": {"model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
             "task": {"name": "reverse", "min_len": 1, "max_len": 3, "eval_max_len": 4},
             "optim": {"lr": 0.01, "warmup_steps": 0},
             "train": {"steps": 30, "batch_size": 16, "eval_every": 10}},
    "grid": {"variants": ["pre-ln"], "seeds": [0]},
    "search": {"lr": {"from": 0.001, "to": 0.1, "points": 3, "rounds": 0, "min": 0.0001}}})");
  const std::string out = tmp.sub("out");
  const auto write_run = [&](const std::string& name, double final_loss, double accuracy) {
    const fs::path dir = fs::path(out) / "runs" / name;
    fs::create_directories(dir);
    std::ofstream metrics(dir / "metrics.jsonl");
    for (int step : {10, 20, 30})
      metrics << nlohmann::json({{"step", step},
                                 {"split", "valid"},
                                 {"loss", final_loss},
                                 {"accuracy", accuracy},
                                 {"buckets",
                                  {{{"min_len", 1},
                                    {"max_len", 3},
                                    {"beyond_train", false},
                                    {"loss", final_loss},
                                    {"accuracy", accuracy},
                                    {"count", 10}}}}})
                     .dump()
              << "\n";
    std::ofstream(dir / "summary.json") << R"({"diverged": false, "wall_time_s": 1, "threads": 1})";
  };
  study::ComparePlan plan = study::load_compare_plan(config, out);
  REQUIRE(plan.runs.size() == 3);
  CHECK(plan.search.min == 0.0001);
  CHECK(!plan.search.blocks.front().settled);
  write_run(plan.runs[0].name, 0.5, 0.8);  // 0.001: the best
  write_run(plan.runs[1].name, 0.9, 0.6);
  write_run(plan.runs[2].name, 2.3, 0.1);
  plan = study::load_compare_plan(config, out);
  REQUIRE(plan.runs.size() == 4);
  CHECK(plan.runs[3].lr() == 0.0001);
  CHECK(plan.runs[3].name == "pre-ln_lr0.0001_L1_nowarmup_s0");
  CHECK(plan.search.blocks.front().waiting_on == plan.runs[3].name);
  // The new rate is worse: the best (0.001) is now interior and the search is settled.
  write_run(plan.runs[3].name, 0.7, 0.7);
  plan = study::load_compare_plan(config, out);
  CHECK(plan.runs.size() == 4);
  CHECK(plan.search.blocks.front().settled);
  CHECK(plan.lrs == std::vector<double>{0.0001, 0.001, 0.01, 0.1});
  // Had it been better still, the limit (min 0.0001) stops the extension and the Answer says so.
  write_run(plan.runs[3].name, 0.3, 0.9);
  plan = study::load_compare_plan(config, out);
  CHECK(plan.runs.size() == 4);
  CHECK(plan.search.blocks.front().settled);
  std::vector<study::RunResult> results;
  for (const study::RunSpec& spec : plan.runs)
    results.push_back(study::read_run(spec, (fs::path(out) / "runs" / spec.name).string()));
  const auto groups = study::summarize(results);
  const study::StudyTable table = study::study_table(plan, groups);
  REQUIRE(table.rows.size() == 1);
  CHECK(table.rows[0].convergence.edge == study::ConvergenceCheck::Edge::low);
  CHECK(table.rows[0].convergence.at_limit);
  CHECK(joined(study::answer(plan, groups))
            .find("not bracketed: pre-ln's lowest final held-out loss is at 0.0001, the lowest rate probed — the best "
                  "rate may lie outside the range") != std::string::npos);

  // The plan's size in one sentence whose numbers add up: 3 rates x 1 x 1 x 1 in round 0, 1 later.
  CHECK(study::plan_size_sentence(plan) ==
        "Search: 1 variants × 1 settings × 1 seeds: round 0 at 3 rates from 0.001 to 0.1 (3 runs), then 1 runs at the "
        "rates each variant and setting's later rounds chose = 4 runs at 4 distinct rates.");
  const std::string grid = tmp.write("grid.json", R"({"base": "search.json", "grid": {"variants": ["none", "pre-ln"],
    "lr": [0.001, 0.01, 0.1], "seeds": [0, 1]}})");
  const study::ComparePlan grid_plan = study::load_compare_plan(grid);
  CHECK(grid_plan.runs.size() == 12);
  CHECK(study::plan_size_sentence(grid_plan) ==
        "Grid: 2 variants × 3 learning rates × 2 seeds × 1 depths × 1 warmup settings = 12 runs.");

  // min above from, max below to: refused, naming the key.
  const std::string bad = tmp.write("bad.json", R"({"base": "search.json",
    "search": {"lr": {"from": 0.001, "to": 0.1, "min": 0.01}}})");
  CHECK_THROWS_WITH_AS(study::load_compare_plan(bad), doctest::Contains("search.lr.min: must be at most from"),
                       InputError);
}

TEST_CASE("direction words: every comparison names the better variant, its lead and the interval of that lead") {
  const auto comparison = [](std::vector<double> loss, std::vector<double> accuracy) {
    study::Comparison c;
    c.variant = "none", c.reference = "pre-ln";
    c.trained_loss = normlab::t_interval(loss);
    c.accuracy_auc = normlab::t_interval(accuracy);
    c.trained_accuracy = normlab::t_interval({0, 0, 0, 0, 0});
    return c;
  };
  const std::vector<double> wide{-0.5, 0.1, -0.3, 0.05, -0.25};  // none - pre-ln: mean -0.18, wide
  const std::vector<study::Comparison> comparisons{comparison(wide, {0.1, 0.11, 0.09, 0.1, 0.12}),
                                                   comparison({0.30, 0.31, 0.29, 0.30, 0.32},
                                                              {-0.1, -0.11, -0.1, -0.09, -0.1})};
  const auto tests = study::test_comparisons(comparisons, study::EquivalenceMargins{});
  const normlab::Interval w = normlab::t_interval(wide);
  // none has the lower loss: it is named, with the interval of none - pre-ln.
  CHECK(study::direction_text(tests[0][0], "none", "pre-ln") ==
        fmt::format("none lower by 0.180 nats [{:+.3f}, {:+.3f}]; undecided (about {} pairs would decide)", w.low,
                    w.high, tests[0][0].seeds_needed));
  // pre-ln has the lower loss: it is named, with the interval of pre-ln - none (signs flipped).
  const normlab::Interval p = normlab::t_interval({0.30, 0.31, 0.29, 0.30, 0.32});
  CHECK(study::direction_text(tests[1][0], "none", "pre-ln")
            .find(fmt::format("pre-ln lower by 0.304 nats [{:+.3f}, {:+.3f}]; differs (Holm p ", -p.high, -p.low)) ==
        0);
  // Accuracy AUC: the higher is better.
  CHECK(study::direction_text(tests[0][1], "none", "pre-ln").find("none higher by 0.104 [") == 0);
  CHECK(study::direction_text(tests[1][1], "none", "pre-ln").find("pre-ln higher by 0.100 [") == 0);
  // Zero spread: identical in every pair, equivalent.
  CHECK(study::direction_text(tests[0][2], "none", "pre-ln") ==
        "identical in all 5 pairs; equivalent within ±0.02 (Holm p 0)");
}

TEST_CASE("ratios: one format, two significant digits with the zero kept, whole numbers from 10") {
  CHECK(study::format_ratio(0.5) == "0.50x");
  CHECK(study::format_ratio(0.994) == "0.99x");
  CHECK(study::format_ratio(0.996) == "1.0x");
  CHECK(study::format_ratio(1.0) == "1.0x");
  CHECK(study::format_ratio(2.0) == "2.0x");
  CHECK(study::format_ratio(9.94) == "9.9x");
  CHECK(study::format_ratio(9.96) == "10x");
  CHECK(study::format_ratio(14.2) == "14x");
  CHECK(study::format_ratio(NAN) == "?");
}

TEST_CASE("direction words: the pairs that would decide are stated up to 1000, beyond it as 'more than 1000'") {
  // An estimate near zero needs absurdly many pairs (23955 in a real report): the number is capped.
  study::EndpointTest t;
  t.endpoint = "accuracy AUC", t.margin = 0.02, t.verdict = study::Verdict::undecided, t.seeds_for_equivalence = false;
  t.difference = normlab::t_interval({0.1, -0.05, 0.02, 0.06, -0.04});  // mean +0.018
  const std::string lead =
      fmt::format("none higher by 0.018 [{:+.3f}, {:+.3f}]; undecided ", t.difference.low, t.difference.high);
  t.seeds_needed = study::kMaxSeedsStated;  // just inside the cap: the number
  CHECK(study::direction_text(t, "none", "pre-ln") == lead + "(about 1000 pairs would decide)");
  t.seeds_needed = study::kMaxSeedsStated + 1;  // just outside: the phrase
  CHECK(study::direction_text(t, "none", "pre-ln") == lead + "(more than 1000 pairs would decide)");
  t.seeds_needed = 23955;
  CHECK(study::direction_text(t, "none", "pre-ln") == lead + "(more than 1000 pairs would decide)");
  CHECK(study::describe_test(t).find("; more than 1000 pairs would show a difference (80% power") != std::string::npos);
  t.paired = false, t.seeds_needed = 12;
  CHECK(study::seeds_needed_words(t.seeds_needed, t.paired) == "about 12 seeds per variant");
  CHECK(study::seeds_needed_words(1001, false) == "more than 1000 seeds per variant");
}

TEST_CASE("counting: each run's own chance level in the evidence, and the failures above a boundary add up") {
  std::vector<study::RunResult> runs{run_at("none", 0.1, 0, 0.148, plateau(2.3)),
                                     run_at("none", 0.1, 1, 0.09, plateau(2.3))};
  runs[0].baseline.majority_accuracy = 0.109;  // this seed's held-out set: the majority label at 0.109
  std::vector<const study::RunResult*> one{&runs[0]}, both{&runs[0], &runs[1]};
  // 0.148 is below c + 0.05 (1 - c) = 0.154 of its own chance 0.109: at chance, against 0.109.
  CHECK(study::classify(runs[0]) == study::Outcome::at_chance);
  CHECK(study::describe_failures(one) ==
        "at chance in 1/1 — held-out accuracy 0.148 (chance 0.109); no diagnostics to name a mechanism");
  CHECK(study::describe_failures(both) ==
        "at chance in 2/2 — held-out accuracy 0.090–0.148 (chance 0.100–0.109); no diagnostics to name a "
        "mechanism");
  // Out of a larger group: the clause counts against it.
  CHECK(study::describe_failures(one, 20) ==
        "at chance in 1/20 — held-out accuracy 0.148 (chance 0.109); no diagnostics to name a mechanism");
}

TEST_CASE("counting: the runs above a boundary add up by outcome, a slow run at the learned level is not a failure") {
  // none at 5 rates: learned at 0.001 and 0.01; above: slow at the learned level (learned by both
  // rules), slow below it, diverged, exploded by loss, at chance.
  const std::vector<double> rates{0.001, 0.01, 0.1, 1.0, 10.0};
  std::vector<study::RunResult> runs;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    runs.push_back(run_at("none", 0.001, seed, 0.6, plateau(1.0)));
    runs.push_back(run_at("none", 0.01, seed, 0.7, plateau(0.6)));
  }
  runs.push_back(run_at("none", 0.1, 0, 0.5, falling(1.2)));  // slow at the learned level 0.325
  runs.push_back(run_at("none", 0.1, 1, 0.2, falling(1.8)));  // slow below it
  runs.push_back(run_at("none", 0.1, 2, 0.1, plateau(2.3)));  // at chance
  runs.push_back(run_at("none", 0.1, 3, 0.1, plateau(2.3)));  // at chance
  runs.push_back(run_at("none", 0.1, 4, 0.1, plateau(2.3)));  // at chance
  for (uint64_t seed = 0; seed < 5; ++seed) {
    runs.push_back(run_at("none", 1.0, seed, 0.1, plateau(2.3)));
    if (seed < 2) runs.back().diverged = true, runs.back().diverged_at = 150;  // diverged
    runs.push_back(run_at("none", 10.0, seed, 0.0, plateau(50.0)));            // exploded (loss above 2 ln K)
  }
  CHECK(study::classify(runs[10]) == study::Outcome::slow);
  CHECK(study::learned_by(runs[10], study::LearnedRule::strict));
  const study::ComparePlan plan = search_plan({"none"}, rates, 5);
  const auto groups = study::summarize(runs);
  const study::StudyTable table = study::study_table(plan, groups);
  REQUIRE(table.rows.size() == 1);
  const study::StudyRow& row = table.rows[0];
  REQUIRE(row.strict.kind == study::BoundaryFit::Kind::boundary);
  CHECK(row.strict.lr50 > 0.01);
  CHECK(row.strict.lr50 < 0.1);
  CHECK(row.runs_above == 15);
  CHECK(row.failing_above == 14);  // all but the slow run at the learned level
  CHECK(row.failures_above ==
        std::map<std::string, int>{{"at chance", 6}, {"diverged", 2}, {"exploded", 5}, {"slow", 1}});
  int summed = 0;
  for (const auto& [word, n] : row.failures_above) summed += n;
  CHECK(summed == row.failing_above);
  // The table cell and the sentence say the same numbers, each out of the runs above.
  CHECK(row.failures_short == "14 of 15: 6 at chance, 5 exploded, 2 diverged, 1 slow");
  CHECK(row.failures_text ==
        "diverged in 2/15 — non-finite at step 150; exploded in 5/15 — held-out loss 50 (over 2x the uniform guess's); "
        "slow "
        "below the learned level in 1/15 — held-out loss still falling at the end: 2.81 → 1.8 over steps 100–300; at "
        "chance in 6/15 — held-out accuracy 0.100 (chance 0.100); no diagnostics to name a mechanism");

  // The Findings' first line counts every finished run once: its numbers add up to the finished runs.
  const std::vector<std::string> findings = study::findings(plan, groups);
  REQUIRE(!findings.empty());
  INFO(findings.front());
  CHECK(findings.front().find("25 of 25 runs finished (5 seeds per cell): 0 solved, 10 learned, 2 slow, 0 weak, 6 at "
                              "chance, 0 collapsed, 5 exploded, 2 diverged") == 0);
}
