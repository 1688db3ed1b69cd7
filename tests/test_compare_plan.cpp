// The compare plan's three steps, each on its own: parse (paths relative to the file that names
// them, errors against base, set or grid), expand (the fixed order of the runs, what grid.warmup
// sets) and the axes a grid leaves out (the base config's values).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/results.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

const char* kBase = R"({"task": {"name": "reverse", "max_len": 16, "eval_max_len": 32}, "train": {"steps": 20}})";

std::string absolute(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

}  // namespace

TEST_CASE("plan: runs in grid order - layers, warmup, then lr, variant and seed - grid.warmup sets warmup_steps") {
  TempDir tmp("normlab_plan_order");
  tmp.write("base.json", R"({"task": {"name": "reverse", "max_len": 16, "eval_max_len": 32},
                             "optim": {"warmup_steps": 5}, "train": {"steps": 20}})");
  const study::ComparePlan plan = study::load_compare_plan(tmp.write("compare.json", R"({"base": "base.json",
      "grid": {"variants": ["none", "pre-ln"], "lr": [0.001, 0.003], "seeds": [0, 1], "layers": [1, 2],
               "warmup": [true, false]}})"));
  REQUIRE(plan.runs.size() == 32);
  CHECK(plan.settings ==
        std::vector<std::string>{"1 layers, warmup", "1 layers, no warmup", "2 layers, warmup", "2 layers, no warmup"});
  const std::vector<std::string> first_setting{"none_lr0.001_L1_warmup_s0",   "none_lr0.001_L1_warmup_s1",
                                               "pre-ln_lr0.001_L1_warmup_s0", "pre-ln_lr0.001_L1_warmup_s1",
                                               "none_lr0.003_L1_warmup_s0",   "none_lr0.003_L1_warmup_s1",
                                               "pre-ln_lr0.003_L1_warmup_s0", "pre-ln_lr0.003_L1_warmup_s1"};
  for (size_t i = 0; i < first_setting.size(); ++i) CHECK(plan.runs[i].name == first_setting[i]);
  CHECK(plan.runs[8].name == "none_lr0.001_L1_nowarmup_s0");
  CHECK(plan.runs[16].name == "none_lr0.001_L2_warmup_s0");
  CHECK(plan.runs.back().name == "pre-ln_lr0.003_L2_nowarmup_s1");
  for (const study::RunSpec& r : plan.runs) {
    // The config holds the axes' values the run's name was built from.
    CHECK(r.name == fmt::format("{}_lr{:g}_L{}_{}_s{}", r.variant, r.config.optim.lr, r.config.model.num_layers,
                                r.config.optim.warmup_steps > 0 ? "warmup" : "nowarmup", r.config.train.seed));
    CHECK(r.config.optim.warmup_steps == (r.warmup() ? 5 : 0));
    CHECK(r.config.train.threads == 1);
    CHECK(r.config.model.norm.name() == (r.variant == "none" ? "none" : "layernorm"));
    // The file compare writes holds the same values under the JSON keys.
    CHECK(r.config_file["model"]["layers"] == r.layers());
    CHECK(r.config_file["optim"]["lr"] == r.lr());
    CHECK(train::config_from_json(r.config_file, "configs/" + r.name + ".json") == r.config);
    CHECK(r.setting == plan.settings[size_t(r.layers() - 1) * 2 + (r.warmup() ? 0 : 1)]);
  }

  // Without grid.warmup the run configs leave optim.warmup_steps as the base has it (here: unset).
  tmp.write("plain.json", kBase);
  const study::ComparePlan plain =
      study::load_compare_plan(tmp.write("compare2.json", R"({"base": "plain.json", "grid": {"seeds": [4]}})"));
  REQUIRE(plain.runs.size() == 1);
  CHECK_FALSE(plain.runs[0].config_file.at("optim").contains("warmup_steps"));
  CHECK(plain.runs[0].config.optim.warmup_steps == train::OptimConfig{}.warmup_steps);  // the trainer's default
}

TEST_CASE("plan: an axis the grid leaves out holds the base's value - warmup true needs a base warmup") {
  TempDir tmp("normlab_plan_defaults");
  tmp.write("base.json", R"({"model": {"norm": "rmsnorm", "placement": "post", "layers": 3},
                             "task": {"name": "reverse", "max_len": 16, "eval_max_len": 32},
                             "optim": {"lr": 0.002, "warmup_steps": 0}, "train": {"steps": 20, "seed": 7}})");
  const study::ComparePlan plan =
      study::load_compare_plan(tmp.write("compare.json", R"({"base": "base.json", "grid": {}})"));
  CHECK(plan.variants == std::vector<std::string>{"post-rmsnorm"});
  CHECK(plan.lrs == std::vector<double>{0.002});
  CHECK(plan.seeds == std::vector<uint64_t>{7});
  CHECK(plan.layers == std::vector<int64_t>{3});
  CHECK(plan.warmups == std::vector<bool>{false});
  REQUIRE(plan.runs.size() == 1);
  CHECK(plan.runs[0].name == "post-rmsnorm_lr0.002_L3_nowarmup_s7");
  CHECK(plan.runs[0].config.model.norm.name() == "rmsnorm");
  CHECK(plan.runs[0].config.model.placement == nn::Placement::post);

  CHECK_THROWS_WITH_AS(
      study::load_compare_plan(tmp.write("warm.json", R"({"base": "base.json", "grid": {"warmup": [true, false]}})")),
      (tmp.sub("warm.json") + ": grid.warmup: contains true but the base config has optim.warmup_steps = 0").c_str(),
      InputError);
  // "set" comes before the grid: with a warmup set there, the same grid is accepted.
  const study::ComparePlan warm = study::load_compare_plan(
      tmp.write("warm2.json",
                R"({"base": "base.json", "set": {"optim.warmup_steps": 4}, "grid": {"warmup": [true, false]}})"));
  CHECK(warm.runs.size() == 2);
  CHECK(warm.runs[0].config.optim.warmup_steps == 4);
}

