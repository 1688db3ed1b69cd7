#pragma once
// The JSON records of a run: one line of metrics.jsonl per step (StepRecord) and per evaluation
// (EvalMetrics with "step" and "split"), and summary.json (TrainSummary). docs/run-directory.md
// lists every field.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/shortest.hpp"  // the step records' lr and loss
#include "normlab/train/evaluate.hpp"

namespace normlab::train {

// One training step. tokens_per_s is the only wall-clock field; everything else is a deterministic
// function of the config, the seed and the thread count.
struct StepRecord {
  int64_t step = 0;  // 1-based: the number of updates once this one is applied
  double loss = 0.0;
  double accuracy = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;  // global L2 norm before clipping
  int64_t tokens = 0;      // real tokens in the batch
  int64_t sequences = 0;   // sequences in the batch, and the shortest and longest of them: what the
  int64_t shortest = 0;    // length regime (task.length_regime) put together, so that a loss spike
  int64_t longest = 0;     // can be traced to its batch
  double tokens_per_s = 0.0;
  std::vector<double> residual_rms;      // diagnostics steps only: after each block
  std::vector<double> layer_grad_norms;  // diagnostics steps only: per block, before clipping
  // Diagnostics steps only, per block (nn/diagnostics.hpp): the largest |q.k/sqrt(head_dim)|, each
  // head's attention entropy averaged over query tokens then the mean and the min over heads
  // (nats), and ||dW||/||W|| of this step's update (empty when the step made none).
  std::vector<double> attention_max_logit, attention_entropy_mean, attention_entropy_min, update_ratio;
  // Diagnostics steps only: the output's log Z (log sum exp of a row's logits) over every row.
  std::optional<double> log_z_mean, log_z_max_abs;
  std::optional<double> z_loss;  // optim.z_loss > 0 only: the mean log(Z)^2 the loss adds (before the coefficient)
  bool diverged = false;         // non-finite loss or gradient norm; no update was made
};

// {"step", "loss", "accuracy", "lr", "grad_norm", "tokens", "sequences", "shortest", "longest",
//  "tokens_per_s"[, "z_loss"][, "residual_rms", "layer_grad_norms", "attention_max_logit",
//  "attention_entropy_mean", "attention_entropy_min", "update_ratio", "log_z_mean", "log_z_max_abs"]
//  [, "diverged": true]}; a non-finite value is
// written as null. Records written before the batch composition was logged read back with 0s there.
nlohmann::json to_json(const StepRecord& record);
StepRecord step_record_from_json(const nlohmann::json& json, const std::string& where);

// A point on the validation curve: the whole set's metrics and its two length groups.
struct ValidPoint {
  int64_t step = 0;
  double loss = 0.0;
  double accuracy = 0.0;
  double sequence_accuracy = 0.0;
  std::optional<GroupMetrics> trained;  // absent only in records written before the groups existed
  std::optional<GroupMetrics> unseen;
  std::vector<std::string> labels;  // class names by id, for the per-class metrics (empty: ids)
};

ValidPoint valid_point(int64_t step, const EvalMetrics& metrics);
// What best_valid minimizes: the loss on trained lengths (the whole set's when that group is empty).
double selection_loss(const ValidPoint& point);
// What best_valid_accuracy maximizes: the accuracy on trained lengths (likewise).
double selection_accuracy(const ValidPoint& point);

nlohmann::json to_json(const ValidPoint& point);
// null gives nullopt; InputError "<where>: ..." for anything but an object with an integer "step".
std::optional<ValidPoint> valid_point_from_json(const nlohmann::json& json, const std::string& where);

struct TrainSummary {
  int64_t steps = 0;          // updates made
  int64_t planned_steps = 0;  // train.steps
  // Non-zero: stopped on request (the stop flag's value: the signal number, from the CLI) before
  // train.steps; checkpointed, no summary.json.
  int stop_request = 0;
  bool interrupted() const { return stop_request != 0; }
  bool diverged = false;
  std::optional<int64_t> diverged_at_step;
  double wall_time_s = 0.0;  // summed over every session of a resumed run
  int threads = 1;
  int world_size = 1;  // data-parallel: processes (ranks) the run trained on
  int64_t num_parameters = 0;
  int32_t train_max_len = 0;
  std::optional<StepRecord> final_train;  // the last step
  std::optional<int64_t> final_valid_step;
  std::optional<EvalMetrics> final_valid;         // the last evaluation
  std::optional<ValidPoint> best_valid;           // lowest trained-length validation loss, earliest on ties
  std::optional<ValidPoint> best_valid_accuracy;  // highest trained-length validation accuracy, earliest on ties
  // train.keep_best: the metric best.safetensors holds the best of ("loss", "accuracy", "macro_f1"),
  // the step it was written at and its value; no metric when none is kept.
  std::string best_checkpoint_metric;
  std::optional<int64_t> best_checkpoint_step;
  double best_checkpoint_value = 0.0;
  std::optional<int64_t> early_stopped_at_step;  // train.early_stopping_patience ended the run here
};

nlohmann::json to_json(const TrainSummary& summary);

// A metrics.jsonl line (no newline) with "step" (and "split") first; the other keys sorted.
std::string record_line(const nlohmann::json& record);
// A step's line: record_line(to_json(record)), byte for byte, written without the intermediate
// objects (a line every step).
std::string step_record_line(const StepRecord& record);

// Receives a run's records as the trainer makes them (the library never prints); every method has
// an empty default.
class TrainLogger {
 public:
  virtual ~TrainLogger() = default;
  virtual void info(const std::string& message) { (void)message; }
  // After every step (the record is already in metrics.jsonl).
  virtual void step(const StepRecord& record, int64_t total_steps) { (void)record, (void)total_steps; }
  virtual void eval(int64_t step, const EvalMetrics& metrics) { (void)step, (void)metrics; }
  virtual void checkpoint(int64_t step, const std::string& path) { (void)step, (void)path; }
};

}  // namespace normlab::train
