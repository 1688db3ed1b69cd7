// The report's "inside the stack" section: Xiong et al.'s picture, the gradient norm of each layer
// at initialization (the step-1 diagnostics) per variant, as a chart beside the residual RMS charts,
// its numbers as a table in report.md, its SVG under charts/; and the attention and log Z figures
// read back from metrics.jsonl.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "normlab/study/report.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/config.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::read_text;
using normlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A finished 3-block run: diagnostics at `first_step` (per-layer gradient norms `init_grads`) and
// at step 20, one evaluation at step 20.
std::string write_run(const TempDir& tmp, const std::string& name, const std::string& placement, double lr, int seed,
                      const std::vector<double>& init_grads, int first_step = 1) {
  const fs::path dir = tmp.path / "runs" / name;
  fs::create_directories(dir);
  nlohmann::json config = {{"task", {{"name", "reverse"}}},
                           {"model", {{"placement", placement}, {"layers", 3}}},
                           {"optim", {{"lr", lr}}},
                           {"train", {{"steps", 20}, {"seed", seed}}}};
  std::ofstream(dir / "config.json") << train::to_json(train::config_from_json(config, name, ".", false)).dump(2);
  std::ofstream metrics(dir / "metrics.jsonl");
  for (int step = 1; step <= 20; ++step) {
    nlohmann::json rec = {{"step", step}, {"loss", 2.3 - 0.05 * step}, {"accuracy", 0.5}, {"grad_norm", 1.0}};
    if (step == first_step || step == 20) {
      rec["residual_rms"] = {1.0, 1.5, 2.0};
      rec["layer_grad_norms"] = step == first_step ? init_grads : std::vector<double>{0.1, 0.1, 0.1};
      rec["attention_max_logit"] = {2.0, 2.5, step == 20 ? 30.0 : 3.0};
      rec["attention_entropy_mean"] = {1.5, 1.4, step == 20 ? 0.1 : 1.3};
      rec["attention_entropy_min"] = {1.4, 1.3, step == 20 ? 0.05 : 1.2};
      rec["update_ratio"] = {0.001, 0.002, nullptr};  // a null: a value that was not finite
      rec["log_z_mean"] = 2.4;
      rec["log_z_max_abs"] = step == 20 ? 12.5 : 2.9;
    }
    metrics << rec.dump() << "\n";
  }
  metrics << nlohmann::json({{"step", 20},
                             {"split", "valid"},
                             {"loss", 1.0},
                             {"accuracy", 0.9},
                             {"trained", {{"loss", 1.0}, {"accuracy", 0.9}, {"targets", 100}}}})
                 .dump()
          << "\n";
  std::ofstream(dir / "summary.json") << R"({"diverged": false, "wall_time_s": 1.0, "threads": 1})";
  return dir.string();
}

}  // namespace

TEST_CASE("report inside the stack: gradient norm per layer at initialization, one line per variant, from step 1") {
  TempDir tmp("normlab_report_inside");
  std::vector<std::string> dirs;
  // Post-LN: 3 seeds whose step-1 gradient norms grow toward the output; at a second learning rate
  // the same seeds' (made-up, different) figures, which the chart must not count twice: at
  // initialization every rate of a seed is the same model, and the lowest rate's run is taken.
  const std::vector<std::vector<double>> post = {{1.0, 2.0, 4.0}, {1.5, 2.5, 5.0}, {0.5, 1.5, 3.0}};
  const std::vector<std::vector<double>> pre = {{0.5, 0.4, 0.3}, {0.5, 0.4, 0.3}, {0.5, 0.4, 0.3}};
  for (int seed = 0; seed < 3; ++seed) {
    dirs.push_back(write_run(tmp, fmt::format("post_lr0.001_s{}", seed), "post", 0.001, seed, post[size_t(seed)]));
    dirs.push_back(write_run(tmp, fmt::format("post_lr0.01_s{}", seed), "post", 0.01, seed, {100.0, 100.0, 100.0}));
    dirs.push_back(write_run(tmp, fmt::format("pre_lr0.001_s{}", seed), "pre", 0.001, seed, pre[size_t(seed)]));
  }
  const study::ComparePlan plan = study::plan_from_run_dirs(dirs, {});
  REQUIRE(plan.variants.size() == 2);
  std::vector<study::RunResult> results;
  for (const study::RunSpec& spec : plan.runs) results.push_back(study::read_run(spec, spec.dir));

  // The attention and output figures of every diagnostics record are read back.
  const study::RunResult& one = results.front();
  REQUIRE(one.diagnostics.size() == 2);
  CHECK(one.diagnostics.front().step == 1);
  CHECK(one.diagnostics.back().attention_max_logit == std::vector<double>{2.0, 2.5, 30.0});
  CHECK(one.diagnostics.back().attention_entropy_mean == std::vector<double>{1.5, 1.4, 0.1});
  CHECK(one.diagnostics.back().attention_entropy_min == std::vector<double>{1.4, 1.3, 0.05});
  REQUIRE(one.diagnostics.back().update_ratio.size() == 3);
  CHECK(std::isnan(one.diagnostics.back().update_ratio[2]));
  CHECK(one.diagnostics.front().log_z_max_abs == 2.9);
  CHECK(one.diagnostics.back().log_z_max_abs == 12.5);
  CHECK(one.diagnostics.back().log_z_mean == 2.4);

  const fs::path out = tmp.path / "report";
  study::write_report(plan, results, out.string());
  // The chart, under charts/ and linked from report.md, in the section with the residual RMS charts.
  REQUIRE(fs::exists(out / "charts" / "init-grad-norm.svg"));
  const std::string svg = read_text((out / "charts" / "init-grad-norm.svg").string());
  CHECK(svg.find("grad norm per layer at initialization") != std::string::npos);
  CHECK(svg.find(">layer<") != std::string::npos);
  const std::string md = read_text((out / "report.md").string());
  const size_t section = md.find("Inside the stack");
  REQUIRE(section != std::string::npos);
  const size_t chart = md.find("(charts/init-grad-norm.svg)");
  REQUIRE(chart != std::string::npos);
  CHECK(chart > section);
  CHECK(md.find("(charts/residual-rms-", section) > chart);  // first in the section, beside the residual RMS charts
  // Its numbers: medians over the 3 seeds of the lowest rate, first and last layer and their ratio.
  CHECK(md.find("| 3 | 1 | 4 | 4.00 |") != std::string::npos);
  CHECK(md.find("| 3 | 0.5 | 0.3 | 0.60 |") != std::string::npos);
  CHECK(md.find("| 100 |") == std::string::npos);  // the higher rate's runs are not counted again

  // Runs whose diagnostics start after step 1 have no figures at initialization: no chart.
  TempDir late("normlab_report_inside_late");
  std::vector<std::string> late_dirs;
  for (int seed = 0; seed < 2; ++seed) {
    late_dirs.push_back(write_run(late, fmt::format("post_s{}", seed), "post", 0.001, seed, {1, 2, 4}, 10));
    late_dirs.push_back(write_run(late, fmt::format("pre_s{}", seed), "pre", 0.001, seed, {1, 1, 1}, 10));
  }
  const study::ComparePlan late_plan = study::plan_from_run_dirs(late_dirs, {});
  std::vector<study::RunResult> late_results;
  for (const study::RunSpec& spec : late_plan.runs) late_results.push_back(study::read_run(spec, spec.dir));
  study::write_report(late_plan, late_results, (late.path / "report").string());
  CHECK_FALSE(fs::exists(late.path / "report" / "charts" / "init-grad-norm.svg"));
  CHECK(fs::exists(late.path / "report" / "report.md"));
}
