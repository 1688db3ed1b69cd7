// The report's numbers on hand-made run directories with known answers: what read_run takes from
// metrics.jsonl / summary.json (and refuses), medians over seeds, diverged runs left out, bucket
// statistics, the outcome words and their thresholds, the Findings, chart ticks, `report` inputs.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/provenance.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/study/svg.hpp"
#include "normlab/train/config.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::read_text;
using normlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A run directory written by hand: config.json (resolved), metrics.jsonl with the given per-step
// losses and one evaluation with two buckets, summary.json.
std::string make_run(const TempDir& tmp, const std::string& name, const nlohmann::json& overrides,
                     const std::vector<double>& losses, double bucket1_acc, double bucket2_acc, bool diverged = false,
                     const std::string& task = "reverse", double bucket1_loss = 1.0) {
  const fs::path dir = tmp.path / name;
  fs::create_directories(dir);
  nlohmann::json config = nlohmann::json::object();
  config["task"]["name"] = task;
  config["train"]["steps"] = losses.size();
  for (const auto& [section, values] : overrides.items())
    for (const auto& [key, value] : values.items()) config[section][key] = value;
  const nlohmann::json resolved = train::to_json(train::config_from_json(config, name, ".", false));
  std::ofstream(dir / "config.json") << resolved.dump(2);
  std::ofstream metrics(dir / "metrics.jsonl");
  for (size_t i = 0; i < losses.size(); ++i) {
    nlohmann::json rec = {{"step", i + 1}, {"loss", losses[i]}, {"accuracy", 0.5}, {"grad_norm", 1.0 + double(i)}};
    if (i == 0 || i + 1 == losses.size()) {
      rec["residual_rms"] = {1.0 + double(i), 2.0 + double(i)};
      rec["layer_grad_norms"] = {0.5, 0.25};
    }
    metrics << rec.dump() << "\n";
  }
  if (diverged)
    metrics << R"({"step":)" << losses.size() + 1 << R"(,"loss":null,"grad_norm":null,"diverged":true})"
            << "\n";
  metrics << nlohmann::json({{"step", losses.size()},
                             {"split", "valid"},
                             {"loss", losses.back() + 1},
                             {"accuracy", 0.5 * (bucket1_acc + bucket2_acc)},
                             {"buckets",
                              {{{"min_len", 1},
                                {"max_len", 8},
                                {"beyond_train", false},
                                {"loss", bucket1_loss},
                                {"accuracy", bucket1_acc},
                                {"count", 10}},
                               {{"min_len", 9},
                                {"max_len", 16},
                                {"beyond_train", true},
                                {"loss", 2.0},
                                {"accuracy", bucket2_acc},
                                {"count", 10}}}}})
                 .dump()
          << "\n";
  metrics << R"({"step": 99, "loss": 1.)";  // a torn last line, as a killed run leaves it
  std::ofstream(dir / "summary.json")
      << nlohmann::json({{"diverged", diverged},
                         {"diverged_at_step", diverged ? nlohmann::json(losses.size() + 1) : nlohmann::json(nullptr)},
                         {"wall_time_s", 1.5},
                         {"threads", 1}})
             .dump();
  return dir.string();
}

std::vector<double> flat(double start, double end, size_t n = 20) {
  std::vector<double> out;
  for (size_t i = 0; i < n; ++i) out.push_back(i + 1 == n ? end : (i < n - 2 ? start : end));
  return out;
}

}  // namespace

