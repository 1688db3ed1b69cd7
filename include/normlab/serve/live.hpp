#pragma once
// What `normlab serve` shows: the report `normlab report DIR` draws, computed again whenever a run
// writes, with a table of every run's state. Reads DIR, never writes it, never takes a lock.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace normlab::serve {

// running: its trainer holds the run's lock; finished / diverged: summary.json says so; stopped:
// started, not finished, nobody training it; queued: planned by compare (DIR/configs/NAME.json),
// not started yet; unreadable: the run directory or one of its files cannot be read (permissions);
// error: its files hold something the report refuses (a garbage line, a field of the wrong type).
enum class RunState { queued, running, finished, diverged, stopped, unreadable, error };
const char* state_name(RunState state);

// Why `path` (a file or a directory) cannot be read: "<path>: cannot read: <reason>", or "" when it
// can or does not exist. A directory must also be searchable.
std::string cannot_read(const std::string& path);

struct RunStatus {
  std::string name;
  RunState state = RunState::queued;
  int64_t step = 0, total_steps = 0;  // last step record; train.steps (0: unknown)
  double eta_s = NAN;                 // remaining steps at the rate observed so far (NaN: unknown)
  double last_loss = NAN;             // the last step record's training loss
  std::string problem;                // why the run is unreadable / an error ("" when it is neither)
};

// The live page of one directory. Thread-safe: the HTTP server calls it from its worker threads.
class LiveReport {
 public:
  // DIR: a run directory, a compare output directory (runs/, configs/) or a folder of run
  // directories. Anything else (missing, a file, none of these): InputError naming it.
  explicit LiveReport(std::string dir);

  struct Page {
    std::string html;  // report.html's page with the run table and the update script
    std::string etag;  // changes whenever anything the page shows changes
    std::string runs_csv, curves_csv;
  };
  // The current page; drawn again only when a run's files or lock changed since the last drawing,
  // and not sooner than 5 drawing times after it.
  Page page();
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::mutex mutex_;
  std::string fingerprint_;
  Page cached_;
  std::chrono::steady_clock::time_point drawn_at_;
  std::chrono::steady_clock::duration drawing_time_{};
  // Per run: the first (step, metrics.jsonl mtime) seen, for the rate behind the ETA.
  std::map<std::string, std::pair<int64_t, double>> first_seen_;
};

}  // namespace normlab::serve
