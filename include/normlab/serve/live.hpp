#pragma once
// What `normlab serve` shows: the report `normlab report DIR` draws, computed again whenever a run
// writes, with a table of every run's state. Reads DIR, never writes it, never takes a lock.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "normlab/study/report.hpp"

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
  // What the run table shows beside the state (from the plan; empty / NaN when unknown):
  std::string variant, path;          // the series it belongs to; its directory relative to DIR
  double lr = NAN;
  int64_t layers = 0, seed = -1;
  int warmup = -1;                    // 1 on, 0 off, -1 unknown
  std::vector<std::pair<std::string, std::string>> extra;  // other grid axes: key, value
  double best_accuracy = NAN, best_loss = NAN;  // best held-out evaluation on trained lengths
  double wall_time_s = NAN;           // summary.json's, when finished
  std::string version;                // changes whenever its metrics.jsonl does
};

// The live page of one directory. Thread-safe: the HTTP server calls it from its worker threads.
class LiveReport {
 public:
  // DIR: a run directory, a compare output directory (runs/, configs/) or a folder of run
  // directories; or a path that does not exist yet (the page waits for it). Anything else (a file,
  // an unreadable directory, none of these): InputError naming it.
  explicit LiveReport(std::string dir);

  struct Page {
    std::string html;         // the report's text, run table, charts panel and the page's script
    std::string etag;         // changes whenever anything the page shows changes
    std::string status_json;  // the run table, progress and metric names (what the script polls)
    std::string runs_csv, report_md;
  };
  // The current page; drawn again only when a run's files or lock changed since the last drawing,
  // and not sooner than 5 drawing times after it.
  Page page();
  // curves.csv of the last drawing (every point: computed on request, never kept).
  std::string curves_csv();
  // One run's series of one metric (series.hpp), as JSON; its ETag changes with the run's
  // metrics.jsonl. Empty `json` when the run is not one of the page's.
  struct SeriesAnswer {
    std::string etag, json;
  };
  SeriesAnswer series(const std::string& run, const std::string& metric);
  // True while DIR does not exist yet (serve waits for it).
  bool waiting();
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
  std::map<std::string, std::string> run_dirs_;  // run name -> its directory, of the last drawing
  std::shared_ptr<const std::vector<study::RunResult>> results_;  // the last drawing's, for curves.csv
  std::map<std::string, std::string> series_cache_;  // etag -> json, a few recent answers
};

}  // namespace normlab::serve
