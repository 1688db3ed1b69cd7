// The messages a new user meets: suggestions in the names users type, errors that name
// their file and the part of it that is wrong, and CLI arguments in any order.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "normlab/error.hpp"
#include "normlab/io/suggest.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/config.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::Cli;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

std::string override_error(const std::string& assignment) {
  train::RunConfig config;
  try {
    train::apply_override(config, assignment);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

std::string plan_error(const TempDir& dir, const std::string& text) {
  const std::string path = dir.write("compare.json", text);
  try {
    (void)study::load_compare_plan(path);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

const char* kTiny = R"({
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 16, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 4, "batch_size": 8, "eval_every": 0, "checkpoint_every": 0, "threads": 1}
})";

}  // namespace

TEST_CASE("messages: suggestions use the names users type and the full dotted key") {
  CHECK(override_error("optim.learning_rate=0.1").find("did you mean 'optim.lr'?") != std::string::npos);
  CHECK(override_error("optim.learnig_rate=0.1").find("did you mean 'optim.lr'?") != std::string::npos);
  CHECK(override_error("optim.lr_rate=0.1").find("did you mean 'optim.lr'?") != std::string::npos);
  CHECK(override_error("model.learning_rate=0.1").find("did you mean 'optim.lr'?") != std::string::npos);
  CHECK(override_error("train.step=10").find("did you mean 'train.steps'?") != std::string::npos);
  CHECK(override_error("steps=10").find("did you mean 'train.steps'?") != std::string::npos);
  for (const auto& [typed, meant] : {std::pair{"ln", "layernorm"}, std::pair{"layer_norm", "layernorm"},
                                     std::pair{"bn", "batchnorm"}, std::pair{"rms", "rmsnorm"}}) {
    INFO(typed);
    CHECK(override_error(fmt::format("model.norm={}", typed)).find(fmt::format("did you mean '{}'?", meant)) !=
          std::string::npos);
  }
  // Ordinary typos still go by edit distance within the section.
  CHECK(override_error("model.d_modle=8").find("did you mean 'model.d_model'?") != std::string::npos);
  CHECK(io::closest("warmpu", {"warmup", "lr"}) == "warmup");
}

TEST_CASE("messages: a compare grid suggests what it accepts, and a set error says set") {
  TempDir dir;
  dir.write("base.json", kTiny);
  const std::string variant = plan_error(dir, R"({"base": "base.json", "grid": {"variant": ["none"]}})");
  CHECK(variant.find("did you mean 'variants'?") != std::string::npos);
  const std::string seed = plan_error(dir, R"({"base": "base.json", "grid": {"seed": [0, 1]}})");
  CHECK(seed.find("did you mean 'seeds'?") != std::string::npos);
  CHECK(seed.find("train.seed") == std::string::npos);
  const std::string steps = plan_error(dir, R"({"base": "base.json", "grid": {"steps": [5, 10]}})");
  CHECK(steps.find("did you mean 'train.steps'?") != std::string::npos);
  const std::string set = plan_error(dir, R"({"base": "base.json", "set": {"optim.lrr": 0.1}})");
  CHECK(set.find(dir.sub("compare.json") + ": set: optim.lrr: unknown key (did you mean 'optim.lr'?)") == 0);
  CHECK(set.find("(base)") == std::string::npos);
  // A mistake in the base is the base file's.
  dir.write("bad.json", R"({"model": {"d_model": 15, "heads": 2}})");
  const std::string base = plan_error(dir, R"({"base": "bad.json", "grid": {"seeds": [0]}})");
  CHECK(base.find(dir.sub("bad.json") + ": model.d_model") == 0);
}

TEST_CASE("messages: errors found while the data loads still name the config file") {
  TempDir dir;
  dir.write("train.jsonl", "{\"tokens\": \"a b c\", \"label\": \"x\"}\n{\"tokens\": \"b\", \"label\": \"y\"}\n");
  dir.write("config.json",
            R"({"model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16, "vocab_size": 3},
    "task": {"name": "sequence_classification", "train_file": "train.jsonl", "valid_file": "train.jsonl",
             "max_len": 8, "eval_max_len": 8},
    "train": {"steps": 2, "batch_size": 2, "threads": 1}})");
  const Cli cli = run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("config.json"), dir.sub("run")));
  CHECK(cli.code == 2);
  CHECK(cli.err.find("normlab: error: " + dir.sub("config.json") + ": model.vocab_size: must be at least") == 0);
}

TEST_CASE("messages: report --label may stand before the run directories") {
  TempDir dir;
  dir.write("tiny.json", kTiny);
  REQUIRE(run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("tiny.json"), dir.sub("a"))).code == 0);
  REQUIRE(run_normlab(dir, fmt::format("train --config {} --out {} --set model.norm=none", dir.sub("tiny.json"),
                                       dir.sub("b")))
              .code == 0);
  const Cli cli = run_normlab(dir, fmt::format("report --label LN={} --label none={} {} {} --out {}", dir.sub("a"),
                                               dir.sub("b"), dir.sub("a"), dir.sub("b"), dir.sub("report")));
  INFO(cli.err);
  CHECK(cli.code == 0);
  CHECK(read_text(dir.sub("report/report.md")).find("LN") != std::string::npos);
}
