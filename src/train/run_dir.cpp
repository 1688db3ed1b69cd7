#include "normlab/train/run_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/io/paths.hpp"
#include "normlab/train/records.hpp"

namespace normlab::train {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxMetricsBytes = size_t{4} << 30;

}  // namespace

RunPaths::RunPaths(const std::string& run_dir)
    : dir(run_dir), config((fs::path(run_dir) / "config.json").string()),
      metrics((fs::path(run_dir) / "metrics.jsonl").string()),
      checkpoint((fs::path(run_dir) / "checkpoint.safetensors").string()),
      best((fs::path(run_dir) / "best.safetensors").string()), summary((fs::path(run_dir) / "summary.json").string()) {}

nlohmann::ordered_json ordered_config(const RunConfig& config) {
  const json resolved = to_json(config);
  nlohmann::ordered_json out;
  for (const std::string& path : config_keys()) {
    const size_t dot = path.find('.');
    const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
    out[section][key] = resolved.at(section).at(key);
  }
  return out;
}

RunDirectory::RunDirectory(const std::string& dir, bool create) : paths_(dir) {
  if (create) io::make_directories(dir, "run directory");
  if (!fs::is_directory(dir)) throw InputError(fmt::format("{}: no such run directory", dir));
  lock_ = io::DirLock::acquire(dir, "run directory");
  for (const std::string& file : {paths_.config, paths_.metrics, paths_.checkpoint, paths_.summary}) {
    io::refuse_symlink(file);
  }
}

RunDirectory::RunDirectory(RunDirectory&& other) noexcept
    : paths_(std::move(other.paths_)), lock_(std::move(other.lock_)),
      metrics_fd_(std::exchange(other.metrics_fd_, -1)) {}

RunDirectory& RunDirectory::operator=(RunDirectory&& other) noexcept {
  if (this != &other) {
    if (metrics_fd_ >= 0) ::close(metrics_fd_);
    paths_ = std::move(other.paths_);
    lock_ = std::move(other.lock_);
    metrics_fd_ = std::exchange(other.metrics_fd_, -1);
  }
  return *this;
}

RunDirectory::~RunDirectory() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
}

void RunDirectory::open_metrics(bool truncate) {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | (truncate ? O_TRUNC : 0);
  metrics_fd_ = ::open(paths_.metrics.c_str(), flags, 0644);
  if (metrics_fd_ < 0) {
    throw InputError(fmt::format("{}: cannot open for writing: {}", paths_.metrics, std::strerror(errno)));
  }
}

void RunDirectory::begin_new(const RunConfig& config, const std::vector<io::NamedText>& start_files) {
  if (fs::exists(paths_.checkpoint)) {
    throw InputError(
        fmt::format("{}: already holds a run (checkpoint.safetensors); resume it with --resume or "
                    "choose another output directory",
                    paths_.dir));
  }
  // A session killed while writing its first files or checkpoint left temporary files and no
  // checkpoint: the run starts afresh, and the temporaries are stale (one writer: the lock).
  for (const std::string& file : {paths_.checkpoint, paths_.config, paths_.summary}) io::remove_stale_temp_files(file);
  for (const io::NamedText& file : start_files) io::remove_stale_temp_files(file.path);
  // The start files with one directory sync for all: an fsync waits 1-15 ms on a busy disk, and a
  // demo run is under a second.
  const std::string config_text = ordered_config(config).dump(2) + "\n";
  std::vector<io::NamedText> files = {{paths_.config, config_text}};
  files.insert(files.end(), start_files.begin(), start_files.end());
  io::write_files_atomic(files);
  std::error_code ec;
  fs::remove(paths_.summary, ec);
  open_metrics(true);
}

void RunDirectory::begin_resume(const RunConfig& config, int64_t step) {
  const bool has_metrics = fs::exists(paths_.metrics);
  const int64_t keep =
      has_metrics ? metrics_prefix_for_resume(paths_.metrics, step) : 0;  // may refuse: nothing changed yet
  io::write_file_atomic(paths_.config, ordered_config(config).dump(2) + "\n");
  std::error_code ec;
  fs::remove(paths_.summary, ec);
  // One run directory has one writer (the lock): temporaries a killed session left are stale.
  for (const std::string& file : {paths_.checkpoint, paths_.config, paths_.summary}) io::remove_stale_temp_files(file);
  open_metrics(false);
  if (has_metrics && ::ftruncate(metrics_fd_, keep) != 0) {
    throw InputError(fmt::format("{}: cannot truncate: {}", paths_.metrics, std::strerror(errno)));
  }
}

void RunDirectory::append_metrics(const json& record) { append_metrics_line(record_line(record)); }

void RunDirectory::append_metrics_line(const std::string& record) {
  const std::string line = record + "\n";
  if (const int err = io::write_all(metrics_fd_, line.data(), line.size()); err != 0) {
    throw InputError(fmt::format("{}: write failed: {}", paths_.metrics, std::strerror(err)));
  }
}

void RunDirectory::write_summary(const json& summary, io::AtomicFileWriter* checkpoint) {
  io::AtomicFileWriter file(paths_.summary);
  file.write(nlohmann::ordered_json(summary).dump(2) + "\n");
  // The checkpoint first: its rename comes before the summary's, as when each was committed alone.
  if (checkpoint != nullptr) io::commit_together({checkpoint, &file});
  else file.commit();
}

int64_t metrics_prefix_for_resume(const std::string& path, int64_t step) {
  io::refuse_symlink(path);
  const std::string text = io::read_file(path, kMaxMetricsBytes);
  size_t keep = 0, start = 0;
  bool past_checkpoint = false;
  int64_t line_number = 0;
  while (start < text.size()) {
    ++line_number;
    const size_t newline = text.find('\n', start);
    if (newline == std::string::npos) break;  // a torn final line: the kill case
    const std::string_view line = std::string_view(text).substr(start, newline - start);
    json record = io::json_nesting_depth(line) > io::kMaxJsonDepth
                      ? json(json::value_t::discarded)
                      : json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object() || !record.contains("step") ||
        !record.at("step").is_number_integer()) {
      throw InputError(
          fmt::format("{}:{}: not a metrics record (only a torn last line is dropped on resume); the "
                      "run directory was not changed: repair or remove that line",
                      path, line_number));
    }
    if (record.at("step").get<int64_t>() > step) past_checkpoint = true;
    start = newline + 1;
    if (!past_checkpoint) keep = start;
  }
  return static_cast<int64_t>(keep);
}

int64_t truncate_metrics(const std::string& path, int64_t step) {
  const int64_t keep = metrics_prefix_for_resume(path, step);
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno)));
  const int result = ::ftruncate(fd, keep);
  const int err = errno;
  ::close(fd);
  if (result != 0) throw InputError(fmt::format("{}: cannot truncate: {}", path, std::strerror(err)));
  return keep;
}

}  // namespace normlab::train