TEST_CASE("plan: a key the base file leaves out reads as the trainer's default, as in the run directory") {
  TempDir tmp("normlab_plan_left_out");
  tmp.write("base.json", R"({"model": {"d_model": 32, "ffn": 64, "max_len": 16},
                             "task": {"name": "reverse", "max_len": 8, "eval_max_len": 12}})");
  const study::ComparePlan plan = study::load_compare_plan(
      tmp.write("compare.json", R"({"base": "base.json", "grid": {"variants": ["pre-ln"], "layers": [1]}})"));
  REQUIRE(plan.runs.size() == 1);
  const study::RunSpec& run = plan.runs[0];
  // compare writes the file as the user wrote it (configs/NAME.json); the trainer fills in the rest.
  CHECK(run.config_file["train"].count("steps") == 0);
  CHECK_FALSE(run.config_file["task"].contains("min_len"));
  // Study reads what the trainer trains: the defaults, not "unknown".
  CHECK(run.config.train.steps == train::TrainConfig{}.steps);
  CHECK(plan.base.task.min_len == train::TaskConfig{}.min_len);
  CHECK(study::chance_loss(plan.base) == std::log(10.0));  // reverse: 10 digits
  const study::RunResult unread = study::read_run(run, tmp.sub("not-started"));
  CHECK(unread.planned_steps == train::TrainConfig{}.steps);
  // The same run read back from its run directory's resolved config.json has the same config.
  const fs::path dir = fs::path(tmp.sub("runs")) / run.name;
  fs::create_directories(dir);
  tmp.write("runs/" + run.name + "/config.json", train::to_json(run.config).dump());
  CHECK(study::plan_from_run_dirs({dir.string()}, {}).runs[0].config == run.config);
}

TEST_CASE("plan: data paths are relative to the file that names them - an inline base's mistake says base") {
  TempDir tmp("normlab_plan_paths");
  fs::create_directories(tmp.path / "sub");
  const std::string line = "{\"tokens\": \"a b\", \"label\": \"x\"}\n";
  tmp.write("sub/data.jsonl", line);
  tmp.write("top.jsonl", line);
  tmp.write("sub/base.json", R"({"model": {"d_model": 32}, "task": {"name": "sequence_classification",
      "train_file": "data.jsonl", "valid_file": "data.jsonl"}, "train": {"steps": 7}})");
  const study::ComparePlan plan = study::load_compare_plan(tmp.write("compare.json", R"({"base": "sub/base.json",
      "set": {"task.valid_file": "top.jsonl"}, "grid": {"task.train_file": ["top.jsonl", "sub/data.jsonl"]}})"));
  CHECK(plan.base.task.train_file == absolute(tmp.sub("sub/data.jsonl")));  // the base's directory
  CHECK(plan.base.task.valid_file == absolute(tmp.sub("top.jsonl")));       // "set": the compare config's
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[0].config.task.train_file == absolute(tmp.sub("top.jsonl")));  // the grid: the same
  CHECK(plan.runs[1].config.task.train_file == absolute(tmp.sub("sub/data.jsonl")));
  CHECK(plan.runs[1].config_file["task"]["train_file"] == absolute(tmp.sub("sub/data.jsonl")));
  REQUIRE(plan.extra_axes.size() == 1);
  CHECK(plan.extra_axes[0].first == "task.train_file");

  const std::string inline_base =
      tmp.write("inline.json", R"({"base": {"task": {"name": "reverse"}, "model": {"d_modle": 8}}})");
  CHECK_THROWS_WITH_AS(study::load_compare_plan(inline_base),
                       doctest::Contains((inline_base + ": base: model.d_modle: unknown key").c_str()), InputError);
  CHECK_THROWS_WITH_AS(study::load_compare_plan(tmp.write("number.json", R"({"base": 3})")),
                       (tmp.sub("number.json") + ": base: must be a path (string) or a run config (object)").c_str(),
                       InputError);
  CHECK_THROWS_WITH_AS(study::load_compare_plan(tmp.write("grid.json", R"({"base": "sub/base.json", "grid": []})")),
                       (tmp.sub("grid.json") + ": grid: must be an object").c_str(), InputError);
}
