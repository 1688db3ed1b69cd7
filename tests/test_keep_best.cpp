// train.keep_best and early stopping: best.safetensors holds the state of the best held-out
// evaluation, eval and predict load it by default and say so, and early stopping ends a run after
// `patience` evaluations without an improvement.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support.hpp"

using namespace normlab::test;
using nlohmann::json;

namespace {

const std::string kSentiment = std::string(NORMLAB_SOURCE_DIR) + "/configs/sentiment.json";
// 60 steps on the sentiment example, an evaluation every 5, a constant rate (so a resumed run's
// schedule is the uninterrupted run's), small enough to take a second.
const std::string kShort =
    " --set train.steps=60 --set train.eval_every=5 --set train.checkpoint_every=20"
    " --set optim.schedule=constant --set task.eval_examples=100 --set model.d_model=32"
    " --set model.ffn=64";

json read_json(const std::string& path) { return json::parse(read_text(path)); }

// The evaluation records' (step, trained-length loss), in file order.
std::vector<std::pair<int64_t, double>> eval_losses(const std::string& run) {
  std::vector<std::pair<int64_t, double>> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json record = json::parse(line);
    if (record.value("split", "") == "valid") out.emplace_back(record["step"], record["trained"]["loss"]);
  }
  return out;
}

}  // namespace

TEST_CASE("keep_best: an own-data run keeps the state of its lowest held-out loss, and eval and predict use it") {
  TempDir dir;
  const std::string run = dir.sub("run");
  REQUIRE(run_normlab(dir, "train --config " + kSentiment + kShort + " --out " + run).code == 0);
  REQUIRE(std::filesystem::is_regular_file(run + "/best.safetensors"));
  // The best step is the earliest evaluation with the lowest trained-length loss.
  const auto losses = eval_losses(run);
  REQUIRE(losses.size() == 12);
  std::pair<int64_t, double> best = losses[0];
  for (const auto& point : losses)
    if (point.second < best.second) best = point;
  const json summary = read_json(run + "/summary.json");
  CHECK(summary["best_checkpoint"]["metric"] == "loss");
  CHECK(summary["best_checkpoint"]["step"] == best.first);
  CHECK(summary["best_checkpoint"]["value"].get<double>() == best.second);
  CHECK(summary["early_stopped_at_step"].is_null());

  Cli eval = run_normlab(dir, "eval --run " + run);
  REQUIRE(eval.code == 0);
  CHECK(eval.out.find("checkpoint best (best.safetensors, step " + std::to_string(best.first) + ":") !=
        std::string::npos);
  Cli last = run_normlab(dir, "eval --json --checkpoint last --run " + run);
  REQUIRE(last.code == 0);
  CHECK(json::parse(last.out)["checkpoint"] == "last");
  CHECK(json::parse(last.out)["step"] == 60);
  // The best checkpoint's own evaluation is the one metrics.jsonl recorded at its step.
  Cli best_json = run_normlab(dir, "eval --json --run " + run);
  REQUIRE(best_json.code == 0);
  CHECK(json::parse(best_json.out)["step"] == best.first);
  CHECK(json::parse(best_json.out)["checkpoint"] == "best");
  Cli predict = run_normlab(dir, "predict --run " + run + " --input 'the plot was great'");
  CHECK(predict.code == 0);
  CHECK(predict.err.find("normlab: note: checkpoint best (best.safetensors, step " + std::to_string(best.first)) !=
        std::string::npos);
  Cli bad = run_normlab(dir, "eval --checkpoint newest --run " + run);
  CHECK(bad.code == 2);
}

TEST_CASE("keep_best: a generated task keeps none by default, and asking for best says why there is none") {
  TempDir dir;
  const std::string run = dir.sub("reverse");
  REQUIRE(run_normlab(dir, std::string("train --config ") + NORMLAB_SOURCE_DIR +
                               "/configs/reverse.json --set train.steps=4 --set train.eval_every=2 --out " + run)
              .code == 0);
  CHECK_FALSE(std::filesystem::exists(run + "/best.safetensors"));
  CHECK(read_json(run + "/summary.json")["best_checkpoint"].is_null());
  Cli best = run_normlab(dir, "eval --checkpoint best --run " + run);
  CHECK(best.code == 2);
  CHECK(best.err.find(run + ": no best.safetensors (") != std::string::npos);
  // keep_best "accuracy" on the same task keeps one.
  const std::string kept = dir.sub("kept");
  REQUIRE(run_normlab(dir, std::string("train --config ") + NORMLAB_SOURCE_DIR +
                               "/configs/reverse.json --set train.steps=4 --set train.eval_every=2"
                               " --set train.keep_best=accuracy --out " +
                               kept)
              .code == 0);
  CHECK(read_json(kept + "/summary.json")["best_checkpoint"]["metric"] == "accuracy");
  CHECK(std::filesystem::is_regular_file(kept + "/best.safetensors"));
}

TEST_CASE("early stopping: patience counts evaluations since the last improvement larger than min_delta") {
  TempDir dir;
  // No later evaluation can improve on the first by 1000 nats: the run stops `patience`
  // evaluations after step 5, at step 15, with the first evaluation kept as best.
  const std::string run = dir.sub("run");
  Cli train = run_normlab(dir, "train --config " + kSentiment + kShort +
                                   " --set train.early_stopping_patience=2 --set train.early_stopping_min_delta=1000"
                                   " --out " +
                                   run);
  REQUIRE(train.code == 0);
  CHECK(train.err.find("early stopping at step 15: held-out loss has not improved by more than 1000 for 2 "
                       "evaluations (best at step 5)") != std::string::npos);
  const json summary = read_json(run + "/summary.json");
  CHECK(summary["early_stopped_at_step"] == 15);
  CHECK(summary["steps"] == 15);
  CHECK(summary["best_checkpoint"]["step"] == 5);
  // Without min_delta the run keeps improving often enough to go on longer than that.
  Cli refused =
      run_normlab(dir, "train --config " + kSentiment + kShort +
                           " --set train.early_stopping_patience=2 --set train.eval_every=0 --out " + dir.sub("never"));
  CHECK(refused.code == 2);
  CHECK(refused.err.find("train.early_stopping_patience: counts evaluations: needs train.eval_every > 0") !=
        std::string::npos);
}

TEST_CASE("keep_best: a run resumed from its checkpoint keeps the same best as the uninterrupted run") {
  TempDir dir;
  const std::string whole = dir.sub("whole"), halves = dir.sub("halves");
  REQUIRE(run_normlab(dir, "train --config " + kSentiment + kShort + " --out " + whole).code == 0);
  REQUIRE(run_normlab(dir, "train --config " + kSentiment + kShort + " --set train.steps=40 --out " + halves).code ==
          0);
  REQUIRE(run_normlab(dir, "train --resume " + halves + " --set train.steps=60").code == 0);
  const json a = read_json(whole + "/summary.json"), b = read_json(halves + "/summary.json");
  CHECK(a["best_checkpoint"] == b["best_checkpoint"]);
  CHECK(read_text(whole + "/best.safetensors").size() > 0);
  // Same state, same bytes: the model and optimizer tensors of the two best files agree.
  Cli ea = run_normlab(dir, "eval --json --run " + whole), eb = run_normlab(dir, "eval --json --run " + halves);
  REQUIRE(ea.code == 0);
  REQUIRE(eb.code == 0);
  CHECK(json::parse(ea.out)["loss"] == json::parse(eb.out)["loss"]);
}
