#pragma once
// `normlab compare`'s engine: trains the grid's runs as child processes (`normlab train ...
// --threads 1`), --jobs at a time, so one crashed or diverged run cannot take the others down and
// each run directory is an ordinary run that `normlab eval` can open; then draws the report.
// Rerunning skips finished runs and resumes interrupted ones, but only runs whose resolved config is
// the one the grid asks for (reuse.cpp). A learning-rate search trains in passes: each pass trains
// what the finished runs determine, then the plan is read again and the next rounds' runs join
// (search.hpp). Each run has one owner (a lock under DIR/.locks), so shards may share one --out.
#include <string>
#include <vector>

#include "normlab/io/stop.hpp"

namespace normlab::study {

struct CompareOptions {
  std::string config, out;
  int jobs = 0;  // runs at once (0: one per core)
  bool report_only = false;
  bool retrain_changed = false;
  std::string shard;  // "I/K": train the runs whose index is I modulo K, draw no report
};

// Where a compare's progress goes: the library never prints.
class CompareLogger {
 public:
  virtual ~CompareLogger() = default;
  virtual void note(const std::string& line) = 0;  // one line of news
  // The progress line; redrawn in place when redraws() (a terminal), else one line each time it changes.
  virtual void progress(const std::string& line, bool final_line) = 0;
  virtual bool redraws() const = 0;  // a terminal: progress every second, else every 30 s
};

struct CompareResult {
  bool report_drawn = false;
  std::vector<std::string> answer;  // the report's Answer
  std::string report_path;          // DIR/report.html
  bool report_stopped = false;      // a stop signal arrived while the report was drawn: none written
  int stop_signal = 0;              // the runs were stopped by this signal (checkpointed)
  int failed = 0;                   // runs that exited with an error
  std::string bad_input;            // "run NAME rejected its input; see LOG": launching stopped there
};

// Trains what the grid still needs, then draws the report (a shard draws none). InputError for bad
// options, a config error, or runs trained with another config (unless retrain_changed). `stop` is
// polled; on a signal every running run gets one SIGTERM, writes a checkpoint and exits.
CompareResult run_compare(const CompareOptions& options, CompareLogger& logger, io::StopFlag stop);

}  // namespace normlab::study