TEST_CASE("report numbers: medians over seeds, diverged seeds left out, bucket medians") {
  TempDir tmp("normlab_report_numbers");
  // Three seeds of one setting: final train losses (mean of the last 10% = last 2 of 20 steps) 0.5, 1.0, 4.0;
  // a fourth seed diverged.
  std::vector<std::string> dirs{
      make_run(tmp, "a", {{"train", {{"seed", 0}}}}, flat(2.3, 0.5), 0.9, 0.1),
      make_run(tmp, "b", {{"train", {{"seed", 1}}}}, flat(2.3, 1.0), 0.7, 0.3),
      make_run(tmp, "c", {{"train", {{"seed", 2}}}}, flat(2.3, 4.0), 0.8, 0.2),
      make_run(tmp, "d", {{"train", {{"seed", 3}}}}, flat(2.3, 0.1), 0.0, 0.0, /*diverged=*/true),
  };
  const study::ComparePlan plan = study::plan_from_run_dirs(dirs, {});
  REQUIRE(plan.runs.size() == 4);
  CHECK(plan.variants.size() == 1);  // only the seed differs: one series
  std::vector<study::RunResult> results;
  for (const study::RunSpec& spec : plan.runs) results.push_back(study::read_run(spec, spec.dir));
  CHECK(results[0].final_train_loss == doctest::Approx(0.5));
  CHECK(results[0].steps.size() == 20);  // the torn line is skipped
  CHECK(results[0].init_residual_rms == std::vector<double>{1.0, 2.0});
  CHECK(results[0].end_residual_rms == std::vector<double>{20.0, 21.0});
  CHECK(results[3].diverged);
  CHECK(std::isnan(results[3].final_train_loss));

  CHECK(study::chance_loss(plan.base) == doctest::Approx(std::log(10.0)));
  CHECK(results[0].baseline.uniform_accuracy == doctest::Approx(0.1));
  // Trained lengths (bucket 1-8) and unseen ones (9-16) apart, from the buckets.
  REQUIRE(results[0].evals.size() == 1);
  CHECK(results[0].final_trained().accuracy == doctest::Approx(0.9));
  CHECK(results[0].final_unseen().accuracy == doctest::Approx(0.1));
  CHECK(results[0].final_trained().loss == doctest::Approx(1.0));
  CHECK(results[0].final_unseen().loss == doctest::Approx(2.0));
  CHECK(results[0].evals[0].step == 20);
  const std::vector<study::GroupSummary> groups = study::summarize(results);
  REQUIRE(groups.size() == 1);
  const study::GroupSummary& g = groups[0];
  CHECK(g.train_loss == doctest::Approx(1.0));  // median of 0.5, 1.0, 4.0: the diverged seed is left out
  CHECK(g.train_loss_min == doctest::Approx(0.5));
  CHECK(g.train_loss_max == doctest::Approx(4.0));
  // Accuracy counts the diverged seed as a uniform guess (0.1); loss leaves it out.
  CHECK(g.trained_accuracy.n == 4);
  CHECK(g.trained_accuracy.mean == doctest::Approx((0.9 + 0.7 + 0.8 + 0.1) / 4));
  CHECK(g.trained_loss.n == 3);
  CHECK(g.unseen_accuracy.mean == doctest::Approx((0.1 + 0.3 + 0.2 + 0.1) / 4));
  CHECK(g.diverged == 1);
  CHECK(g.learned == 3);  // judged on held-out trained lengths, not the final train loss (4.0 for seed 2)
  CHECK(g.at_chance == 0);
  CHECK(g.exploded == 0);
  CHECK(g.mostly_learned());
  CHECK(g.bucket_accuracy.at({1, 8}) == doctest::Approx(0.8));   // median of 0.9, 0.7, 0.8
  CHECK(g.bucket_accuracy.at({9, 16}) == doctest::Approx(0.2));  // median of 0.1, 0.3, 0.2
  CHECK(g.bucket_beyond_train.at({9, 16}));

  // The report drawn from them records what produced it and the outcomes.
  const std::string out = tmp.sub("report");
  fs::create_directories(out);
  study::write_report(plan, results, out);
  const nlohmann::json summary = nlohmann::json::parse(read_text(out + "/summary.json"));
  CHECK(summary["normlab_version"] == NORMLAB_VERSION);
  CHECK(summary["cpu"].get<std::string>() == normlab::cpu_model());
  CHECK(summary["threads"] == nlohmann::json::array({1}));
  CHECK(summary["outcomes"]["diverged"] == 1);
  const std::string md = read_text(out + "/report.md");
  CHECK(md.find("## Answer") != std::string::npos);
  CHECK(md.find("## Answer") < md.find("## Findings"));
  CHECK(md.find("uniform-guess loss 2.303") != std::string::npos);
  CHECK(md.find("BatchNorm") == std::string::npos);     // no BatchNorm run: no BatchNorm paragraph
  CHECK(md.find("fewer than 5") != std::string::npos);  // 4 seeds: the warning
  CHECK(read_text(out + "/runs.csv").find(",diverged,") != std::string::npos);
  // Every chart as a file, every curve in curves.csv.
  REQUIRE(plan.lrs.size() == 1);
  CHECK(fs::exists(out + fmt::format("/charts/valid-accuracy-lr{:g}.svg", plan.lrs[0])));
  CHECK(fs::exists(out + fmt::format("/charts/train-loss-lr{:g}.svg", plan.lrs[0])));
  const std::string curves = read_text(out + "/curves.csv");
  CHECK(curves.rfind("run,variant,lr,seed,step,split,lengths,loss,accuracy\n", 0) == 0);
  CHECK(curves.find("a,") != std::string::npos);
  CHECK(curves.find(",20,valid,trained,1,0.9\n") != std::string::npos);
  CHECK(curves.find(",20,valid,unseen,2,0.1\n") != std::string::npos);
  CHECK(curves.find(",1,train,all,2.3,0.5\n") != std::string::npos);

  // A stop request while drawing: no file is written over.
  const std::string stopped = tmp.sub("stopped");
  fs::create_directories(stopped);
  int polls = 0;
  CHECK_THROWS_AS(study::write_report(plan, results, stopped, [&] { return ++polls > 2; }), study::ReportStopped);
  CHECK(polls == 3);
  CHECK(fs::is_empty(stopped));
}

