#pragma once
// Evaluation: loss and accuracy over a fixed set of batches, overall and per length bucket.
//
//   loss               mean cross-entropy over every target (token-weighted, like training)
//   accuracy           fraction of targets whose argmax is right
//   sequence_accuracy  fraction of sequences with every target right (per-sequence tasks: = accuracy)
//
// A bucket reports the sequences whose length falls in it; buckets wholly beyond the longest
// training sequence measure length generalization (data/buckets.hpp). The buckets are summed into
// two groups: "trained" (lengths up to the longest training sequence, which counts as trained) and
// "unseen" (longer). Each group also carries majority_accuracy, the accuracy of always answering
// the training data's most frequent label, and the evaluation the chance baselines of K labels:
// uniform_loss = ln K, uniform_accuracy = 1/K.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/data/buckets.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/train/class_metrics.hpp"

namespace normlab::train {

struct BucketMetrics {
  data::LengthBucket bucket;
  int64_t sequences = 0;
  int64_t targets = 0;
  double loss = 0.0;  // 0 when the bucket has no targets
  double accuracy = 0.0;
  double sequence_accuracy = 0.0;
  int64_t majority_correct = 0;  // targets equal to the training data's most frequent label
  Confusion confusion;           // (V, V) targets against answers, V = the logits' width
};

// A group of buckets summed: loss, accuracy and majority_accuracy weighted by targets,
// sequence_accuracy by sequences.
struct GroupMetrics {
  int64_t sequences = 0;
  int64_t targets = 0;
  double loss = 0.0;
  double accuracy = 0.0;
  double sequence_accuracy = 0.0;
  std::optional<double> majority_accuracy;  // nullopt: no majority label known
  // The share of targets whose prediction is the group's most frequent prediction (1: constant
  // output); set for the trained group only, nullopt elsewhere.
  std::optional<double> top_prediction_share;
  Confusion confusion;  // the buckets' matrices summed (class_metrics.hpp: per-class metrics, macro-F1)
};

// What the baselines need from the task and its training data.
struct Baselines {
  int32_t num_labels = 0;                // K, the labels the task can output; 0: the logits' width
  int32_t majority_label = -1;           // the training data's most frequent label; -1: unknown
  std::vector<std::string> label_names;  // the task's classes by id, for per-class metrics
};

struct EvalMetrics {
  int64_t sequences = 0;
  int64_t targets = 0;
  double loss = 0.0;
  double accuracy = 0.0;
  double sequence_accuracy = 0.0;
  std::vector<BucketMetrics> buckets;  // one per requested bucket, empty ones included
  GroupMetrics trained;                // buckets with beyond_train false
  std::optional<GroupMetrics> unseen;  // buckets with beyond_train true; nullopt if they hold no target
  double uniform_loss = 0.0;           // ln K
  double uniform_accuracy = 0.0;       // 1 / K
  bool majority_known = false;         // majority_correct counts mean something
  Confusion confusion;                 // every target, bucketed or not
  std::vector<std::string> labels;     // class names by id (Baselines::label_names)
};

// The buckets with beyond_train_max == beyond summed (majority_known: fill majority_accuracy).
GroupMetrics group_metrics(const std::vector<BucketMetrics>& buckets, bool beyond, bool majority_known);

// Runs the model in eval mode without recording a graph (the model's train/eval mode is restored
// afterwards). A sequence whose length falls in no bucket counts only in the totals.
EvalMetrics evaluate(nn::EncoderModel& model, const std::vector<data::Batch>& batches,
                     const std::vector<data::LengthBucket>& buckets, const Baselines& baselines = {});
// The same, polling `stop` before every batch: std::nullopt once a stop is requested.
// batch_statistics: BatchNorm layers normalize with each evaluation batch's own statistics (their
// training-mode forward; running averages are updated in memory only) while dropout stays off.
std::optional<EvalMetrics> evaluate_unless_stopped(nn::EncoderModel& model, const std::vector<data::Batch>& batches,
                                                   const std::vector<data::LengthBucket>& buckets, io::StopFlag stop,
                                                   bool batch_statistics = false, const Baselines& baselines = {});

// {"loss", "accuracy", "sequence_accuracy", "sequences", "targets",
//  "buckets": [{"min_len", "max_len", "beyond_train", "loss", "accuracy", "sequence_accuracy",
//               "count" (sequences), "targets"}],
//  "trained": {"loss", "accuracy", "sequence_accuracy", "sequences", "targets", "majority_accuracy"},
//  "unseen": the same or null, "uniform_loss", "uniform_accuracy", "labels"}; an empty bucket or group
//  has null loss and accuracies, an unknown majority label a null majority_accuracy. The whole
//  evaluation and each group also carry class_metrics_json: "macro_f1", "balanced_accuracy",
//  "confusion", "classes".
nlohmann::json to_json(const EvalMetrics& metrics);
// False when the evaluation has one bucket of every length, counted as trained (task.bucket_width
// 0, own data's default): no length split was asked for.
bool has_length_buckets(const EvalMetrics& metrics);
// One line for logs; without length buckets "held-out: loss 0.61, accuracy 0.80, macro-F1 0.78
// (majority-label baseline 0.21); chance: ...", otherwise "trained lengths 1-16: loss 0.0100, accuracy 1.0000, sequence
// accuracy 1.0000 (majority 0.1000); unseen lengths 17-64: loss ..., accuracy ...; chance: loss 2.3026, accuracy
// 0.1000".
std::string describe_groups(const EvalMetrics& metrics);

nlohmann::json to_json(const GroupMetrics& group, const std::vector<std::string>& label_names = {});
GroupMetrics group_metrics_from_json(const nlohmann::json& json, const std::string& where);
// The inverse of to_json (null values read as 0). InputError "<where>: ..." on a missing key.
EvalMetrics eval_metrics_from_json(const nlohmann::json& json, const std::string& where);

}  // namespace normlab::train
