// The metrics readers behind the live page's charts: one MetricsReader (series.hpp) per run's
// metrics.jsonl, read incrementally by the requests that chart it and caught up by a background
// thread a slice at a time, so that no request waits for a large file to be parsed. They also give
// the rows of runs too large for the report to read whole.
#include <fmt/format.h>

#include <algorithm>

#include "live_parts.hpp"
#include "normlab/serve/live.hpp"

namespace normlab::serve {

namespace fs = std::filesystem;

std::shared_ptr<LiveReport::Reader> LiveReport::reader_of(const std::string& metrics_path) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& slot = readers_[metrics_path];
  if (!slot) {
    slot = std::make_shared<Reader>(metrics_path);
    if (!catch_up_.joinable() && !stopping_) catch_up_ = std::thread([this] { catch_up_loop(); });
  }
  slot->used = std::chrono::steady_clock::now();
  auto reader = slot;
  lock.unlock();
  readers_changed_.notify_all();
  return reader;
}

// The background reader: catches every reader up with its file, 256 KiB at a time (each slice
// holds only that run's reader, a few milliseconds), so a request for a run never waits for a
// large file to be parsed: it gets what has been read so far. Readers past kReaderBytes of series
// are dropped, least recently used first.
void LiveReport::catch_up_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    std::vector<std::shared_ptr<Reader>> behind;
    for (const auto& [path, r] : readers_) behind.push_back(r);
    lock.unlock();
    bool any = false;
    size_t bytes = 0;
    for (const auto& r : behind) {
      // std::mutex is not fair: without this, the next slice could take the lock again ahead of
      // a request that has been waiting for it.
      for (int i = 0; i < 100 && r->waiting.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const std::lock_guard<std::mutex> guard(r->mutex);
      if (r->behind) r->behind = r->reader.update(256 << 10), any = true;
      bytes += r->reader.memory_bytes();
    }
    lock.lock();
    if (bytes > kReaderBytes) {
      std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> by_use;
      for (const auto& [path, r] : readers_) by_use.emplace_back(r->used, path);
      std::sort(by_use.begin(), by_use.end());
      for (size_t i = 0; i < by_use.size() / 2; ++i) readers_.erase(by_use[i].second);
    }
    readers_changed_.notify_all();  // wait_for_readers()
    if (!any) readers_changed_.wait_for(lock, std::chrono::seconds(1));
  }
}

void LiveReport::wait_for_readers() {
  for (;;) {
    std::vector<std::shared_ptr<Reader>> all;
    {
      const std::lock_guard<std::mutex> guard(mutex_);
      for (const auto& [path, r] : readers_) all.push_back(r);
    }
    bool behind = false;
    for (const auto& r : all) {
      const std::lock_guard<std::mutex> guard(r->mutex);
      behind = behind || r->behind;
    }
    if (!behind) return;
    std::unique_lock<std::mutex> lock(mutex_);
    readers_changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

// A reader's progress changes a left-out run's row (its step, or the line that makes it an error).
std::string LiveReport::readers_fingerprint() {
  std::vector<std::pair<std::string, std::shared_ptr<Reader>>> readers;
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    for (const auto& [path, r] : readers_) readers.emplace_back(path, r);
  }
  std::string fingerprint;
  for (const auto& [path, r] : readers) {
    const std::lock_guard<std::mutex> guard(r->mutex);
    fingerprint += path + "@" + std::to_string(r->reader.offset()) + (r->reader.problem().empty() ? "\n" : "!\n");
  }
  return fingerprint;
}

RunStatus LiveReport::row_from_reader(const std::string& run_dir, bool running) {
  const auto reader = reader_of((fs::path(run_dir) / "metrics.jsonl").string());
  MetricsReader::Summary summary;
  {
    const std::lock_guard<std::mutex> guard(reader->mutex);
    if (reader->behind) reader->behind = reader->reader.update(256 << 10);  // what was appended lately, at most 256 KiB
    summary = reader->reader.summary();
  }
  RunStatus st = live_parts::status_of(summary, run_dir, running);
  // What the report would refuse, as far as read: an error run, as when the report reads it.
  const std::lock_guard<std::mutex> guard(reader->mutex);
  if (!reader->reader.problem().empty()) st.state = RunState::error, st.problem = reader->reader.problem();
  return st;
}

LiveReport::SeriesAnswer LiveReport::series(const std::string& run, const std::string& metric) {
  std::string path;
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    const auto it = run_dirs_.find(run);
    if (it == run_dirs_.end()) return {};
    path = (fs::path(it->second) / "metrics.jsonl").string();
  }
  // What was appended lately is read now (at most 256 KiB: a poll's worth); a larger backlog is the
  // background reader's, and this answer has what it read so far (its ETag changes as it reads).
  const auto reader = reader_of(path);
  SeriesAnswer answer;
  {
    ++reader->waiting;
    std::unique_lock<std::mutex> guard(reader->mutex);
    --reader->waiting;
    // A backlog is the background thread's; a reader new or caught up reads 256 KiB here.
    if (!reader->behind || reader->reader.offset() == 0) reader->behind = reader->reader.update(256 << 10);
    answer.etag =
        fmt::format("\"{:016x}\"", std::hash<std::string>{}(path + "|" + metric + "|" + live_parts::file_stamp(path) +
                                                            "|" + std::to_string(reader->reader.offset())));
    {
      const std::lock_guard<std::mutex> cache(mutex_);
      if (auto it = series_cache_.find(answer.etag); it != series_cache_.end()) return answer.json = it->second, answer;
    }
    answer.json = series_json(reader->reader.series(metric));
  }
  readers_changed_.notify_all();
  const std::lock_guard<std::mutex> guard(mutex_);
  if (series_cache_.size() >= 64) series_cache_.clear();  // a few recent answers: the runs the page shows
  series_cache_[answer.etag] = answer.json;
  return answer;
}

}  // namespace normlab::serve
