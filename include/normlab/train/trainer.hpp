#pragma once
// The training loop. Its records are in records.hpp, the run directory it fills in run_dir.hpp
// (docs/run-directory.md).
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
// The library never prints: progress goes to a TrainLogger (records.hpp) the caller supplies.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/io/atomic_file.hpp"
#include "normlab/data/buckets.hpp"
#include "normlab/data/dataset.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/data_fingerprint.hpp"
#include "normlab/train/evaluate.hpp"
#include "normlab/train/records.hpp"
#include "normlab/train/run_clock.hpp"
#include "normlab/train/run_dir.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::dist {
class StepReduction;
}
namespace normlab::io {
struct SafetensorsFile;
}

namespace normlab::train {

class RunOutput;  // who writes the run: the one process or rank 0, or a follower rank (src/train/run_output.hpp)

class Trainer {
 public:
  // Builds the task, data, model and optimizer from a validated config. Touches no file. First
  // refuses (InputError, train/memory.hpp) a config whose memory estimate is over the limit. A stop
  // request on `stop` while the data loads throws io::StopRequested; fit() polls the same flag.
  explicit Trainer(RunConfig config, TrainLogger* logger = nullptr, io::StopFlag stop = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // A new run in `dir` (created if needed), which this trainer then owns (RunDirectory: locked).
  // InputError if it already holds a checkpoint (resume it, or choose another directory) or
  // another process owns it. Writes config.json and starts an empty metrics.jsonl.
  void start(const std::string& dir);
  // Continues the run in `dir` from its checkpoint: locks it, restores model, optimizer, RNG and
  // data position, then cuts metrics.jsonl back to the checkpoint's step (dropping a torn last
  // line; refusing, with nothing changed, a corrupt line anywhere else). The config may differ
  // from the checkpoint's only in resume_mutable_keys(). A data file whose content is not the one
  // the checkpoint recorded is refused (InputError naming it, nothing changed) unless
  // `accept_changed_data`: then the run continues on the new content and data.json records it.
  void resume(const std::string& dir, bool accept_changed_data = false);
  // Trains until train.steps updates (or divergence), evaluating, checkpointing and logging as
  // configured; writes summary.json. Sets the thread count to train.threads when it is not 0.
  // If a stop flag is set and becomes non-zero, fit() stops within a step or an evaluation batch:
  // a step in flight finishes, an evaluation in flight is abandoned (not recorded); it then writes
  // a checkpoint of the last completed step and returns with summary.interrupted() (no
  // summary.json: the run is not finished and `resume` continues it).
  TrainSummary fit();

  // The pieces of fit(), for tests and benchmarks.
  data::Batch next_batch();
  // One update from the global batch, the same code for one process and for N ranks (the step's
  // dist::StepReduction): this process's share -> forward, loss -> backward -> sums over the ranks
  // (none for one process) -> clip, update. step() advances unless the record says diverged.
  StepRecord train_step(const data::Batch& batch, bool diagnostics);
  // std::nullopt if a stop was requested part-way.
  std::optional<EvalMetrics> evaluate_valid();
  void save_checkpoint(const std::string& path) const;
  // The same checkpoint, written but not committed: the run's last, committed with summary.json.
  std::unique_ptr<io::AtomicFileWriter> stage_checkpoint_file(const std::string& path) const;
  std::map<std::string, std::string> checkpoint_metadata() const;
  // Restores everything a checkpoint holds (InputError naming the tensor / key on any mismatch, or
  // a data file whose content changed since the checkpoint, unless resume() accepts that).
  void load_checkpoint(const std::string& path);

  const RunConfig& config() const { return config_; }
  const data::Task& task() const { return task_; }
  nn::EncoderModel& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  int64_t step() const { return step_; }
  int32_t train_max_len() const { return train_max_len_; }
  const data::Dataset& valid_set() const { return valid_set_; }
  // The data files this run reads, hashed when the trainer was built.
  const DataFingerprint& data_files() const { return data_files_; }

 private:
  bool record_eval();               // false: stopped on request before the evaluation finished
  KeepBest kept_metric() const;     // train.keep_best with "auto" resolved for this task
  KeepBest watched_metric() const;  // what early stopping watches: the kept metric, or loss when none is kept
  void update_monitor(const ValidPoint& point, const EvalMetrics& metrics);  // may write best.safetensors
  bool patience_ran_out() const;  // train.early_stopping_patience evaluations without improvement
  nlohmann::json trainer_state() const;
  std::string describe_run() const;
  TrainSummary make_summary() const;
  void restore_trainer_state(const nlohmann::json& state, const std::string& where);
  // The checkpoint's metadata 'data' against data_files_: InputError naming the first changed file,
  // or, when the resume accepts changed data, the changes kept in accepted_changes_.
  void check_data_unchanged(const io::SafetensorsFile& file, const std::string& path);
  // The end of a step, once the gradients are in: per-layer gradient norms (diagnostics), clip, and
  // the update with `lr` (and, on a diagnostics step, each block's ||dW|| / ||W||), unless the
  // gradient norm is not finite: then `record` says diverged and the gradients are dropped. step()
  // advances on an update. grads_finite: the backward found every gradient finite (and nothing has
  // changed them since), so with clipping off the norm may come from the update's own pass.
  void apply_update(StepRecord& record, double lr, bool diagnostics, bool grads_finite);
  // Stop requested: the local flag, or with several ranks the request they agreed on in the last step.
  int stop_request() const;

  RunConfig config_;
  io::StopFlag stop_flag_ = nullptr;
  std::unique_ptr<RunOutput> output_;  // who writes this run: set once, by the constructor
  TrainLogger* logger_ = nullptr;      // output_->logger()
  FileUse train_use_, valid_use_;      // filled while the data loads, so declared before it
  DataFingerprint data_files_;         // hashed before the data loads
  bool accept_changed_data_ = false;
  std::vector<DataChange> accepted_changes_;  // found by load_checkpoint when accepted
  data::Task task_;
  std::optional<data::Dataset> train_set_;  // file-backed training data; generated otherwise
  data::Dataset valid_set_;
  std::vector<data::Batch> valid_batches_;
  std::vector<data::LengthBucket> buckets_;
  Baselines baselines_;
  int32_t train_max_len_ = 0;
  std::unique_ptr<data::BatchSampler> batch_sampler_;
  std::unique_ptr<data::GeneratorSampler> generator_;
  std::unique_ptr<nn::EncoderModel> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::ScheduleOptions schedule_;

  int64_t step_ = 0;
  double previous_wall_time_s_ = 0.0;  // sessions before a resume
  std::optional<StepRecord> last_record_;
  std::optional<int64_t> last_eval_step_;
  std::optional<EvalMetrics> last_eval_;
  std::optional<ValidPoint> best_loss_, best_accuracy_;
  // train.keep_best / early stopping: the kept metric's best value and its step (the step of
  // best.safetensors when one is kept), improved only by more than early_stopping_min_delta.
  struct MonitorBest {
    int64_t step = 0;
    double value = 0.0;
  };
  std::optional<MonitorBest> monitor_best_;
  std::optional<int64_t> early_stopped_at_;
  int64_t last_checkpoint_step_ = -1;
  std::chrono::steady_clock::time_point session_start_ = std::chrono::steady_clock::now();
  RunClock clock_;                              // where the run's time goes: summary.json's "timing"
  std::unique_ptr<dist::StepReduction> ranks_;  // the processes of this run: one, or N under mpirun
};

}  // namespace normlab::train
