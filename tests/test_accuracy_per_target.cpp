// Accuracy weighs each target: training accuracy over real targets only (masked LM, where most
// positions are ignored), and the trained/unseen groups of an evaluation weighted per target on a
// tagging task (many targets per sequence), not per sequence.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "normlab/autograd.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/evaluate.hpp"
#include "normlab/train/metrics.hpp"
#include "normlab/train/trainer.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;

namespace {

// Masked LM on a 3-letter text: about 15% of the positions carry a target, the rest are ignored (-1).
train::RunConfig mlm_config(const TempDir& dir) {
  std::string text;
  for (int i = 0; i < 60; ++i) {
    std::string line;
    for (int t = 0; t < 4 + i % 9; ++t) line += "abc"[(i * 7 + t * t) % 3];
    text += fmt::format("{{\"text\": \"{}\"}}\n", line);
  }
  train::RunConfig c;
  c.model.d_model = 16;
  c.model.num_heads = 2;
  c.model.num_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.max_len = 16;
  c.task.name = data::TaskKind::mlm_text;
  c.task.train_file = dir.write("train.jsonl", text);
  c.task.valid_file = dir.write("valid.jsonl", text);
  c.task.min_len = 1;
  c.task.max_len = 12;
  c.task.eval_max_len = 12;
  c.task.eval_examples = 20;
  c.optim.lr = 0.01;
  c.train.steps = 20;
  c.train.batch_size = 16;
  c.train.eval_every = 0;
  c.train.threads = 1;
  train::check_config(c, "mlm");
  return c;
}

}  // namespace

TEST_CASE("train step: accuracy counts only real targets (masked LM: most positions are ignored)") {
  TempDir dir;
  train::Trainer trainer(mlm_config(dir));
  int steps_with_correct = 0;
  for (int i = 0; i < 6; ++i) {
    const data::Batch batch = trainer.next_batch();
    REQUIRE(batch.num_targets > 0);
    REQUIRE(batch.num_targets < int64_t(batch.targets.size()));  // ignored positions are in the batch
    int64_t correct = 0;
    {
      // The logits the step computes before its update (no dropout: the same forward).
      NoGradGuard no_grad;
      trainer.model().train();
      correct = train::count_correct(trainer.model().forward(batch.tokens, batch.offsets), batch.targets);
    }
    const train::StepRecord record = trainer.train_step(batch, false);
    CHECK(record.accuracy == double(correct) / double(batch.num_targets));
    steps_with_correct += correct > 0;
  }
  CHECK(steps_with_correct > 0);  // otherwise any denominator gives 0
}

TEST_CASE("eval groups: trained and unseen accuracy weight each target, not each sequence (tagging)") {
  // Two trained buckets: one long sequence with 10 targets, 9 right; three short ones, 3 targets, 0 right.
  std::vector<train::BucketMetrics> buckets(3);
  buckets[0].bucket = {1, 4, false};
  buckets[0].sequences = 3, buckets[0].targets = 3, buckets[0].accuracy = 0.0, buckets[0].loss = 2.0;
  buckets[1].bucket = {9, 12, false};
  buckets[1].sequences = 1, buckets[1].targets = 10, buckets[1].accuracy = 0.9, buckets[1].loss = 0.5;
  buckets[2].bucket = {13, 16, true};
  buckets[2].sequences = 2, buckets[2].targets = 30, buckets[2].accuracy = 0.5, buckets[2].loss = 1.0;
  const train::GroupMetrics trained = train::group_metrics(buckets, false, false);
  CHECK(trained.targets == 13);
  CHECK(trained.accuracy == doctest::Approx(9.0 / 13.0));  // per sequence it would be 0.225
  CHECK(trained.loss == doctest::Approx((3 * 2.0 + 10 * 0.5) / 13.0));
  CHECK(train::group_metrics(buckets, true, false).accuracy == doctest::Approx(0.5));

  // The same on a real evaluation of a tagging task: the groups from the buckets, target-weighted.
  TempDir dir;
  train::RunConfig config = mlm_config(dir);
  config.task.name = data::TaskKind::reverse;
  config.task.train_file.reset();
  config.task.valid_file.reset();
  config.task.max_len = 4;
  config.task.eval_max_len = 10;
  config.task.bucket_width = 3;
  config.model.vocab_size.reset();
  config.model.num_classes.reset();
  train::check_config(config, "reverse");
  train::Trainer trainer(config);
  for (int i = 0; i < 5; ++i) trainer.train_step(trainer.next_batch(), false);
  const train::EvalMetrics metrics = *trainer.evaluate_valid();
  double correct = 0.0, by_sequence = 0.0;
  int64_t targets = 0, sequences = 0;
  for (const train::BucketMetrics& b : metrics.buckets) {
    if (b.bucket.beyond_train_max) continue;
    correct += b.accuracy * double(b.targets), targets += b.targets;
    by_sequence += b.accuracy * double(b.sequences), sequences += b.sequences;
  }
  REQUIRE(targets > sequences);  // many targets per sequence
  CHECK(metrics.trained.accuracy == doctest::Approx(correct / double(targets)));
  CHECK(std::abs(correct / double(targets) - by_sequence / double(sequences)) > 1e-3);
}
