#pragma once
// Evaluation: loss and accuracy over a fixed set of batches, overall and per length bucket.
//
//   loss               mean cross-entropy over every target (token-weighted, like training)
//   accuracy           fraction of targets whose argmax is right
//   sequence_accuracy  fraction of sequences with every target right (per-sequence tasks: = accuracy)
//
// A bucket reports the sequences whose length falls in it; buckets wholly beyond the longest
// training sequence measure length generalization (data/buckets.hpp).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/data/buckets.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/nn/encoder.hpp"

namespace normlab::train {

struct BucketMetrics {
  data::LengthBucket bucket;
  int64_t sequences = 0;
  int64_t targets = 0;
  double loss = 0.0;  // 0 when the bucket has no targets
  double accuracy = 0.0;
  double sequence_accuracy = 0.0;
};

struct EvalMetrics {
  int64_t sequences = 0;
  int64_t targets = 0;
  double loss = 0.0;
  double accuracy = 0.0;
  double sequence_accuracy = 0.0;
  std::vector<BucketMetrics> buckets;  // one per requested bucket, empty ones included
};

// Runs the model in eval mode without recording a graph (the model's train/eval mode is restored
// afterwards). A sequence whose length falls in no bucket counts only in the totals.
EvalMetrics evaluate(nn::EncoderModel& model, const std::vector<data::Batch>& batches,
                     const std::vector<data::LengthBucket>& buckets);
// The same, polling `stop` before every batch: std::nullopt once a stop is requested.
// batch_statistics: BatchNorm layers normalize with each evaluation batch's own statistics (their
// training-mode forward; running averages are updated in memory only) while dropout stays off.
std::optional<EvalMetrics> evaluate_unless_stopped(nn::EncoderModel& model, const std::vector<data::Batch>& batches,
                                                   const std::vector<data::LengthBucket>& buckets, io::StopFlag stop,
                                                   bool batch_statistics = false);

// {"loss", "accuracy", "sequence_accuracy", "sequences", "targets",
//  "buckets": [{"min_len", "max_len", "beyond_train", "loss", "accuracy", "sequence_accuracy",
//               "count" (sequences), "targets"}]}; an empty bucket has null loss and accuracies.
nlohmann::json to_json(const EvalMetrics& metrics);
// The inverse of to_json (null values read as 0). InputError "<where>: ..." on a missing key.
EvalMetrics eval_metrics_from_json(const nlohmann::json& json, const std::string& where);

}  // namespace normlab::train
