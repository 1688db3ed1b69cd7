// The compare grid: any config key as an axis (validated like --set), unique run names, duplicate
// values refused, the 5000-run cap, the kind of a config file, and which runs on disk are stale.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "normlab/error.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/config.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

const char* kBase = R"({"task": {"name": "reverse", "max_len": 16, "eval_max_len": 32}, "train": {"steps": 20}})";

study::ComparePlan plan_with(const TempDir& tmp, const std::string& grid, const std::string& set = "{}") {
  tmp.write("base.json", kBase);
  return study::load_compare_plan(
      tmp.write("compare.json", fmt::format(R"({{"base": "base.json", "set": {}, "grid": {}}})", set, grid)));
}

}  // namespace

TEST_CASE("grid: any config key is an axis - runs get unique names and the facet they belong to") {
  TempDir tmp("normlab_grid");
  const study::ComparePlan plan = plan_with(
      tmp, R"({"variants": ["none", "pre-ln"], "seeds": [0, 1], "train.batch_size": [4, 32], "task.max_len": [16, 8],
               "model.norm_eps": [1e-12, 1e-5]})");
  CHECK(plan.runs.size() == 2 * 2 * 2 * 2 * 2);
  std::set<std::string> names;
  for (const study::RunSpec& r : plan.runs) names.insert(r.name);
  CHECK(names.size() == plan.runs.size());
  CHECK(names.count("pre-ln_lr0.001_L2_warmup_model.norm_eps=1e-05_task.max_len=8_train.batch_size=4_s1"));
  CHECK(plan.settings.size() == 8);
  const study::RunSpec& r = plan.runs.back();
  CHECK(r.config.train.batch_size == 32);
  CHECK(r.config.task.max_len == 8);
  CHECK(r.config.model.norm_eps == 1e-5);
  CHECK(r.config_file["train"]["batch_size"] == 32);  // what compare writes to configs/NAME.json
  CHECK(r.setting == "2 layers, warmup, model.norm_eps=1e-05, task.max_len=8, train.batch_size=32");
  REQUIRE(plan.extra_axes.size() == 3);
  CHECK(plan.extra_axes[0].first == "model.norm_eps");  // extra axes in key order, whatever the file's order

  // Without extra axes a name has no extra part: variant, lr, depth, warmup, seed.
  const study::ComparePlan plain = plan_with(tmp, R"({"variants": ["pre-ln"], "lr": [0.001], "seeds": [3]})");
  CHECK(plain.runs.at(0).name == "pre-ln_lr0.001_L2_warmup_s3");
}

TEST_CASE("grid: keys and values are validated as --set validates them - duplicates are refused") {
  TempDir tmp("normlab_grid_bad");
  auto refuses = [&](const std::string& grid, const std::string& expect) {
    CHECK_THROWS_WITH_AS(plan_with(tmp, grid), doctest::Contains(expect.c_str()), InputError);
  };
  refuses(R"({"train.batch_size": [4, 0]})", "grid.train.batch_size = 0: train.batch_size");
  refuses(R"({"train.batch_size": ["four"]})", "train.batch_size");
  refuses(R"({"model.norm_eps": [-1]})", "model.norm_eps");
  refuses(R"({"train.batchsize": [4]})", "did you mean 'train.batch_size'?");
  refuses(R"({"optim.lr": [0.1]})", "use grid.lr");
  refuses(R"({"model.norm": ["none"]})", "use grid.variants");
  refuses(R"({"train.seed": [1]})", "use grid.seeds");
  refuses(R"({"train.threads": [1, 2]})", "not an axis");
  refuses(R"({"task.max_len": [200]})", "task.max_len: must be <= model.max_len");  // a cross-field rule
  refuses(R"({"lr": [0.001, 0.0010000001]})", "are the same setting (both name runs 'lr0.001')");
  refuses(R"({"seeds": [3, 3]})", "grid.seeds: 3 and 3 are the same setting");
  refuses(R"({"train.batch_size": [4, 4]})", "are the same setting");
  refuses(R"({"variants": ["pre-ln", "pre-ln"]})", "are the same setting");
  refuses(R"({"train.batch_size": []})", "must be a non-empty list");
  // The cap: 64 x 64 x 2 = 8192 runs.
  std::string lrs, seeds;
  for (int i = 0; i < 64; ++i) {
    lrs += fmt::format("{}{}", i ? "," : "", 0.0001 * (i + 1));
    seeds += fmt::format("{}{}", i ? "," : "", i);
  }
  refuses(fmt::format(R"({{"lr": [{}], "seeds": [{}], "train.batch_size": [4, 8]}})", lrs, seeds),
          "8192 runs is more than the limit of 5000");
}

TEST_CASE("config kind: a run config and a compare config tell themselves apart") {
  TempDir tmp("normlab_kind");
  CHECK(study::config_kind(tmp.write("run.json", kBase)) == study::ConfigKind::run);
  CHECK(study::config_kind(tmp.write("cmp.json", R"({"base": "run.json"})")) == study::ConfigKind::compare);
  CHECK(study::config_kind(tmp.write("bad.json", "{")) == study::ConfigKind::unknown);
  CHECK(study::config_kind(tmp.sub("missing.json")) == study::ConfigKind::unknown);
  CHECK_THROWS_WITH_AS(study::load_compare_plan(tmp.sub("run.json")),
                       doctest::Contains("is a run config (model, task, optim, train), not a compare config; train it "
                                         "with: normlab train --config"),
                       InputError);
}

