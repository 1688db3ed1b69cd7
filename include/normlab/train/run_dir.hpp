#pragma once
// A run directory (docs/run-directory.md): config.json, metrics.jsonl, checkpoint.safetensors,
// summary.json, and the lock that makes this process its only writer.
//
// Guarantees, each with a test in tests/test_run_dir.cpp:
//   - one owner: RunDirectory holds io::DirLock for as long as it lives; a second process is refused
//     (InputError naming the directory and the holder's pid); the kernel drops the lock when the
//     holder dies, so a killed run stays resumable;
//   - nothing written through a symbolic link: a run file that is a link is refused;
//   - a resume drops only what it can prove is stale: a torn final line (no newline: the kill case)
//     and the records of steps after the checkpoint (they are redone). Any other malformed line is
//     an InputError "metrics.jsonl:LINE: ..." and nothing is changed.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "normlab/io/atomic_file.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/train/config.hpp"

namespace normlab::train {

// The files of a run directory.
struct RunPaths {
  explicit RunPaths(const std::string& dir);
  std::string dir;
  std::string config;      // config.json: the resolved config
  std::string metrics;     // metrics.jsonl: one record per step and per evaluation
  std::string checkpoint;  // checkpoint.safetensors: the last state (resume continues from it)
  std::string best;        // best.safetensors: the state at the best evaluation (train.keep_best)
  std::string summary;     // summary.json: written when the run ends
};

class RunDirectory {
 public:
  // Locks `dir` (creating it first if `create`); InputError if another process holds it, if it
  // cannot be created, or if one of its run files is a symbolic link.
  RunDirectory(const std::string& dir, bool create);
  RunDirectory(RunDirectory&&) noexcept;
  RunDirectory& operator=(RunDirectory&&) noexcept;
  ~RunDirectory();

  const RunPaths& paths() const { return paths_; }

  // A new run: InputError if a checkpoint is already there (resume it or choose another
  // directory). Writes config.json and `start_files` (other files of this directory: vocab.json,
  // data.json) atomically with one directory sync for all (io::write_files_atomic), removes
  // summary.json, starts an empty metrics.jsonl.
  void begin_new(const RunConfig& config, const std::vector<io::NamedText>& start_files = {});
  // A resumed run at checkpoint step `step`: checks metrics.jsonl first (nothing is changed if it
  // has a corrupt line), then writes config.json, removes summary.json and stale temporaries, cuts
  // metrics.jsonl back to `step` and opens it for appending.
  void begin_resume(const RunConfig& config, int64_t step);

  // One line of metrics.jsonl, written with one write(2) so a kill never leaves half a line
  // followed by another record.
  void append_metrics(const nlohmann::json& record);
  void append_metrics_line(const std::string& line);  // a line record_line made, without its newline
  // summary.json, committed together with `checkpoint` when one is given (io::commit_together).
  void write_summary(const nlohmann::json& summary, io::AtomicFileWriter* checkpoint = nullptr);

 private:
  RunPaths paths_;
  io::DirLock lock_;
  int metrics_fd_ = -1;
  void open_metrics(bool truncate);
};

// What a resume at checkpoint step `step` keeps of metrics.jsonl: the byte length of the prefix of
// complete records with "step" <= step. After it may come only records with a larger step and a
// torn final line; anything else is an InputError "<path>:<line>: ..." (the file is not changed).
int64_t metrics_prefix_for_resume(const std::string& path, int64_t step);
// metrics_prefix_for_resume, then cuts the file there (never through a symbolic link).
int64_t truncate_metrics(const std::string& path, int64_t step);

// config.json with sections and keys in documentation order (docs/config.md).
nlohmann::ordered_json ordered_config(const RunConfig& config);

}  // namespace normlab::train
