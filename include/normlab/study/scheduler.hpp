#pragma once
// `normlab compare`'s engine: trains the grid's runs as child processes (`normlab train ...
// --threads 1`), --jobs at a time, so one crashed or diverged run cannot take the others down and
// each run directory is an ordinary run that `normlab eval` can open; then draws the report.
// Rerunning skips finished runs and resumes interrupted ones, but only runs whose resolved config is
// the one the grid asks for (reuse.cpp). A learning-rate search trains in passes: each pass trains
// what the finished runs determine, then the plan is read again and the next rounds' runs join
// (search.hpp). Each run has one owner (a lock under DIR/.locks), so shards may share one --out.
// A run that crashes (killed by a signal) or fails is recorded in its log and counted, and the
// compare goes on with the others (a search's later passes too); a rerun retries it.
#include <functional>
#include <string>
#include <vector>

#include "normlab/io/stop.hpp"
#include "normlab/train/run_clock.hpp"

namespace normlab::study {

// Runs `normlab ARGS...` (ARGS without the program name) in this process, as the command line's
// main would, and returns its exit code; it catches what it throws.
using TrainEntry = std::function<int(const std::vector<std::string>& args)>;

struct CompareOptions {
  std::string config, out;
  int jobs = 0;  // runs at once (0: one per core)
  bool report_only = false;
  bool retrain_changed = false;
  std::string shard;  // "I/K": train the runs whose index is I modulo K, draw no report
  // The command line's entry: each run is then forked from a launcher process and calls it, instead
  // of exec'ing the normlab binary (the loading and initialising saved). Empty: exec.
  TrainEntry train_entry;
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

// Where a compare's time went (docs/compare.md, "Where the time goes"), in run-slot seconds: --jobs
// slots for the compare's whole wall time. The runs' own records (summary.json "timing") summed,
// and what only the compare sees: each run's process from fork to exit, and its CPU time (wait4).
struct CompareTiming {
  double wall_s = 0.0;  // the compare, start to end
  int jobs = 1;
  int finished_runs = 0;   // runs this compare trained to their summary (finished or diverged)
  train::PartTimes parts;  // their records (a resumed run: its last session), summed
  // Their processes beyond their records: the launch (fork), summary.json with the last checkpoint's
  // commit, exit (child's wall / CPU - the record's).
  double process_wall_s = 0.0, process_cpu_s = 0.0;
  int other_runs = 0;  // runs that crashed, failed or were stopped: their whole process
  double other_wall_s = 0.0, other_cpu_s = 0.0;
  double idle_s = 0.0;         // run slots with no run while runs were trained (launching, reaping)
  double report_s = 0.0;       // drawing the report (wall; a slot each)
  double compare_cpu_s = 0.0;  // the compare process's own CPU time (planning, watching, report)

  double slot_seconds() const { return wall_s * double(jobs); }
  double cpu_seconds() const;       // every run's process and the compare's own
  double steps_wall_share() const;  // training steps / slot_seconds()
  double steps_cpu_share() const;   // training steps' CPU / cpu_seconds()
  // The parts as rows {name, wall s, CPU s}, largest wall first; the rows add up to slot_seconds()
  // (wall) and cpu_seconds() (CPU).
  struct Row {
    std::string name;
    double wall_s = 0.0, cpu_s = 0.0;
  };
  std::vector<Row> rows() const;
  // "compare: 91.0% of the run slots' wall time in training steps (93.1% of the CPU time); the rest:
  // evaluation 4.0%, ..."
  std::string summary_line() const;
};

struct CompareResult {
  bool report_drawn = false;
  std::vector<std::string> answer;  // the report's Answer
  std::string report_path;          // DIR/report.html
  bool report_stopped = false;      // a stop signal arrived while the report was drawn: none written
  int stop_signal = 0;              // the runs were stopped by this signal (checkpointed)
  int failed = 0;                   // runs that exited with an error
  std::string bad_input;            // "run NAME rejected its input; see LOG": launching stopped there
  // One line per run that crashed or failed: "NAME crashed (SIGABRT) after 0.41 s; see LOG".
  std::vector<std::string> failures;
  CompareTiming timing;
};

// Trains what the grid still needs, then draws the report (a shard draws none). InputError for bad
// options, a config error, or runs trained with another config (unless retrain_changed). `stop` is
// polled; on a signal every running run gets one SIGTERM, writes a checkpoint and exits.
CompareResult run_compare(const CompareOptions& options, CompareLogger& logger, io::StopFlag stop);

}  // namespace normlab::study
