// `normlab report RUN_DIR...` as a plan: each run named by its directory (made unique), put in a
// series by its label or by the config keys that differ between the runs, and the labels checked.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/config.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A run directory at `dir` (under tmp) with only a resolved config.json: all a plan reads.
std::string config_only_run(const TempDir& tmp, const std::string& dir, const json& overrides) {
  json config = json::parse(R"({"task": {"name": "reverse", "max_len": 16, "eval_max_len": 32},
                                "train": {"steps": 20}})");
  config.merge_patch(overrides);
  fs::create_directories(tmp.path / dir);
  tmp.write(dir + "/config.json", train::to_json(train::config_from_json(config, "test", ".", false)).dump());
  return tmp.sub(dir);
}

}  // namespace

TEST_CASE("report inputs: names made unique, series from the keys that differ, lr and seed their own axes") {
  TempDir tmp("normlab_report_plan");
  const std::vector<std::string> dirs{
      config_only_run(tmp, "a/run", {{"optim", {{"lr", 0.003}}}, {"train", {{"log_every", 5}}}}),
      config_only_run(tmp, "b/run", {{"model", {{"norm", "rmsnorm"}}}, {"train", {{"seed", 1}}}}),
      config_only_run(tmp, "c/solo", {{"model", {{"norm", "rmsnorm"}, {"layers", 3}}}}) + "/",
  };
  const study::ComparePlan plan = study::plan_from_run_dirs(dirs, {});
  REQUIRE(plan.runs.size() == 3);
  CHECK(plan.runs[0].name == "run");
  CHECK(plan.runs[1].name == "run-2");
  CHECK(plan.runs[2].name == "solo");  // "c/solo/": the name of the directory, not ""
  // train.log_every never changes the numbers, lr and seed are axes: model.layers and model.norm name the series.
  CHECK(plan.runs[0].variant == "model.layers=2, model.norm=layernorm");
  CHECK(plan.runs[1].variant == "model.layers=2, model.norm=rmsnorm");
  CHECK(plan.runs[2].variant == "model.layers=3, model.norm=rmsnorm");
  CHECK(plan.variants.size() == 3);
  CHECK(plan.lrs == std::vector<double>{0.001, 0.003});  // sorted
  CHECK(plan.seeds == std::vector<uint64_t>{0, 1});
  CHECK(plan.layers == std::vector<int64_t>{2, 3});
  CHECK(plan.source == "3 run directories");
  CHECK(plan.runs[2].dir == dirs[2]);
  // A trailing slash on a name that is taken: "run-2", not "-2".
  const study::ComparePlan slashed = study::plan_from_run_dirs({dirs[0], dirs[1] + "/"}, {});
  CHECK(slashed.runs[1].name == "run-2");

  // Runs that differ in nothing but seed and lr: one series, named by its variant.
  const std::string seeded = config_only_run(tmp, "d", {{"train", {{"seed", 9}}}});
  const study::ComparePlan same = study::plan_from_run_dirs({dirs[0], seeded}, {});
  CHECK(same.variants == std::vector<std::string>{"pre-ln"});
  CHECK(study::plan_from_run_dirs({seeded}, {}).source == seeded);
}

TEST_CASE("report inputs: a label on a compare directory labels its runs - empty labels and runs are refused") {
  TempDir tmp("normlab_report_labels");
  const std::string compare_dir = tmp.sub("cmp");
  config_only_run(tmp, "cmp/runs/x", {{"train", {{"seed", 1}}}});
  config_only_run(tmp, "cmp/runs/y", {{"train", {{"seed", 2}}}});
  const std::string other = config_only_run(tmp, "other", {{"model", {{"norm", "none"}}}});
  const study::ComparePlan plan = study::plan_from_run_dirs({compare_dir, other}, {{"grid", compare_dir}});
  REQUIRE(plan.runs.size() == 3);
  CHECK(plan.runs[0].variant == "grid");
  CHECK(plan.runs[1].variant == "grid");
  CHECK(plan.runs[2].variant == "model.norm=none");

  CHECK_THROWS_WITH_AS(study::plan_from_run_dirs({other}, {{"", other}}),
                       ("--label =" + other + ": the label is empty").c_str(), InputError);
  fs::create_directories(tmp.path / "empty" / "runs");
  CHECK_THROWS_WITH_AS(study::plan_from_run_dirs({tmp.sub("empty")}, {}),
                       (tmp.sub("empty") + ": a compare output directory with no runs in runs/").c_str(), InputError);
  CHECK_THROWS_WITH_AS(study::plan_from_run_dirs({}, {}), "report: give at least one run directory", InputError);
}

TEST_CASE("report inputs: a folder of run directories stands for the runs in it - hidden and non-run folders skipped") {
  TempDir tmp("normlab_report_folder");
  // What `normlab train --out runs/NAME` leaves: runs side by side, no config.json in runs/ itself.
  config_only_run(tmp, "runs/b", {{"train", {{"seed", 2}}}});
  config_only_run(tmp, "runs/a", {{"train", {{"seed", 1}}}});
  config_only_run(tmp, "runs/.partial", {{"train", {{"seed", 3}}}});  // hidden: skipped
  fs::create_directories(tmp.path / "runs" / "notes");                // no config.json: skipped
  const std::string folder = tmp.sub("runs");
  const study::ComparePlan plan = study::plan_from_run_dirs({folder}, {});
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[0].name == "a");  // in name order
  CHECK(plan.runs[1].name == "b");
  CHECK(plan.seeds == std::vector<uint64_t>{1, 2});

  // A label on the folder labels every run in it.
  const study::ComparePlan labelled = study::plan_from_run_dirs({folder}, {{"mine", folder}});
  REQUIRE(labelled.runs.size() == 2);
  CHECK(labelled.runs[0].variant == "mine");
  CHECK(labelled.runs[1].variant == "mine");

  // A folder with no run in it is refused, in one line naming it.
  fs::create_directories(tmp.path / "nothing" / "here");
  CHECK_THROWS_WITH_AS(study::plan_from_run_dirs({tmp.sub("nothing")}, {}),
                       (tmp.sub("nothing") + ": no config.json: not a run directory (nor a folder of run directories, "
                                             "nor a compare output directory with runs/)")
                           .c_str(),
                       InputError);
}
