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
#include "normlab/study/compare.hpp"
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
                     const std::string& task = "reverse") {
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
  if (diverged) metrics << R"({"step":)" << losses.size() + 1 << R"(,"loss":null,"grad_norm":null,"diverged":true})" << "\n";
  metrics << nlohmann::json({{"step", losses.size()},
                             {"split", "valid"},
                             {"loss", losses.back() + 1},
                             {"accuracy", 0.5 * (bucket1_acc + bucket2_acc)},
                             {"buckets",
                              {{{"min_len", 1}, {"max_len", 8}, {"beyond_train", false}, {"loss", 1.0},
                                {"accuracy", bucket1_acc}, {"count", 10}},
                               {{"min_len", 9}, {"max_len", 16}, {"beyond_train", true}, {"loss", 2.0},
                                {"accuracy", bucket2_acc}, {"count", 10}}}}})
                 .dump()
          << "\n";
  metrics << R"({"step": 99, "loss": 1.)";  // a torn last line, as a killed run leaves it
  std::ofstream(dir / "summary.json") << nlohmann::json({{"diverged", diverged},
                                                         {"diverged_at_step", diverged ? nlohmann::json(losses.size() + 1)
                                                                                       : nlohmann::json(nullptr)},
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
  CHECK(results[0].steps.size() == 20);          // the torn line is skipped
  CHECK(results[0].init_residual_rms == std::vector<double>{1.0, 2.0});
  CHECK(results[0].end_residual_rms == std::vector<double>{20.0, 21.0});
  CHECK(results[3].diverged);
  CHECK(std::isnan(results[3].final_train_loss));

  const double chance = study::chance_loss(plan.base);
  CHECK(chance == doctest::Approx(std::log(10.0)));
  const std::vector<study::GroupSummary> groups = study::summarize(results, chance);
  REQUIRE(groups.size() == 1);
  const study::GroupSummary& g = groups[0];
  CHECK(g.train_loss == doctest::Approx(1.0));  // median of 0.5, 1.0, 4.0: the diverged seed is left out
  CHECK(g.train_loss_min == doctest::Approx(0.5));
  CHECK(g.train_loss_max == doctest::Approx(4.0));
  CHECK(g.valid_loss == doctest::Approx(2.0));  // valid loss = last loss + 1
  CHECK(g.diverged == 1);
  CHECK(g.at_chance == 1);  // 4.0: above 95% of chance (2.19), below 2 x the first loss (4.6)
  CHECK(g.blew_up == 0);
  CHECK(g.learned == 2);
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
  CHECK(read_text(out + "/report.md").find("chance loss") != std::string::npos);
  CHECK(read_text(out + "/report.md").find("## Findings") != std::string::npos);
  CHECK(read_text(out + "/runs.csv").find(",diverged,") != std::string::npos);

  // A stop request while drawing: no file is written over.
  const std::string stopped = tmp.sub("stopped");
  fs::create_directories(stopped);
  int polls = 0;
  CHECK_THROWS_AS(study::write_report(plan, results, stopped, [&] { return ++polls > 2; }), study::ReportStopped);
  CHECK(polls == 3);
  CHECK(fs::is_empty(stopped));
}

TEST_CASE("report numbers: the outcome words and their thresholds") {
  study::RunResult r;
  r.finished = true;
  r.loss = {2.3, 2.0};
  const double chance = std::log(10.0);
  r.final_train_loss = 0.95 * chance - 0.01;
  CHECK(study::classify(r, chance) == study::Outcome::learned);
  r.final_train_loss = 0.95 * chance + 0.01;
  CHECK(study::classify(r, chance) == study::Outcome::at_chance);
  r.final_train_loss = 2 * 2.3 - 0.01;
  CHECK(study::classify(r, chance) == study::Outcome::at_chance);
  r.final_train_loss = 2 * 2.3 + 0.01;
  CHECK(study::classify(r, chance) == study::Outcome::blew_up);
  r.final_train_loss = 1.08e8;  // the demo's none at lr 0.03: finite, so not "diverged", but blown up
  CHECK(study::classify(r, chance) == study::Outcome::blew_up);
  r.diverged = true;
  CHECK(study::classify(r, chance) == study::Outcome::diverged);
  r = {};
  r.final_train_loss = 0.1;
  CHECK(study::classify(r, chance) == study::Outcome::unfinished);
}

TEST_CASE("report numbers: findings name the tolerant variants and the differences beyond the seed spread") {
  TempDir tmp("normlab_findings");
  std::vector<std::string> dirs;
  // pre-ln learns at both rates; none learns at 0.001 and blows up at 0.03.
  for (int seed = 0; seed < 3; ++seed) {
    dirs.push_back(make_run(tmp, fmt::format("pre_a{}", seed),
                            {{"train", {{"seed", seed}}}, {"optim", {{"lr", 0.001}}}, {"model", {{"norm", "layernorm"}}}},
                            flat(2.3, 1.0 + 0.01 * seed), 0.9, 0.1));
    dirs.push_back(make_run(tmp, fmt::format("pre_b{}", seed),
                            {{"train", {{"seed", seed}}}, {"optim", {{"lr", 0.03}}}, {"model", {{"norm", "layernorm"}}}},
                            flat(2.3, 1.2 + 0.01 * seed), 0.9, 0.1));
    dirs.push_back(make_run(tmp, fmt::format("none_a{}", seed),
                            {{"train", {{"seed", seed}}}, {"optim", {{"lr", 0.001}}}, {"model", {{"norm", "none"}}}},
                            flat(2.3, 1.005 + 0.01 * seed), 0.9, 0.1));
    dirs.push_back(make_run(tmp, fmt::format("none_b{}", seed),
                            {{"train", {{"seed", seed}}}, {"optim", {{"lr", 0.03}}}, {"model", {{"norm", "none"}}}},
                            flat(2.3, 1e8 * (seed + 1)), 0.0, 0.0));
  }
  const study::ComparePlan plan = study::plan_from_run_dirs(dirs, {});
  CHECK(plan.variants == std::vector<std::string>{"model.norm=layernorm", "model.norm=none"});
  CHECK(plan.lrs == std::vector<double>{0.001, 0.03});
  std::vector<study::RunResult> results;
  for (const study::RunSpec& spec : plan.runs) results.push_back(study::read_run(spec, spec.dir));
  const double chance = study::chance_loss(plan.base);
  const auto groups = study::summarize(results, chance);
  const std::vector<std::string> lines = study::findings(plan, groups, chance);
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  INFO(all);
  CHECK(all.find("12 of 12 runs finished: 9 learned, 0 stalled at chance, 3 blew up, 0 diverged") != std::string::npos);
  CHECK(all.find("Blew up (finite loss far above its start): model.norm=none at lr 0.03 (3/3") != std::string::npos);
  CHECK(all.find("Highest learning rate at which most seeds learned: model.norm=layernorm 0.03, model.norm=none 0.001") !=
        std::string::npos);
  // At 0.001 the two overlap (1.00-1.02 vs 1.005-1.025); at 0.03 none is far above layernorm's seed range.
  CHECK(all.find("At lr 0.001: lowest final train loss model.norm=layernorm 1.010 (seeds 1.000–1.020); above its seed "
                 "range: no variant; within it: model.norm=none") != std::string::npos);
  CHECK(all.find("At lr 0.03: lowest final train loss model.norm=layernorm") != std::string::npos);
  CHECK(all.find("above its seed range: model.norm=none 2e+08") != std::string::npos);
  CHECK(study::most_different_lr(plan, groups, "") == 0.03);

  // Labels given by the user replace the default ones.
  const study::ComparePlan labelled =
      study::plan_from_run_dirs({dirs[0], dirs[2]}, {{"LN", dirs[0]}, {"no norm", dirs[2]}});
  CHECK(labelled.variants == std::vector<std::string>{"LN", "no norm"});
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
  chart.series.push_back({"a", "#000", {0.001, 0.01, 0.03}, {1, 2, 3}, {}, {}, false, true, {}});
  chart.h_lines.push_back({2.302585, "chance 2.303"});
  const std::string svg = study::render_svg(chart);
  for (const char* label : {">0.001<", ">0.01<", ">0.03<", "chance 2.303"})
    CHECK_MESSAGE(svg.find(label) != std::string::npos, label);
}