TEST_CASE("report numbers: the outcome words and their thresholds, at the boundary") {
  study::RunResult r;
  r.finished = true;
  r.loss = {2.3, 2.0};
  r.baseline.uniform_loss = std::log(10.0);
  r.baseline.uniform_accuracy = 0.1;
  auto judged = [&](double accuracy, double loss = 1.0) {
    r.evals = {study::EvalPoint{100, {loss, accuracy, 50}, {3.0, 0.1, 50}, {2.0, 0.5, 100}}};
    return study::classify(r);
  };
  const double c = 0.1;
  const double learned_at = c + study::kLearnedShare * (1 - c), weak_at = c + study::kChanceShare * (1 - c);
  CHECK(judged(1.0) == study::Outcome::solved);
  CHECK(judged(study::kSolvedAccuracy) == study::Outcome::solved);
  CHECK(judged(std::nextafter(study::kSolvedAccuracy, 0.0)) == study::Outcome::learned);
  CHECK(judged(learned_at) == study::Outcome::learned);
  CHECK(judged(std::nextafter(learned_at, 0.0)) == study::Outcome::weak);
  CHECK(judged(weak_at) == study::Outcome::weak);
  CHECK(judged(std::nextafter(weak_at, 0.0)) == study::Outcome::at_chance);
  CHECK(judged(0.0) == study::Outcome::at_chance);
  // Held-out loss against 2x the uniform guess's ln 10: worse than guessing is "exploded".
  CHECK(judged(0.5, 2 * std::log(10.0)) == study::Outcome::learned);
  CHECK(judged(0.5, std::nextafter(2 * std::log(10.0), 100.0)) == study::Outcome::exploded);
  CHECK(judged(0.0, NAN) == study::Outcome::exploded);
  // The chance level is the better guess: with a majority label at 0.6, 0.65 is only weak.
  r.baseline.majority_accuracy = 0.6;
  CHECK(r.baseline.chance_accuracy() == 0.6);
  CHECK(judged(0.65) == study::Outcome::weak);
  CHECK(judged(0.6 + 0.25 * 0.4) == study::Outcome::learned);
  CHECK(judged(0.61) == study::Outcome::at_chance);
  // The train loss does not judge: a memorized train set with chance held-out accuracy is at chance.
  r.baseline.majority_accuracy = NAN;
  r.final_train_loss = 0.0;
  CHECK(judged(0.1) == study::Outcome::at_chance);
  r.diverged = true;
  CHECK(study::classify(r) == study::Outcome::diverged);
  CHECK(r.judged_accuracy() == 0.1);  // a diverged seed counts as the uniform guess
  r.diverged = false;
  r.evals.clear();
  CHECK(study::classify(r) == study::Outcome::not_evaluated);
  r = {};
  CHECK(study::classify(r) == study::Outcome::unfinished);
}

TEST_CASE("report numbers: 'most seeds' means more than half - exactly half is not most") {
  study::RunResult learned, failed;
  study::GroupSummary g;
  g.runs = {&learned, &failed, &learned, &failed};
  g.learned = 2;
  CHECK_FALSE(g.mostly_learned());
  g.solved = 1;  // 3 of 4
  CHECK(g.mostly_learned());
  g.runs = {&learned, &failed, &failed};
  g.learned = 1, g.solved = 0;
  CHECK_FALSE(g.mostly_learned());
  g.learned = 2;
  CHECK(g.mostly_learned());
}

