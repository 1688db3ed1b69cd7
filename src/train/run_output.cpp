#include "run_output.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/train/run_dir.hpp"

namespace normlab::train {

namespace {

namespace fs = std::filesystem;

std::string existing_checkpoint(const RunPaths& paths, const std::string& dir) {
  if (!fs::is_regular_file(paths.checkpoint))
    throw InputError(fmt::format("{}: no checkpoint.safetensors to resume from", dir));
  return paths.checkpoint;
}

// data.json: the data files' fingerprints (docs/run-directory.md); one writer (the lock), so a
// temporary left by a killed session is stale.
void write_data_record(const RunPaths& paths, const DataRecord& record) {
  const std::string path = paths.dir + "/data.json";
  io::remove_stale_temp_files(path);
  io::write_file_atomic(path, data_record_text(record));
}

class Owner final : public RunOutput {
 public:
  explicit Owner(TrainLogger* logger) : logger_(logger != nullptr ? *logger : silent_) {}
  TrainLogger& logger() override { return logger_; }

  void open_new(const std::string& dir, const RunConfig& config, const std::string& vocab_json,
                const DataRecord& data) override {
    RunDirectory run_dir(dir, /*create=*/true);
    // Written with config.json (one directory sync for the three): vocab.json, the ids of every
    // token and label (docs/run-directory.md), what eval, predict and PyTorch read; data.json, the
    // data files' fingerprints.
    const std::string data_text = data_record_text(data);
    run_dir.begin_new(config, {{run_dir.paths().dir + "/vocab.json", vocab_json},
                               {run_dir.paths().dir + "/data.json", data_text}});
    run_dir_ = std::move(run_dir);
  }
  std::string open_existing(const std::string& dir) override {
    RunDirectory run_dir(dir, /*create=*/false);
    io::remove_stale_temp_files(run_dir.paths().dir + "/vocab.json");  // see open_new
    const std::string checkpoint = existing_checkpoint(run_dir.paths(), dir);
    run_dir_ = std::move(run_dir);
    return checkpoint;
  }
  void resumed(const RunConfig& config, int64_t step, const DataFingerprint& files,
               const std::vector<DataChange>& accepted) override {
    // Read (and checked) before anything is written: a malformed data.json refuses the resume.
    DataRecord record = read_data_record(run_dir_->paths().dir).value_or(DataRecord{});
    record.files = files;
    record_accepted_changes(record, accepted, step);
    run_dir_->begin_resume(config, step);
    write_data_record(run_dir_->paths(), record);
  }
  bool is_open() const override { return run_dir_.has_value(); }
  bool evaluates() const override { return true; }
  void append_metrics(const nlohmann::json& record) override { run_dir_->append_metrics(record); }
  void append_step(const StepRecord& record) override { run_dir_->append_metrics_line(step_record_line(record)); }
  void checkpoint(int64_t step, const std::function<void(const std::string&)>& save) override {
    save(run_dir_->paths().checkpoint);
    logger_.checkpoint(step, run_dir_->paths().checkpoint);
  }
  void save_best(int64_t, const std::function<void(const std::string&)>& save) override {
    save(run_dir_->paths().best);
  }
  void stage_checkpoint(int64_t step, const StageCheckpoint& stage) override {
    commit_checkpoint();
    staged_ = stage(run_dir_->paths().checkpoint);
    staged_step_ = step;
  }
  void commit_checkpoint() override {
    if (!staged_) return;
    std::unique_ptr<io::AtomicFileWriter> staged = std::move(staged_);
    staged->commit();
    logger_.checkpoint(staged_step_, run_dir_->paths().checkpoint);
  }
  void write_summary(const nlohmann::json& summary) override {
    std::unique_ptr<io::AtomicFileWriter> staged = std::move(staged_);
    run_dir_->write_summary(summary, staged.get());
    if (staged) logger_.checkpoint(staged_step_, run_dir_->paths().checkpoint);
  }
  // A staged checkpoint is never dropped: an error between staging and the summary still leaves it.
  ~Owner() override {
    try {
      if (staged_) staged_->commit();
    } catch (const std::exception&) {  // the error that got here is the one to report
    }
  }

 private:
  TrainLogger silent_;  // declared before logger_, which may refer to it
  TrainLogger& logger_;
  std::optional<RunDirectory> run_dir_;
  std::unique_ptr<io::AtomicFileWriter> staged_;  // the last checkpoint, written, not yet committed
  int64_t staged_step_ = 0;
};

class Follower final : public RunOutput {
 public:
  TrainLogger& logger() override { return silent_; }
  void open_new(const std::string&, const RunConfig&, const std::string&, const DataRecord&) override {}
  std::string open_existing(const std::string& dir) override { return existing_checkpoint(RunPaths(dir), dir); }
  void resumed(const RunConfig&, int64_t, const DataFingerprint&, const std::vector<DataChange>&) override {}
  bool is_open() const override { return true; }
  bool evaluates() const override { return false; }
  void append_metrics(const nlohmann::json&) override {}
  void append_step(const StepRecord&) override {}
  void checkpoint(int64_t, const std::function<void(const std::string&)>&) override {}
  void save_best(int64_t, const std::function<void(const std::string&)>&) override {}
  void stage_checkpoint(int64_t, const StageCheckpoint&) override {}
  void commit_checkpoint() override {}
  void write_summary(const nlohmann::json&) override {}

 private:
  TrainLogger silent_;
};

}  // namespace

std::unique_ptr<RunOutput> make_run_owner(TrainLogger* logger) { return std::make_unique<Owner>(logger); }
std::unique_ptr<RunOutput> make_run_follower() { return std::make_unique<Follower>(); }

}  // namespace normlab::train
