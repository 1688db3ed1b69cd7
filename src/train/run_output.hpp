#pragma once
// Who writes a run, decided once (Trainer's constructor): the training loop calls these and never
// asks which rank it is.
//   owner     one process, or rank 0 of a data-parallel run (mpirun -np N): owns the run directory
//             (RunDirectory, locked) and writes config.json, vocab.json, data.json, metrics.jsonl with the
//             evaluations, checkpoint.safetensors and summary.json; evaluates; logs
//   follower  the other ranks: train their share of each batch and load the checkpoint on resume;
//             write, evaluate and log nothing
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "normlab/io/atomic_file.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/data_fingerprint.hpp"
#include "normlab/train/records.hpp"

namespace normlab::train {

class RunOutput {
 public:
  virtual ~RunOutput() = default;
  // Where progress goes: the caller's logger for the owner, a silent one for a follower.
  virtual TrainLogger& logger() = 0;
  // A new run in dir: the owner creates and locks it, writes config.json, vocab.json and data.json.
  virtual void open_new(const std::string& dir, const RunConfig& config, const std::string& vocab_json,
                        const DataRecord& data) = 0;
  // The run in dir to resume: its checkpoint's path (InputError if there is none). The owner locks
  // the directory first.
  virtual std::string open_existing(const std::string& dir) = 0;
  // After the checkpoint loaded: the owner cuts metrics.jsonl back to `step` and writes data.json:
  // `files` now, and the run's earlier accepted changes plus `accepted` (--accept-changed-data).
  virtual void resumed(const RunConfig& config, int64_t step, const DataFingerprint& files,
                       const std::vector<DataChange>& accepted) = 0;
  virtual bool is_open() const = 0;
  virtual bool evaluates() const = 0;
  virtual void append_metrics(const nlohmann::json& record) = 0;
  virtual void append_step(const StepRecord& record) = 0;  // its metrics.jsonl line
  // save(path) writes the checkpoint, on the rank that writes it.
  virtual void checkpoint(int64_t step, const std::function<void(const std::string&)>& save) = 0;
  // save(path) writes the best checkpoint (train.keep_best), on the rank that writes.
  virtual void save_best(int64_t step, const std::function<void(const std::string&)>& save) = 0;
  // The run's last checkpoint: stage(path) writes it without committing it, on the rank that
  // writes; write_summary commits it together with summary.json (io::commit_together: two journal
  // commits, not four), commit_checkpoint alone (a run that stops without a summary).
  using StageCheckpoint = std::function<std::unique_ptr<io::AtomicFileWriter>(const std::string&)>;
  virtual void stage_checkpoint(int64_t step, const StageCheckpoint& stage) = 0;
  virtual void commit_checkpoint() = 0;
  virtual void write_summary(const nlohmann::json& summary) = 0;
};

// logger: the caller's, or nullptr for none.
std::unique_ptr<RunOutput> make_run_owner(TrainLogger* logger);
std::unique_ptr<RunOutput> make_run_follower();

}  // namespace normlab::train
