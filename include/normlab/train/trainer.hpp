#pragma once
// The training loop, its records, and the run directory it fills (docs/run-directory.md).
//
//   sample a batch -> forward -> cross-entropy over the targets (-1 ignored) -> backward
//   -> clip -> optimizer step with the scheduled lr
//
// every eval_every steps: validation in eval mode without a graph; every checkpoint_every steps and
// at the end: checkpoint.safetensors. Every step appends one line to metrics.jsonl (flushed), so
// a crash loses nothing but the step in flight; `resume` continues bit-identically.
//
// A non-finite loss or gradient norm stops the run before the update is applied: the step's record
// says "diverged": true and summary.json records the step.
//
// The library never prints: progress goes to a TrainLogger the caller supplies.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/data/buckets.hpp"
#include "normlab/data/dataset.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/evaluate.hpp"

namespace normlab::dist {
class DataParallel;
}

namespace normlab::train {

// The files of a run directory.
struct RunPaths {
  explicit RunPaths(const std::string& dir);
  std::string dir;
  std::string config;      // config.json: the resolved config
  std::string metrics;     // metrics.jsonl: one record per step and per evaluation
  std::string checkpoint;  // checkpoint.safetensors
  std::string summary;     // summary.json: written when the run ends
};

// One training step. tokens_per_s is the only wall-clock field; everything else is a deterministic
// function of the config, the seed and the thread count.
struct StepRecord {
  int64_t step = 0;  // 1-based: the number of updates once this one is applied
  double loss = 0.0;
  double accuracy = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;  // global L2 norm before clipping
  int64_t tokens = 0;      // real tokens in the batch
  double tokens_per_s = 0.0;
  std::vector<double> residual_rms;      // diagnostics steps only: after each block
  std::vector<double> layer_grad_norms;  // diagnostics steps only: per block, before clipping
  bool diverged = false;                 // non-finite loss or gradient norm; no update was made
};

// {"step", "loss", "accuracy", "lr", "grad_norm", "tokens_per_s"[, "residual_rms", "layer_grad_norms"]
//  [, "diverged": true]}; a non-finite value is written as null.
nlohmann::json to_json(const StepRecord& record);
StepRecord step_record_from_json(const nlohmann::json& json, const std::string& where);

// A point on the validation curve.
struct ValidPoint {
  int64_t step = 0;
  double loss = 0.0;
  double accuracy = 0.0;
  double sequence_accuracy = 0.0;
};

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
  std::optional<EvalMetrics> final_valid;  // the last evaluation
  std::optional<ValidPoint> best_valid;           // lowest validation loss
  std::optional<ValidPoint> best_valid_accuracy;  // highest validation accuracy
};

nlohmann::json to_json(const TrainSummary& summary);

// Receives progress; every method has an empty default.
class TrainLogger {
 public:
  virtual ~TrainLogger() = default;
  virtual void info(const std::string& message) { (void)message; }
  // After every step (the record is already in metrics.jsonl).
  virtual void step(const StepRecord& record, int64_t total_steps) { (void)record, (void)total_steps; }
  virtual void eval(int64_t step, const EvalMetrics& metrics) { (void)step, (void)metrics; }
  virtual void checkpoint(int64_t step, const std::string& path) { (void)step, (void)path; }
};

class Trainer {
 public:
  // Builds the task, data, model and optimizer from a validated config. Touches no file.
  explicit Trainer(RunConfig config, TrainLogger* logger = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // A new run in `dir` (created if needed). InputError if it already holds a checkpoint (resume it,
  // or choose another directory). Writes config.json and starts an empty metrics.jsonl.
  void start(const std::string& dir);
  // Continues the run in `dir` from its checkpoint: restores model, optimizer, RNG and data
  // position, then cuts metrics.jsonl back to the checkpoint's step (dropping a torn last line).
  // The config may differ from the checkpoint's only in resume_mutable_keys().
  void resume(const std::string& dir);
  // Trains until train.steps updates (or divergence), evaluating, checkpointing and logging as
  // configured; writes summary.json. Sets the thread count to train.threads when it is not 0.
  // If a stop flag is set and becomes non-zero, run() finishes the step in flight, writes a
  // checkpoint and returns with summary.interrupted() (no summary.json: the run is not finished and
  // `resume` continues it).
  TrainSummary run();
  // The flag run() polls between steps; a signal handler may store to it (it is lock-free).
  // nullptr (the default): never stop early.
  void set_stop_flag(const std::atomic<int>* flag) { stop_flag_ = flag; }

  // The pieces of run(), for tests and benchmarks.
  data::Batch next_batch();
  // forward, loss, backward, clip, update; step() advances unless the record says diverged.
  StepRecord train_step(const data::Batch& batch, bool diagnostics);
  EvalMetrics evaluate_valid();
  void save_checkpoint(const std::string& path) const;
  // Restores everything a checkpoint holds (InputError naming the tensor / key on any mismatch).
  void load_checkpoint(const std::string& path);

  const RunConfig& config() const { return config_; }
  const data::Task& task() const { return task_; }
  nn::EncoderModel& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  int64_t step() const { return step_; }
  int32_t train_max_len() const { return train_max_len_; }
  const data::Dataset& valid_set() const { return valid_set_; }

 private:
  void open_metrics(bool truncate);
  void write_metrics(const nlohmann::json& record);
  void record_eval();
  nlohmann::json trainer_state() const;
  void restore_trainer_state(const nlohmann::json& state, const std::string& where);
  // data-parallel: train_step on this rank's share, sums reduced over ranks (src/dist/trainer_step.cpp).
  StepRecord data_parallel_step(const data::Batch& batch, bool diagnostics, StepRecord record, float lr);

  RunConfig config_;
  TrainLogger* logger_;
  TrainLogger null_logger_;
  data::Task task_;
  std::optional<data::Dataset> train_set_;  // file-backed training data; generated otherwise
  data::Dataset valid_set_;
  std::vector<data::Batch> valid_batches_;
  std::vector<data::LengthBucket> buckets_;
  int32_t train_max_len_ = 0;
  std::unique_ptr<data::BatchSampler> batch_sampler_;
  std::unique_ptr<data::GeneratorSampler> generator_;
  std::unique_ptr<nn::EncoderModel> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::ScheduleOptions schedule_;

  int64_t step_ = 0;
  std::optional<RunPaths> paths_;
  std::ofstream metrics_;
  double previous_wall_time_s_ = 0.0;  // sessions before a resume
  std::optional<StepRecord> last_record_;
  std::optional<int64_t> last_eval_step_;
  std::optional<EvalMetrics> last_eval_;
  std::optional<ValidPoint> best_loss_, best_accuracy_;
  int64_t last_checkpoint_step_ = -1;
  const std::atomic<int>* stop_flag_ = nullptr;
  std::chrono::steady_clock::time_point session_start_ = std::chrono::steady_clock::now();
  std::unique_ptr<dist::DataParallel> dp_;  // data-parallel: the ranks of this run (one without mpirun)
};

// The lines of a metrics.jsonl that a resume at `step` keeps: complete (newline-terminated) lines
// that parse as JSON objects with "step" <= step, up to the first line that is not. Returns the
// byte length of that prefix; the file is cut there.
int64_t truncate_metrics(const std::string& path, int64_t step);

}  // namespace normlab::train