TEST_CASE("report numbers: loss spikes, steps to solve and peak gradient norm by their definitions") {
  study::RunResult r;
  r.loss.assign(study::kSpikeWindow + 5, 1.0);
  r.loss.push_back(3.0);  // a spike
  r.loss.push_back(3.0);  // the same spike, still high
  r.loss.push_back(1.0);
  r.loss.push_back(2.0);  // exactly 2x the median: not a spike
  r.loss.push_back(2.5);  // a second spike
  r.loss.push_back(NAN);  // not finite: not a spike
  CHECK(r.loss_spikes() == 2);
  // Near zero loss, doubling is noise: 0.001 -> 0.01 rises by less than 0.05x the first loss.
  study::RunResult converged;
  converged.loss.assign(study::kSpikeWindow + 1, 0.001);
  converged.loss.front() = 2.3;
  converged.loss.push_back(0.01);
  CHECK(converged.loss_spikes() == 0);
  converged.loss.push_back(0.001 + 0.05 * 2.3 + 0.001);  // rises past the floor: a spike
  CHECK(converged.loss_spikes() == 1);
  study::RunResult short_run;
  short_run.loss.assign(study::kSpikeWindow, 1.0);
  short_run.loss.back() = 100.0;  // within the first window: nothing to compare with
  CHECK(short_run.loss_spikes() == 0);
  r.evals = {{100, {1.0, 0.5, 10}, {}, {}}, {200, {0.1, 0.95, 10}, {}, {}}, {300, {0.05, 0.99, 10}, {}, {}}};
  CHECK(r.steps_to_solve() == 200);
  r.evals[1].trained.accuracy = 0.9499;
  CHECK(r.steps_to_solve() == 300);
  r.evals.pop_back();
  CHECK(r.steps_to_solve() == -1);
  r.grad_norm = {1.0, NAN, 7.5, 3.0, INFINITY};
  CHECK(r.peak_grad_norm() == 7.5);
}

