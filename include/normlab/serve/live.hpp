#pragma once
// What `normlab serve` shows: the report `normlab report DIR` draws, computed again whenever a run
// writes, with a table of every run's state. Reads DIR, never writes it, never takes a lock.
// src/serve/live_parts.hpp lists the files that implement it, one job each.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "normlab/serve/series.hpp"
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
  std::string variant, path;  // the series it belongs to; its directory relative to DIR
  double lr = NAN;
  int64_t layers = 0, seed = -1;
  int warmup = -1;                                         // 1 on, 0 off, -1 unknown
  std::vector<std::pair<std::string, std::string>> extra;  // other grid axes: key, value
  double best_accuracy = NAN, best_loss = NAN;             // best held-out evaluation on trained lengths
  double wall_time_s = NAN;                                // summary.json's, when finished
  // The per-layer diagnostics at the first and the last diagnostics record (step 0: none logged).
  LayerDiagnostics first_diagnostics, last_diagnostics;
  std::string version;  // changes whenever its metrics.jsonl does
};

// The live page of one directory. Thread-safe: the HTTP server calls it from its worker threads.
class LiveReport {
 public:
  // DIR: a run directory, a compare output directory (runs/, configs/) or a folder of run
  // directories; or a path that does not exist yet (the page waits for it). Anything else (a file,
  // an unreadable directory, none of these): InputError naming it.
  // `report_bytes`: how much of all runs' metrics.jsonl the report reads whole per drawing (below).
  explicit LiveReport(std::string dir, uint64_t report_bytes = kReportBytes);
  ~LiveReport();
  LiveReport(const LiveReport&) = delete;
  LiveReport& operator=(const LiveReport&) = delete;

  struct Page {
    std::string html;         // the report's text, run table, charts panel and the page's script
    std::string etag;         // changes whenever anything the page shows changes
    std::string status_json;  // the run table, progress and metric names (what the script polls)
    std::string runs_csv, report_md;
  };
  // The current page; drawn again only when a run's files or lock changed since the last drawing,
  // and not sooner than 5 drawing times after it. One caller draws; every other caller meanwhile
  // gets the last drawing at once (before the first drawing: a page that says it is reading).
  Page page();
  // The last drawing at once, a new drawing asked of a background thread when the runs changed
  // (what the page's polling gets: a poll never waits for a drawing). Draws here only when
  // nothing has been drawn yet.
  Page latest();
  // curves.csv of the last drawing, a piece at a time (every point: written on request, never kept).
  class CurvesWriter {
   public:
    explicit CurvesWriter(std::shared_ptr<const std::vector<study::RunResult>> results)
        : results_(std::move(results)) {}
    // The next rows, about `bytes` of them; "" at the end.
    std::string next(size_t bytes);

   private:
    std::shared_ptr<const std::vector<study::RunResult>> results_;
    size_t run_ = 0, step_ = 0;
    bool header_ = true, evals_ = false;
  };
  CurvesWriter curves_writer();
  std::string curves_csv();  // the whole of it (tests; the server streams curves_writer())
  // One run's series of one metric (series.hpp), as JSON; its ETag changes with the run's
  // metrics.jsonl. Empty `json` when the run is not one of the page's.
  struct SeriesAnswer {
    std::string etag, json;
  };
  SeriesAnswer series(const std::string& run, const std::string& metric);
  // True while DIR does not exist yet (serve waits for it).
  bool waiting();
  const std::string& dir() const { return dir_; }

  // The live report's bounds. The report reads a run's metrics whole (study::read_run); it reads
  // at most kReportBytes of metrics.jsonl over all runs per drawing, in run order: a run past that
  // is left out of the report (its row says so) while its row and charts still follow it,
  // incrementally. Metrics readers are kept for at most kReaderBytes of series.
  static constexpr uint64_t kReportBytes = 128ull << 20;
  static constexpr size_t kReaderBytes = 64u << 20;
  // Waits until every metrics reader has read its file to the end (tests).
  void wait_for_readers();

 private:
  // One run's metrics.jsonl read incrementally (series.hpp), shared by the requests that chart it
  // and the background reader that catches it up a slice at a time.
  struct Reader {
    std::mutex mutex;
    MetricsReader reader;
    bool behind = true;           // bytes left to read at the last look
    std::atomic<int> waiting{0};  // requests waiting for `mutex`: the background reader lets them in first
    std::chrono::steady_clock::time_point used;
    explicit Reader(const std::string& path) : reader(path) {}
  };
  std::shared_ptr<Reader> reader_of(const std::string& metrics_path);
  void catch_up_loop();
  // A run past the report's budget: its row from its reader and summary.json.
  RunStatus row_from_reader(const std::string& run_dir, bool running);
  // Each reader's progress, a line each: part of what tells page() to draw again.
  std::string readers_fingerprint();

  std::string dir_;
  uint64_t report_bytes_;
  std::mutex draw_mutex_;  // one drawing at a time; held only by the caller that draws
  std::mutex mutex_;       // the state below; never held while reading a file
  std::string fingerprint_;
  Page cached_;
  std::chrono::steady_clock::time_point drawn_at_;
  std::chrono::steady_clock::duration drawing_time_{};
  // Per run: the first (step, metrics.jsonl mtime) seen, for the rate behind the ETA.
  std::map<std::string, std::pair<int64_t, double>> first_seen_;
  std::map<std::string, std::string> run_dirs_;                   // run name -> its directory, of the last drawing
  std::shared_ptr<const std::vector<study::RunResult>> results_;  // the last drawing's, for curves.csv
  std::map<std::string, std::string> series_cache_;               // etag -> json, a few recent answers
  std::map<std::string, std::shared_ptr<Reader>> readers_;        // by metrics.jsonl path
  std::map<std::string, std::pair<std::string, std::string>> line_checks_;  // path -> (stamp, problem)
  std::condition_variable readers_changed_;
  bool stopping_ = false;
  bool redraw_wanted_ = false;
  std::condition_variable redraw_;
  std::thread catch_up_, drawer_;
};

}  // namespace normlab::serve