TEST_CASE("reuse: a started run whose resolved config differs is reported with its changed keys") {
  TempDir tmp("normlab_reuse");
  const study::ComparePlan plan = plan_with(tmp, R"({"variants": ["none", "pre-ln"]})");
  const std::string out = tmp.sub("out");
  // Both runs "trained" with exactly the plan's config: nothing changed.
  for (const study::RunSpec& r : plan.runs) {
    const fs::path dir = fs::path(out) / "runs" / r.name;
    fs::create_directories(dir);
    nlohmann::json resolved = train::to_json(r.config);
    resolved["train"]["log_every"] = 7;  // may differ: changes only what is printed
    std::ofstream(dir / "config.json") << resolved.dump();
    std::ofstream(dir / "summary.json") << "{}";
  }
  CHECK(study::changed_runs(plan, out).empty());

  // The compare config now asks for fewer steps and clipping: both runs are stale.
  const study::ComparePlan edited =
      plan_with(tmp, R"({"variants": ["none", "pre-ln"]})", R"({"train.steps": 10, "optim.clip_grad_norm": 0.5})");
  const std::vector<study::ChangedRun> changed = study::changed_runs(edited, out);
  REQUIRE(changed.size() == 2);
  CHECK(changed[0].name == plan.runs[0].name);
  CHECK(changed[0].changes == std::vector<std::string>{"optim.clip_grad_norm: 1.0 -> 0.5", "train.steps: 20 -> 10"});
  const std::string message = study::changed_runs_message(changed, out);
  CHECK(message.find("runs/none_lr0.001_L2_warmup_s0: was trained with another config") != std::string::npos);
  CHECK(message.find("--retrain-changed") != std::string::npos);

  // An unreadable config.json counts as changed; a directory never started does not.
  std::ofstream(fs::path(out) / "runs" / plan.runs[1].name / "config.json") << "{";
  fs::remove(fs::path(out) / "runs" / plan.runs[0].name / "summary.json");
  const std::vector<study::ChangedRun> broken = study::changed_runs(plan, out);
  REQUIRE(broken.size() == 1);
  CHECK(broken[0].changes.at(0) == "config.json is not valid JSON");
}

TEST_CASE("grid: the committed compare configs load and expand as docs/EXPERIMENTS.md says") {
  const std::string configs = std::string(NORMLAB_SOURCE_DIR) + "/configs/";
  const study::ComparePlan demo = study::load_compare_plan(configs + "demo.json");
  // A search: round 0 is 4 rates x 4 variants x 2 warmup settings x 5 seeds; the refinement
  // rounds' runs are added as outcomes come in (at most 2 x 1 rate per variant and setting).
  CHECK(demo.runs.size() == 160);
  CHECK(demo.search.enabled());
  // The gate may extend the range half a decade at a time, from 0.0001 up to 0.316 (the
  // replication inherits it from demo.json).
  CHECK(demo.search.min == doctest::Approx(0.0001));
  CHECK(demo.search.max == doctest::Approx(0.316228));
  // The replication grid is the demo with seeds 20-24: the same runs but for train.seed.
  const study::ComparePlan replication = study::load_compare_plan(configs + "demo-replication.json");
  REQUIRE(replication.runs.size() == demo.runs.size());
  CHECK(replication.search.min == demo.search.min);
  CHECK(replication.search.max == demo.search.max);
  for (size_t i = 0; i < demo.runs.size(); ++i) {
    train::RunConfig a = demo.runs[i].config, b = replication.runs[i].config;
    CHECK(b.train.seed == a.train.seed + 20);
    a.train.seed = b.train.seed;
    CHECK(a == b);
  }
  CHECK(study::load_compare_plan(configs + "study.json").runs.size() == 420);
  const study::ComparePlan bn = study::load_compare_plan(configs + "batchnorm-batch.json");
  CHECK(bn.runs.size() == 48);
  CHECK(bn.settings.size() == 8);
  // The full study: 5 variants x 3 depths x warmup on/off, 5 seeds at 4 rates in round 0, the gate
  // free to extend from 0.0001 to 0.316; the 250-step study before it: 9 variants x 18 settings.
  const study::ComparePlan full = study::load_compare_plan(configs + "full-study.json");
  CHECK(full.runs.size() == 600);
  CHECK(full.settings.size() == 6);
  CHECK(full.search.min == doctest::Approx(0.0001));
  CHECK(full.search.max == doctest::Approx(0.316228));
  const study::ComparePlan full_250 = study::load_compare_plan(configs + "full-study-250.json");
  CHECK(full_250.runs.size() == 3240);
  CHECK(full_250.settings.size() == 18);
  for (const char* name : {"demo.json", "demo-replication.json", "study.json", "full-study.json", "full-study-250.json",
                           "batchnorm-batch.json"})
    CHECK_MESSAGE(study::config_kind(configs + name) == study::ConfigKind::compare, name);
  CHECK(study::config_kind(configs + "reverse.json") == study::ConfigKind::run);
}