TEST_CASE("report numbers: findings and the Answer on a fixture with known answers") {
  TempDir tmp("normlab_findings");
  std::vector<std::string> dirs;
  // pre-ln learns at both rates; none learns as well at 0.001 (identical accuracies: no difference)
  // and blows up at 0.03 (held-out loss 50, far above 2 ln 10).
  for (int seed = 0; seed < 3; ++seed) {
    dirs.push_back(
        make_run(tmp, fmt::format("pre_a{}", seed),
                 {{"train", {{"seed", seed}}}, {"optim", {{"lr", 0.001}}}, {"model", {{"norm", "layernorm"}}}},
                 flat(2.3, 1.0 + 0.01 * seed), 0.9, 0.1));
    dirs.push_back(
        make_run(tmp, fmt::format("pre_b{}", seed),
                 {{"train", {{"seed", seed}}}, {"optim", {{"lr", 0.03}}}, {"model", {{"norm", "layernorm"}}}},
                 flat(2.3, 1.2 + 0.01 * seed), 0.96 + 0.01 * seed, 0.1));
    dirs.push_back(make_run(tmp, fmt::format("none_a{}", seed),
                            {{"train", {{"seed", seed}}}, {"optim", {{"lr", 0.001}}}, {"model", {{"norm", "none"}}}},
                            flat(2.3, 1.005 + 0.01 * seed), 0.9, 0.1));
    dirs.push_back(make_run(tmp, fmt::format("none_b{}", seed),
                            {{"train", {{"seed", seed}}}, {"optim", {{"lr", 0.03}}}, {"model", {{"norm", "none"}}}},
                            flat(2.3, 1e8 * (seed + 1)), 0.0, 0.0, false, "reverse", 50.0));
  }
  const study::ComparePlan plan = study::plan_from_run_dirs(dirs, {});
  CHECK(plan.variants == std::vector<std::string>{"model.norm=layernorm", "model.norm=none"});
  CHECK(plan.lrs == std::vector<double>{0.001, 0.03});
  CHECK(study::variant_kind(plan, "model.norm=none") == "none");
  CHECK(study::reference_variant(plan) == "model.norm=layernorm");  // pre-ln is the base config's placement
  std::vector<study::RunResult> results;
  for (const study::RunSpec& spec : plan.runs) results.push_back(study::read_run(spec, spec.dir));
  const auto groups = study::summarize(results);
  std::string all;
  for (const std::string& l : study::findings(plan, groups)) all += l + "\n";
  INFO(all);
  CHECK(all.find("12 of 12 runs finished (3 seeds per cell): 3 solved, 6 learned, 0 slow, 0 weak, 0 at chance, "
                 "0 collapsed, 3 exploded, 0 diverged — judged on held-out data of trained lengths 1–32.") !=
        std::string::npos);
  // The evidence comes with the word: the held-out loss the runs ended at.
  CHECK(all.find("Exploded (held-out loss above 2x the uniform guess's, or residual RMS grown 100x): "
                 "model.norm=none at lr 0.03 (3/3: held-out loss 50 (over 2x the uniform guess's)).") !=
        std::string::npos);
  CHECK(all.find("Stable learning-rate range (tested rates at which most seeds learned): model.norm=layernorm "
                 "0.001–0.03 (2 of 2); model.norm=none 0.001 (1 of 2).") != std::string::npos);
  // The tests and their family, said once.
  CHECK(all.find("Tests: 2 comparisons against model.norm=layernorm × 3 endpoints on trained lengths (held-out loss, "
                 "accuracy AUC, final accuracy), each with a difference test (paired t) and an equivalence test (two "
                 "one-sided t tests) — 12 p-values, Holm-adjusted together at alpha 0.05. Equivalence margins "
                 "(defaults): loss ±0.05, accuracy AUC ±0.02, accuracy ±0.02.") != std::string::npos);
  // Two identical groups: zero spread is said as such (no "+0.000, 95% CI +0.000 to +0.000"), and
  // identical in every pair is equivalent within any margin. Paired by seed: same task, seed and batch size.
  CHECK(all.find("lr 0.001: against model.norm=layernorm, trained lengths — model.norm=none (held-out loss: identical "
                 "in all 3 pairs; equivalent within ±0.05 (Holm p 0); accuracy AUC: identical in all 3 pairs; "
                 "equivalent within ±0.02 (Holm p 0); accuracy: identical in all 3 pairs; equivalent within ±0.02 "
                 "(Holm p 0); unseen-length accuracy identical in all 3 pairs).") != std::string::npos);
  CHECK(all.find("no difference shown") == std::string::npos);
  CHECK(all.find("+0.000, 95% CI +0.000 to +0.000") == std::string::npos);
  // 0.0 against 0.96, 0.97, 0.98: mean -0.97, sd 0.01, t_2 = 4.303.
  // The better variant is named, with the interval of its lead (its value minus the other's).
  CHECK(all.find("lr 0.03: against model.norm=layernorm, trained lengths — model.norm=none (held-out loss: "
                 "model.norm=layernorm lower by 49.000 nats in all 3 pairs; differs (Holm p 0);") != std::string::npos);
  CHECK(all.find(fmt::format("; accuracy: model.norm=layernorm higher by 0.970 [{:+.3f}, {:+.3f}]; differs (Holm p",
                             0.97 - 4.303 * 0.01 / std::sqrt(3.0), 0.97 + 4.303 * 0.01 / std::sqrt(3.0))) !=
        std::string::npos);
  CHECK(all.find("Steps to solve at lr 0.03 (first evaluation at trained-length accuracy >= 0.95; median over the "
                 "seeds that reached it): model.norm=layernorm 20 (3/3).") != std::string::npos);
  CHECK(all.find("Warning: some cells have only 3 seeds (fewer than 5).") != std::string::npos);
  CHECK(study::most_different_lr(plan, groups, "") == 0.03);

  std::string answer;
  for (const std::string& l : study::answer(plan, groups)) answer += l + "\n";
  INFO(answer);
  CHECK(answer.find("model.norm=layernorm learned at 2 of 2 learning rates (0.001–0.03), solved at 0.03; "
                    "model.norm=none learned at 1 of 2 learning rates (0.001), solved at no rate — at 0.03 exploded in "
                    "3/3 — held-out loss 50 (over 2x the uniform guess's).") != std::string::npos);
  // Each variant named against no normalization, never "normalization" as a whole.
  CHECK(answer.find("Highest grid learning rate at which most seeds learned, against model.norm=none (up to 0.001); "
                    "higher: model.norm=layernorm (up to 0.03).") != std::string::npos);
  CHECK(answer.find("normalization bought") == std::string::npos);
  CHECK(answer.find("model.norm=none at 0.001 (held-out loss: identical in all 3 pairs; equivalent within ±0.05 "
                    "(Holm p 0); accuracy AUC: identical in all 3 pairs; equivalent within ±0.02 (Holm p 0))") !=
        std::string::npos);
  // Each cell against chance and the 'learned' level, not a fixed "no variant extrapolates".
  CHECK(
      answer.find("On unseen lengths 33–64, against chance 0.100 and the 'learned' level 0.325, cells by mean "
                  "accuracy: 0 of 4 at or above the learned level, 0 above chance only, 4 at chance; the best 0.100") !=
      std::string::npos);
  CHECK(answer.find("Caution: as few as 3 seeds per cell") != std::string::npos);

  // The same fixture read the other way round: when the unnormalized model is the one that
  // tolerates the higher rate, the Answer says LayerNorm did not help.
  study::ComparePlan swapped = study::plan_from_run_dirs(dirs, {});
  for (study::RunSpec& spec : swapped.runs)
    spec.variant = spec.variant == "model.norm=none" ? "model.norm=layernorm" : "model.norm=none";
  for (study::RunSpec& spec : swapped.runs) {
    const bool was_none = spec.variant == "model.norm=layernorm";
    spec.config.model.norm = was_none ? "layernorm" : "none";
  }
  std::vector<study::RunResult> swapped_results;
  for (const study::RunSpec& spec : swapped.runs) swapped_results.push_back(study::read_run(spec, spec.dir));
  std::string swapped_answer;
  for (const std::string& l : study::answer(swapped, study::summarize(swapped_results))) swapped_answer += l + "\n";
  INFO(swapped_answer);
  CHECK(swapped_answer.find("against model.norm=none (up to 0.03); lower: model.norm=layernorm (up to 0.001).") !=
        std::string::npos);

  // Labels given by the user replace the default ones.
  const study::ComparePlan labelled =
      study::plan_from_run_dirs({dirs[0], dirs[2]}, {{"LN", dirs[0]}, {"no norm", dirs[2]}});
  CHECK(labelled.variants == std::vector<std::string>{"LN", "no norm"});
  CHECK(study::variant_kind(labelled, "no norm") == "none");
  CHECK_THROWS_WITH_AS(study::plan_from_run_dirs({dirs[0]}, {{"x", tmp.sub("elsewhere")}}),
                       doctest::Contains("is not one of the run directories given"), InputError);
}

