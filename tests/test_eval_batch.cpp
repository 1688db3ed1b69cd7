// `normlab eval --batch-size N --batch-stats`: the same trained model evaluated one sequence at a
// time and in full batches. LayerNorm's statistics are per token, so its results cannot depend on
// how the sequences are batched; BatchNorm's can, as soon as it uses batch statistics.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "normlab/error.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/trainer.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;

namespace {

std::string train_tiny(TempDir& dir, const std::string& norm) {
  const std::string config_path = dir.write(norm + ".json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
    "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 8, "eval_examples": 24},
    "train": {"steps": 30, "batch_size": 8, "eval_every": 0, "threads": 1}})");
  train::RunConfig config = train::load_config(config_path, {"model.norm=" + norm});
  const std::string run = dir.sub(norm);
  train::Trainer trainer(config);
  trainer.start(run);
  trainer.fit();
  return run;
}

train::EvalMetrics evaluate(const std::string& run, int64_t batch_size, bool batch_statistics) {
  train::LoadedRun loaded = train::load_run(run);
  train::EvalSettings settings;
  settings.batch_size = batch_size;
  settings.batch_statistics = batch_statistics;
  return train::evaluate_run(loaded, std::nullopt, settings).metrics;
}

}  // namespace

TEST_CASE(
    "eval batching: LayerNorm gives the same loss one sequence at a time and in a full batch - BatchNorm "
    "with batch statistics does not") {
  TempDir dir("normlab_test_eval_batch");
  const std::string layernorm = train_tiny(dir, "layernorm");
  const std::string batchnorm = train_tiny(dir, "batchnorm");

  // LayerNorm: per-token statistics. Batching changes nothing, with or without --batch-stats (the
  // packed batch's other sequences never enter a token's normalization).
  const double ln_one = evaluate(layernorm, 1, false).loss;
  CHECK(evaluate(layernorm, 24, false).loss == doctest::Approx(ln_one).epsilon(1e-6));
  CHECK(evaluate(layernorm, 1, true).loss == doctest::Approx(ln_one).epsilon(1e-6));
  CHECK(evaluate(layernorm, 24, true).loss == doctest::Approx(ln_one).epsilon(1e-6));

  // BatchNorm with its running averages: per-feature constants at evaluation, so batching changes
  // nothing either...
  const double bn_running_one = evaluate(batchnorm, 1, false).loss;
  CHECK(evaluate(batchnorm, 24, false).loss == doctest::Approx(bn_running_one).epsilon(1e-6));
  // ...but with batch statistics a sequence's result depends on the batch it is evaluated in.
  const double bn_stats_one = evaluate(batchnorm, 1, true).loss;
  const double bn_stats_full = evaluate(batchnorm, 24, true).loss;
  CHECK(std::abs(bn_stats_one - bn_stats_full) > 1e-3 * bn_stats_full);
  CHECK(std::abs(bn_stats_full - bn_running_one) > 1e-4 * bn_running_one);
}

TEST_CASE("eval batching: --batch-size out of range is refused naming the flag") {
  TempDir dir("normlab_test_eval_batch_flag");
  const std::string run = train_tiny(dir, "layernorm");
  train::LoadedRun loaded = train::load_run(run);
  train::EvalSettings settings;
  settings.batch_size = 0;
  try {
    train::evaluate_run(loaded, std::nullopt, settings);
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("--batch-size") != std::string::npos);
  }
}
