#pragma once
// What the compare scheduler's files share (scheduler.cpp: options, locks, the queue and the
// passes; scheduler_children.cpp: the runs as child processes; compare_timing.cpp: where the time
// went). Not a public interface: run_compare (scheduler.hpp) is the only caller.
#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "normlab/io/stop.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/scheduler.hpp"
#include "normlab/train/session.hpp"

namespace normlab::study::scheduler_parts {

namespace fs = std::filesystem;

// A run is counted by the exit code of its `normlab train` (train/session.hpp: 0 ok, 2 bad input,
// 3 diverged, 130 / 143 stopped with a checkpoint).
using train::kExitBadInput;
using train::kExitDiverged;
using train::kExitInterrupted;
using train::kExitOk;
using train::kExitTerminated;

// The running normlab binary, which compare launches for each run.
std::string self_exe();

// Starts each run's process (scheduler_launcher.cpp): with an entry, from a launcher process forked
// now, while compare is small and has one thread (no exec, no loading); without one, or when the
// launcher cannot be had, by exec'ing `exe`. Either way the run is a child of this process, in its
// own process group, sent SIGTERM when compare dies, its stdout and stderr appended to its log.
// Lives until every run it started has been waited for.
class RunLauncher {
 public:
  RunLauncher(std::string exe, TrainEntry entry);
  RunLauncher(const RunLauncher&) = delete;
  RunLauncher& operator=(const RunLauncher&) = delete;
  ~RunLauncher();
  // `normlab ARGS...`; its pid. Throws InputError when no process can be made.
  pid_t launch(const std::vector<std::string>& args, const std::string& log_path);
  bool forks() const { return socket_ >= 0; }  // runs come from the launcher (no exec)

 private:
  pid_t exec_run(const std::vector<std::string>& args, const std::string& log_path) const;
  std::string exe_;
  TrainEntry entry_;
  pid_t launcher_pid_ = -1;
  int socket_ = -1;  // compare's end of the launcher's socket pair
};

// One child process of a compare, once it has exited: how and what it cost.
struct ChildRecord {
  std::string name;                  // the run's (an index into plan.runs changes as a search's rounds grow)
  int code = 0;                      // exit code, or 128 + signal
  double wall_s = 0.0, cpu_s = 0.0;  // fork to exit; user + system CPU of the process (wait4)
};

// The queued runs as child processes, `jobs` at a time, watched until every one has exited and
// none is left to launch (a signal or a run's bad input stops the launching); progress on stderr.
// Refill: asked for more runs whenever the queue is empty, a slot is free and a run has exited
// since it was last asked (a search's next rounds, read while the other slots still train); the
// indices it returns are into the plan as it is then (the watcher holds the plan by reference).
// A refill that throws stops the launching; the runs training finish, then run() rethrows its error.
class RunWatcher {
 public:
  RunWatcher(const ComparePlan& plan, const fs::path& out, int jobs, int already_done, CompareLogger& logger,
             io::StopFlag stop)
      : plan_(plan), out_(out), jobs_(jobs), already_done_(already_done), logger_(logger), stop_(stop) {}

  using Refill = std::function<std::deque<size_t>()>;
  void run(std::deque<size_t> queue, RunLauncher& launcher, const Refill& refill = {});
  // The runs launched and not yet exited, by name (a refill must not queue them again).
  std::set<std::string> running_names() const;
  // True when the last refill came after the last run exited and added nothing: the plan read by
  // it is final.
  bool refilled_empty() const { return refilled_empty_; }
  void print_progress(bool final_line);
  int failed() const { return failed_; }
  const std::vector<ChildRecord>& children() const { return children_; }
  const std::vector<std::string>& failures() const { return failures_; }
  double busy_wall_s() const { return busy_wall_s_; }  // from the first launch to the last exit
  // The slots' time while the refill read the plan: free slots x its wall time (the compare's own).
  double refill_slot_s() const { return refill_slot_s_; }
  // Why launching stopped: "run NAME rejected its input; see LOG" when a run exited 2, or "run
  // NAME: DIR: the run directory is in use by another normlab process (pid N)..." for a run that
  // another process holds.
  const std::string& bad_input() const { return bad_input_; }

 private:
  bool stopped() const { return io::stop_signal(stop_) != 0; }
  // Until a run exits, a signal arrives or 100 ms pass (scheduler_children.cpp).
  void wait_for_a_run();
  void launch_run(size_t i, RunLauncher& launcher);
  // Each run finishes its step, writes a checkpoint and exits 130/143; rerunning resumes it.
  void stop_running();
  // A run has exited with `status` (wait4's, with its CPU time in `usage`): counted by its exit code.
  void reap(pid_t pid, int status, const rusage& usage);

  const ComparePlan& plan_;
  const fs::path& out_;
  const int jobs_;
  const int already_done_;
  CompareLogger& logger_;
  const io::StopFlag stop_;
  const bool tty_ = logger_.redraws();
  struct Running {
    std::string name;                               // the run's
    std::chrono::steady_clock::time_point started;  // before the fork
    int pidfd = -1;                                 // readable when the run has exited; -1 without pidfd_open
  };
  std::map<pid_t, Running> running_;
  std::vector<ChildRecord> children_;
  std::vector<std::string> failures_;
  double busy_wall_s_ = 0.0;
  int done_ = 0, diverged_ = 0, failed_ = 0, interrupted_ = 0;
  std::string bad_input_;
  bool forwarded_ = false;  // the stop signal has been passed on to the running runs
  bool refilled_empty_ = false;
  double refill_slot_s_ = 0.0;
  double busy_seconds_ = 0;
  size_t to_run_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::string last_line_;
};

// What the passes of one compare added up to (scheduler.cpp's train_passes).
struct PassTotals {
  int failed = 0;
  std::string bad_input;
  std::set<std::string> failed_runs;  // crashed or failed: not launched again by a later pass
  std::vector<std::string> failures;
  std::vector<ChildRecord> children;
  double busy_slot_s = 0.0;  // jobs x the passes' wall time
  double refill_slot_s = 0.0;  // of it, slots free while a refill read the plan
};

// This process's own CPU time so far (user + system).
double self_cpu_seconds();
// The runs' records (summary.json "timing") and what the compare saw of their processes, summed
// into timing (compare_timing.cpp).
void add_runs(CompareTiming& timing, const fs::path& out, const PassTotals& totals);

}  // namespace normlab::study::scheduler_parts