TEST_CASE("report inputs: runs of different tasks are refused - a compare directory stands for its runs") {
  TempDir tmp("normlab_report_inputs");
  const std::string a = make_run(tmp, "a", nlohmann::json::object(), flat(2.3, 1.0), 0.5, 0.5);
  const std::string b = make_run(tmp, "b", nlohmann::json::object(), flat(2.3, 1.0), 0.5, 0.5, false, "sort");
  CHECK_THROWS_WITH_AS(study::plan_from_run_dirs({a, b}, {}), doctest::Contains("trains task \"sort\""), InputError);
  CHECK_THROWS_WITH_AS(study::plan_from_run_dirs({tmp.sub("missing")}, {}), doctest::Contains("not a directory"),
                       InputError);

  const fs::path compare_dir = tmp.path / "cmp";
  fs::create_directories(compare_dir / "runs");
  fs::rename(a, compare_dir / "runs" / "a");
  CHECK(study::is_compare_dir(compare_dir.string()));
  CHECK_FALSE(study::is_compare_dir((compare_dir / "runs" / "a").string()));
  const study::ComparePlan plan = study::plan_from_run_dirs({compare_dir.string()}, {});
  REQUIRE(plan.runs.size() == 1);
  CHECK(plan.runs[0].name == "a");
}

TEST_CASE("report inputs: a metrics or summary field of the wrong type is an error naming the file") {
  TempDir tmp("normlab_report_types");
  struct Case {
    std::string file, line, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"summary.json", R"({"diverged":"yes"})", "summary.json: diverged: must be true or false"},
           {"metrics.jsonl", R"({"step":"x","loss":1})", "metrics.jsonl: line 21: step: must be an integer"},
           {"metrics.jsonl", R"({"step":3,"split":"valid","loss":1,"buckets":5})",
            "metrics.jsonl: line 21: buckets: must be a list of bucket objects"},
           {"metrics.jsonl", R"({"step":3,"loss":"high"})", "metrics.jsonl: line 21: loss: must be a number or null"},
           {"metrics.jsonl", R"({"step":3,"split":"valid","buckets":[{"min_len":"1"}]})",
            "buckets: min_len: must be an integer"},
       }) {
    const std::string dir = make_run(tmp, "r", nlohmann::json::object(), flat(2.3, 1.0), 0.5, 0.5);
    if (c.file == "summary.json") {
      std::ofstream(fs::path(dir) / c.file) << c.line;
    } else {
      // Replace the torn last line... keep the first 20 step lines, then the bad one.
      std::string text = read_text(dir + "/metrics.jsonl");
      size_t pos = 0;
      for (int i = 0; i < 20; ++i) pos = text.find('\n', pos) + 1;
      std::ofstream(fs::path(dir) / c.file) << text.substr(0, pos) << c.line << "\n";
    }
    study::RunSpec spec;
    CHECK_THROWS_WITH_AS(study::read_run(spec, dir), doctest::Contains(c.expect.c_str()), InputError);
    fs::remove_all(dir);
  }
}

TEST_CASE("chart ticks: few labelled decades on wide log axes, at least 3 ticks on every axis") {
  // 0.01 .. 1e31: one label per decade would be 34 labels.
  const std::vector<double> wide = study::axis_ticks(-2, 31, true);
  CHECK(wide.size() >= 3);
  CHECK(wide.size() <= 7);
  // A narrow log range still gets at least 3 ticks.
  CHECK(study::axis_ticks(std::log10(1.5), std::log10(2.4), true).size() >= 3);
  CHECK(study::axis_ticks(std::log10(0.9), std::log10(1.1), true).size() >= 3);
  CHECK(study::axis_ticks(std::log10(2.29), std::log10(2.31), true).size() >= 3);
  CHECK(study::axis_ticks(0.0, 1.0, false).size() >= 3);
  CHECK(study::axis_ticks(0.49, 0.51, false).size() >= 3);

  // Explicit ticks: every learning rate of the grid is labelled.
  study::Chart chart;
  chart.log_x = chart.log_y = true;
  chart.x_ticks = {0.001, 0.01, 0.03};
  chart.series.push_back({"a", "#000", {0.001, 0.01, 0.03}, {1, 2, 3}, {}, {}, false, true, {}, {}, {}});
  chart.h_lines.push_back({2.302585, "chance 2.303"});
  const std::string svg = study::render_svg(chart);
  for (const char* label : {">0.001<", ">0.01<", ">0.03<", "chance 2.303"})
    CHECK_MESSAGE(svg.find(label) != std::string::npos, label);
}

TEST_CASE("report numbers: runs that did not see the same data are compared unpaired (Welch)") {
  TempDir tmp("normlab_unpaired");
  std::vector<std::string> dirs;
  for (int seed = 0; seed < 3; ++seed) {
    dirs.push_back(make_run(tmp, fmt::format("ln{}", seed),
                            {{"train", {{"seed", seed}}}, {"model", {{"norm", "layernorm"}}}}, flat(2.3, 1.0),
                            0.9 - 0.01 * seed, 0.1));
    // Another batch size: another data order, so seed s of one is no partner of seed s of the other.
    dirs.push_back(make_run(tmp, fmt::format("none{}", seed),
                            {{"train", {{"seed", seed}, {"batch_size", 16}}}, {"model", {{"norm", "none"}}}},
                            flat(2.3, 1.0), 0.5 + 0.02 * seed, 0.1));
  }
  const study::ComparePlan plan = study::plan_from_run_dirs(dirs, {});
  std::vector<study::RunResult> results;
  for (const study::RunSpec& spec : plan.runs) results.push_back(study::read_run(spec, spec.dir));
  const std::vector<study::Comparison> comparisons = study::compare_variants(plan, study::summarize(results));
  REQUIRE(comparisons.size() == 1);
  CHECK_FALSE(comparisons[0].paired);
  const normlab::Interval expected = normlab::welch_difference({0.5, 0.52, 0.54}, {0.9, 0.89, 0.88});
  CHECK(comparisons[0].trained_accuracy.mean == doctest::Approx(expected.mean));
  CHECK(comparisons[0].trained_accuracy.low == doctest::Approx(expected.low));
  CHECK(study::describe_difference(comparisons[0].trained_accuracy, false).find("seeds (unpaired)") !=
        std::string::npos);
}
