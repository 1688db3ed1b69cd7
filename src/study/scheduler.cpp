// The compare scheduler (scheduler.hpp): the grid's runs as child processes, their locks, the
// queue, progress with an ETA, and the passes of a learning-rate search.
#include "normlab/study/scheduler.hpp"
#include "normlab/study/compare_dir.hpp"
#include "normlab/study/progress.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/io/paths.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/train/session.hpp"

namespace normlab::study {

namespace {

namespace fs = std::filesystem;

// A run is counted by the exit code of its `normlab train` (train/session.hpp: 0 ok, 2 bad input,
// 3 diverged, 130 / 143 stopped with a checkpoint).
using train::kExitBadInput;
using train::kExitDiverged;
using train::kExitInterrupted;
using train::kExitOk;
using train::kExitTerminated;

// "I/K" -> {I, K} with 0 <= I < K.
std::pair<size_t, size_t> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  size_t index = 0, count = 0;
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    size_t used = 0;
    index = std::stoul(text.substr(0, slash), &used);
    if (used != slash) throw std::invalid_argument("trailing");
    count = std::stoul(text.substr(slash + 1), &used);
    if (used != text.size() - slash - 1) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw InputError(
        fmt::format("--shard {}: expected I/K, e.g. 0/4 (this process trains the runs whose index is "
                    "I modulo K)",
                    text));
  }
  if (count == 0 || index >= count)
    throw InputError(fmt::format("--shard {}: I must be in [0, K) and K at least 1", text));
  return {index, count};
}

std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw InputError("compare: cannot locate the normlab binary (/proc/self/exe)");
  return p.string();
}

pid_t launch(const std::string& exe, const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t compare = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw InputError(fmt::format("compare: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    // Its own process group: a Ctrl-C at the terminal reaches compare only, which then sends each
    // run one SIGTERM (a run that got both would take the second as "stop at once").
    setpgid(0, 0);
    // The run ends with compare, even when compare is killed (kill -9): the kernel sends it SIGTERM
    // when compare dies, so it finishes its step, writes a checkpoint and exits, and a rerun resumes
    // it. Kept across exec. If compare died before this line the signal never comes: leave now.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != compare) _exit(128 + SIGTERM);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK,
                          0644);  // a FIFO or link fails
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

std::string format_eta(double seconds) { return format_duration(seconds); }

// --shard I/K as {I, K}: this process trains the runs whose index is I modulo K.
using Shard = std::optional<std::pair<size_t, size_t>>;

// The flags checked against each other; the shard parsed.
Shard check_options(const CompareOptions& options) {
  if (options.report_only && options.retrain_changed)
    throw InputError("--report-only and --retrain-changed: choose one (--report-only never trains)");
  if (options.report_only && !options.shard.empty())
    throw InputError(
        "--report-only and --shard: a shard trains part of the grid; draw the report with --report-only alone");
  Shard shard;
  if (!options.shard.empty()) shard = parse_shard(options.shard);
  return shard;
}

// The started runs whose config differs from the grid's, among the runs this process trains.
// Never report old results under new settings: a started run is reused only when its resolved
// config is the one asked for now.
std::vector<ChangedRun> changed_runs_of(const ComparePlan& plan, const CompareOptions& options, const Shard& shard) {
  std::vector<ChangedRun> changed = changed_runs(plan, options.out);
  if (shard) {
    std::vector<ChangedRun> mine;
    for (const ChangedRun& c : changed)
      for (size_t i = 0; i < plan.runs.size(); ++i)
        if (plan.runs[i].name == c.name && in_shard(plan, i, shard->first, shard->second)) mine.push_back(c);
    changed = mine;
  }
  if (!changed.empty() && !options.retrain_changed) throw InputError(changed_runs_message(changed, options.out));
  return changed;
}

// Each run of the grid has one owner, so that shards can share one --out (on one machine or a
// shared file system) while two compares never decide about the same run: this process locks
// the runs it trains (its shard's), or all of them when it also draws the report; released by
// the kernel if this process dies. The run's own directory lock belongs to its `normlab train`.
// Called again after each search pass: only runs not yet in `locked` are locked.
void lock_runs(const ComparePlan& plan, const fs::path& out, const Shard& shard, std::vector<io::DirLock>& run_locks,
               std::set<std::string>& locked) {
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    if (shard && !in_shard(plan, i, shard->first, shard->second)) continue;
    if (!locked.insert(plan.runs[i].name).second) continue;
    run_locks.push_back(io::DirLock::acquire_file((out / ".locks" / (plan.runs[i].name + ".lock")).string(),
                                                  (out / "runs" / plan.runs[i].name).string(), "compare run"));
  }
}

// The changed runs removed (their directories and logs), to be trained from scratch.
void remove_changed(const fs::path& out, const std::vector<ChangedRun>& changed, CompareLogger& logger) {
  std::error_code ec;
  for (const ChangedRun& c : changed) {
    fs::remove_all(out / "runs" / c.name, ec);
    if (ec)
      throw InputError(
          fmt::format("{}: cannot remove the changed run: {}", (out / "runs" / c.name).string(), ec.message()));
    fs::remove(out / "logs" / (c.name + ".log"), ec);
  }
  if (!changed.empty())
    logger.note(fmt::format("compare: retraining {} run(s) whose config changed (first: {})", changed.size(),
                            changed.front().name));
}

// What each run this process trains needs: a finished run is counted as skipped, any other gets
// its config file and a place in the queue (by index).
std::deque<size_t> queue_runs(const ComparePlan& plan, const fs::path& out, const CompareOptions& options,
                              const Shard& shard, const std::set<std::string>& failed, int& already_done) {
  std::error_code ec;
  std::deque<size_t> queue;
  for (size_t i = 0; i < plan.runs.size() && !options.report_only; ++i) {
    if (shard && !in_shard(plan, i, shard->first, shard->second)) continue;
    const RunSpec& run = plan.runs[i];
    if (failed.count(run.name)) continue;  // crashed or failed in an earlier pass: retried by a rerun
    const fs::path dir = out / "runs" / run.name;
    if (fs::exists(dir / "summary.json")) {
      ++already_done;
      continue;
    }
    if (fs::exists(dir) && !fs::exists(dir / "checkpoint.safetensors")) fs::remove_all(dir, ec);  // nothing to resume
    io::write_file_atomic((out / "configs" / (run.name + ".json")).string(), run.config_file.dump(2) + "\n");
    queue.push_back(i);
  }
  return queue;
}

// One child process of a compare, once it has exited: how and what it cost.
struct ChildRecord {
  size_t index = 0;                  // in plan.runs
  int code = 0;                      // exit code, or 128 + signal
  double wall_s = 0.0, cpu_s = 0.0;  // fork to exit; user + system CPU of the process (wait4)
};

// The queued runs as child processes, `jobs` at a time, watched until every one has exited and
// none is left to launch (a signal or a run's bad input stops the launching); progress on stderr.
class RunWatcher {
 public:
  RunWatcher(const ComparePlan& plan, const fs::path& out, int jobs, int already_done, CompareLogger& logger,
             io::StopFlag stop)
      : plan_(plan), out_(out), jobs_(jobs), already_done_(already_done), logger_(logger), stop_(stop) {}

  void run(std::deque<size_t> queue, const std::string& exe) {
    to_run_ = queue.size();
    start_ = std::chrono::steady_clock::now();
    auto last_print = std::chrono::steady_clock::now();
    while ((!queue.empty() && !stopped() && bad_input_.empty()) || !running_.empty()) {
      while (running_.size() < size_t(jobs_) && !queue.empty() && !stopped() && bad_input_.empty()) {
        const size_t i = queue.front();
        queue.pop_front();
        launch_run(i, exe);
      }
      if (stopped() && !forwarded_) stop_running();
      int status = 0;
      rusage usage{};
      const pid_t pid = wait4(-1, &status, WNOHANG, &usage);
      if (pid > 0 && running_.count(pid)) {
        reap(pid, status, usage);
        print_progress(false);
        continue;
      }
      if (pid < 0 && errno == ECHILD) {
        for (const auto& entry : running_)
          if (entry.second.pidfd >= 0) ::close(entry.second.pidfd);
        running_.clear();
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - last_print > std::chrono::seconds(tty_ ? 1 : 30)) {
        print_progress(false);
        last_print = now;
      }
      wait_for_a_run();
    }
    busy_wall_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  void print_progress(bool final_line) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const int finished = done_ + diverged_ + failed_;
    const std::string eta = format_eta(study_eta_seconds(busy_seconds_, size_t(finished), to_run_, size_t(jobs_)));
    const std::string line = fmt::format(
        "compare: {}/{} runs done ({} diverged, {} failed, {} skipped as finished{}), {} running, "
        "elapsed {}, ETA {}",
        finished, to_run_, diverged_, failed_, already_done_,
        interrupted_ > 0 ? fmt::format(", {} stopped with a checkpoint", interrupted_) : "", running_.size(),
        format_eta(elapsed), eta);
    if (tty_ || line != last_line_) logger_.progress(line, final_line);
    last_line_ = line;
  }

  int failed() const { return failed_; }
  const std::vector<ChildRecord>& children() const { return children_; }
  const std::vector<std::string>& failures() const { return failures_; }
  double busy_wall_s() const { return busy_wall_s_; }  // from the first launch to the last exit
  // Why launching stopped: "run NAME rejected its input; see LOG" when a run exited 2, or "run
  // NAME: DIR: the run directory is in use by another normlab process (pid N)..." for a run that
  // another process holds.
  const std::string& bad_input() const { return bad_input_; }

 private:
  bool stopped() const { return io::stop_signal(stop_) != 0; }

  // Until a run exits, a signal arrives or 100 ms pass (the stop flag and the progress line are
  // looked at in between): each run's pidfd is polled, so the next run starts as soon as a slot
  // frees, not at the next tick of a sleep. Without pidfds (kernels before 5.3): 5 ms naps.
  void wait_for_a_run() {
    std::vector<pollfd> fds;
    for (const auto& entry : running_)
      if (entry.second.pidfd >= 0) fds.push_back({entry.second.pidfd, POLLIN, 0});
    if (!fds.empty() && fds.size() == running_.size()) {
      ::poll(fds.data(), fds.size(), 100);  // EINTR on a signal: the loop looks at the stop flag
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(running_.empty() ? 0 : 5));
    }
  }

  void launch_run(size_t i, const std::string& exe) {
    const RunSpec& run = plan_.runs[i];
    const fs::path dir = out_ / "runs" / run.name;
    // A run that another process still trains (the run of a compare killed a moment ago, writing
    // its checkpoint; a `normlab train` on the same directory) is named here with its pid, instead
    // of as a run that rejected its input. Launching stops, as for a bad input.
    if (fs::is_directory(dir)) {
      try {
        io::DirLock probe = io::DirLock::acquire(dir.string(), "run directory");
      } catch (const InputError& e) {
        bad_input_ = fmt::format("run {}: {}", run.name, e.what());
        return;
      }
    }
    std::vector<std::string> args{"train", "--config",   (out_ / "configs" / (run.name + ".json")).string(),
                                  "--out", dir.string(), "--threads",
                                  "1"};
    if (fs::exists(dir / "checkpoint.safetensors")) args.push_back("--resume");
    const auto started = std::chrono::steady_clock::now();
    const pid_t pid = launch(exe, args, (out_ / "logs" / (run.name + ".log")).string());
    running_[pid] = {i, started, int(::syscall(SYS_pidfd_open, pid, 0))};
  }

  // Each run finishes its step, writes a checkpoint and exits 130/143; rerunning resumes it.
  void stop_running() {
    for (const auto& entry : running_) kill(entry.first, SIGTERM);
    forwarded_ = true;
    if (!running_.empty())
      logger_.note(fmt::format("\ncompare: stopping: {} running run(s) write a checkpoint and exit", running_.size()));
  }

  // A run has exited with `status` (wait4's, with its CPU time in `usage`): counted by its exit code.
  // One that crashed or failed is said in its log and in failures(); the others go on.
  void reap(pid_t pid, int status, const rusage& usage) {
    const Running run = running_[pid];
    running_.erase(pid);
    if (run.pidfd >= 0) ::close(run.pidfd);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.started).count();
    busy_seconds_ += wall;
    const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    children_.push_back({run.index, code, wall, seconds(usage.ru_utime) + seconds(usage.ru_stime)});
    const std::string& name = plan_.runs[run.index].name;
    const std::string log = (out_ / "logs" / (name + ".log")).string();
    if (code == kExitOk) {
      ++done_;
    } else if (code == kExitDiverged) {
      ++diverged_;
    } else if ((code == kExitInterrupted || code == kExitTerminated) && stopped()) {
      ++interrupted_;  // stopped on our request, checkpointed: not a failure
    } else if (code == kExitBadInput) {
      ++failed_;
      if (bad_input_.empty()) bad_input_ = fmt::format("run {} rejected its input; see {}", name, log);
    } else {
      ++failed_;
      const std::string how = WIFSIGNALED(status) ? fmt::format("crashed (killed by {})", signal_name(WTERMSIG(status)))
                                                  : fmt::format("failed (exit code {})", code);
      failures_.push_back(fmt::format("{} {} after {:.2f} s; see {}", name, how, wall, log));
      append_line(log, fmt::format("compare: this run {} after {:.2f} s; the compare went on without it, and a "
                                   "rerun of the compare trains it again",
                                   how, wall));
      logger_.note(fmt::format("compare: run {} {}; the other runs go on (see {})", name, how, log));
    }
  }

  static std::string signal_name(int signal_number) {
    const char* abbrev = sigabbrev_np(signal_number);
    return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal_number);
  }

  // A line at the end of a run's log (O_NOFOLLOW: never through a link).
  static void append_line(const std::string& path, const std::string& line) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) return;
    const std::string text = line + "\n";
    [[maybe_unused]] const ssize_t written = ::write(fd, text.data(), text.size());
    ::close(fd);
  }

  const ComparePlan& plan_;
  const fs::path& out_;
  const int jobs_;
  const int already_done_;
  CompareLogger& logger_;
  const io::StopFlag stop_;
  const bool tty_ = logger_.redraws();
  struct Running {
    size_t index = 0;                               // in plan.runs
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
  double busy_seconds_ = 0;
  size_t to_run_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::string last_line_;
};

// report.html, report.md, runs.csv, summary.json from every run of the grid, into result. A new
// signal while drawing stops it (nothing half-written): report_stopped.
void draw_report(const ComparePlan& plan, const fs::path& out, CompareResult& result) {
  std::vector<RunResult> results;
  for (const RunSpec& run : plan.runs) results.push_back(read_run(run, (out / "runs" / run.name).string()));
  const int signals_before = io::stop_signals_received();
  try {
    result.answer =
        write_report(plan, results, out.string(), [&] { return io::stop_signals_received() != signals_before; });
    result.report_drawn = true;
    result.report_path = (out / "report.html").string();
  } catch (const ReportStopped&) {
    result.report_stopped = true;
  }
}

// A search shard whose own runs are done while a later round waits on other shards' runs: true
// (after a pause) while one of those runs is being trained by another compare, or for a grace of
// a few polls while none is (another shard may be between reading the next round and locking its
// runs), so that the next pass can take its share; false after that, printing how to continue.
bool wait_for_other_shards(const ComparePlan& plan, const fs::path& out, const CompareOptions& options,
                           const std::set<std::string>& locked, int& idle_polls, CompareLogger& logger,
                           io::StopFlag stop) {
  constexpr int kGracePolls = 4;  // x 0.5 s
  std::string idle;
  bool training = false;
  for (const LrSearchSpec::Block& block : plan.search.blocks) {
    if (block.settled || block.waiting_on.empty() || locked.count(block.waiting_on)) continue;
    try {
      io::DirLock probe = io::DirLock::acquire_file((out / ".locks" / (block.waiting_on + ".lock")).string(),
                                                    (out / "runs" / block.waiting_on).string(), "compare run");
      if (idle.empty()) idle = block.waiting_on;
    } catch (const InputError&) {  // another compare holds it: it is being trained now
      training = true;
      break;
    }
  }
  if (idle.empty() && !training) return false;  // every round is settled
  idle_polls = training ? 0 : idle_polls + 1;
  if (training || idle_polls < kGracePolls) {
    for (int i = 0; i < 5 && io::stop_signal(stop) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return io::stop_signal(stop) == 0;
  }
  logger.note(
      fmt::format("compare: shard {}: the search's next round waits for runs of other shards that no "
                  "compare is training now (first: {}); run the other shards, then this one again",
                  options.shard, idle));
  return false;
}

struct PassTotals {
  int failed = 0;
  std::string bad_input;
  std::set<std::string> failed_runs;  // crashed or failed: not launched again by a later pass
  std::vector<std::string> failures;
  std::vector<ChildRecord> children;
  double busy_slot_s = 0.0;  // jobs x the passes' wall time
};

// Trains what the plan still needs in passes: a grid in one; a search pass by pass, the plan read
// again after each, until no round adds a run this process trains. Returns the final plan.
ComparePlan train_passes(ComparePlan plan, const CompareOptions& options, const Shard& shard, PassTotals& totals,
                         CompareLogger& logger, io::StopFlag stop) {
  const fs::path out(options.out);
  std::vector<io::DirLock> run_locks;
  std::set<std::string> locked;
  const int jobs = options.jobs > 0 ? options.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::string exe = self_exe();
  int idle_polls = 0;
  for (int pass = 0;; ++pass) {
    lock_runs(plan, out, shard, run_locks, locked);
    int already_done = 0;
    std::deque<size_t> queue = queue_runs(plan, out, options, shard, totals.failed_runs, already_done);
    if (queue.empty() && pass > 0) {
      if (!shard || !wait_for_other_shards(plan, out, options, locked, idle_polls, logger, stop)) break;
      plan = load_compare_plan(options.config, options.out);
      continue;
    }
    if (pass > 0) logger.note(fmt::format("compare: search: the next round adds {} run(s) here", queue.size()));
    idle_polls = 0;
    RunWatcher watcher(plan, out, jobs, already_done, logger, stop);
    watcher.run(std::move(queue), exe);
    if (!options.report_only) watcher.print_progress(true);
    totals.failed += watcher.failed();
    if (totals.bad_input.empty()) totals.bad_input = watcher.bad_input();
    totals.failures.insert(totals.failures.end(), watcher.failures().begin(), watcher.failures().end());
    for (const ChildRecord& child : watcher.children()) {
      totals.children.push_back(child);
      if (child.code != kExitOk && child.code != kExitDiverged) totals.failed_runs.insert(plan.runs[child.index].name);
    }
    totals.busy_slot_s += double(jobs) * watcher.busy_wall_s();
    // A crashed run does not stop the search: the rounds that wait on it wait, the others go on.
    if (!plan.search.enabled() || options.report_only || io::stop_signal(stop) != 0 || !totals.bad_input.empty()) break;
    plan = load_compare_plan(options.config, options.out);
  }
  return plan;
}

double self_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The record a finished run wrote (summary.json "timing": its last session's parts), or nothing
// (no summary, a summary without timing, or one that does not parse).
std::optional<train::PartTimes> run_timing(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  if (!in) return std::nullopt;
  const nlohmann::json summary = nlohmann::json::parse(in, nullptr, false);
  if (summary.is_discarded() || !summary.is_object() || !summary.contains("timing")) return std::nullopt;
  const nlohmann::json& timing = summary.at("timing");
  try {
    return train::part_times_from_json(timing.contains("last_session") ? timing.at("last_session") : timing, "");
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// The runs' records and what the compare saw of their processes, summed.
void add_runs(CompareTiming& timing, const ComparePlan& plan, const fs::path& out, const PassTotals& totals) {
  double child_wall = 0.0;
  for (const ChildRecord& child : totals.children) {
    child_wall += child.wall_s;
    std::optional<train::PartTimes> parts;
    if (child.code == kExitOk || child.code == kExitDiverged)
      parts = run_timing(out / "runs" / plan.runs[child.index].name);
    if (!parts) {
      ++timing.other_runs;
      timing.other_wall_s += child.wall_s, timing.other_cpu_s += child.cpu_s;
      continue;
    }
    ++timing.finished_runs;
    timing.parts += *parts;
    timing.process_wall_s += std::max(0.0, child.wall_s - parts->wall_total());
    timing.process_cpu_s += std::max(0.0, child.cpu_s - parts->cpu_total());
  }
  timing.idle_s = std::max(0.0, totals.busy_slot_s - child_wall);
}

}  // namespace

double CompareTiming::cpu_seconds() const {
  double sum = parts.cpu_total() + process_cpu_s + other_cpu_s + compare_cpu_s;
  return sum;
}

double CompareTiming::steps_wall_share() const {
  return slot_seconds() > 0 ? parts.wall_s[size_t(train::RunPart::steps)] / slot_seconds() : 0.0;
}

double CompareTiming::steps_cpu_share() const {
  return cpu_seconds() > 0 ? parts.cpu_s[size_t(train::RunPart::steps)] / cpu_seconds() : 0.0;
}

std::vector<CompareTiming::Row> CompareTiming::rows() const {
  using train::RunPart;
  const auto part = [&](RunPart p, const char* name) {
    return Row{name, parts.wall_s[size_t(p)], parts.cpu_s[size_t(p)]};
  };
  std::vector<Row> out = {part(RunPart::steps, "training steps"),
                          part(RunPart::evaluation, "held-out evaluation"),
                          part(RunPart::diagnostics, "diagnostics"),
                          part(RunPart::checkpoints, "checkpoints"),
                          part(RunPart::logs, "logs (metrics.jsonl, run log)"),
                          part(RunPart::setup, "run setup (config, data, model, run directory)"),
                          part(RunPart::finish, "run finish"),
                          {"process start and exit (exec, libraries, exit)", process_wall_s, process_cpu_s}};
  if (other_runs > 0)
    out.push_back(
        {fmt::format("runs that crashed, failed or were stopped ({})", other_runs), other_wall_s, other_cpu_s});
  out.push_back({"idle run slots (launching and reaping runs)", idle_s, 0.0});
  double listed = 0.0;
  for (const Row& r : out) listed += r.wall_s;
  out.push_back({"the compare itself (plan, locks, report)", std::max(0.0, slot_seconds() - listed), compare_cpu_s});
  std::stable_sort(out.begin() + 1, out.end(), [](const Row& a, const Row& b) { return a.wall_s > b.wall_s; });
  return out;
}

std::string CompareTiming::summary_line() const {
  std::string rest;
  for (const Row& r : rows()) {
    if (r.name == "training steps" || slot_seconds() <= 0) continue;
    const double share = r.wall_s / slot_seconds();
    if (share < 0.001) continue;
    const std::string name = r.name.substr(0, r.name.find(" ("));
    rest += fmt::format("{}{} {:.1f}%", rest.empty() ? "" : ", ", name, 100.0 * share);
  }
  return fmt::format(
      "compare: {:.1f}% of the wall time of {} run slot(s) went to training steps ({:.1f}% of the CPU "
      "time; {} run(s) trained, {:.1f} s){}{}",
      100.0 * steps_wall_share(), jobs, 100.0 * steps_cpu_share(), finished_runs, wall_s,
      rest.empty() ? "" : "; the rest: ", rest);
}

CompareResult run_compare(const CompareOptions& options, CompareLogger& logger, io::StopFlag stop) {
  const auto started = std::chrono::steady_clock::now();
  const double cpu_before = self_cpu_seconds();
  const Shard shard = check_options(options);
  ComparePlan plan = load_compare_plan(options.config, options.out);
  const fs::path out(options.out);
  if (options.report_only && !fs::is_directory(out / "runs"))
    throw InputError(
        fmt::format("{}: no runs/ here: nothing to report (train the grid first: normlab compare --config {} "
                    "--out {})",
                    options.out, options.config, options.out));
  const std::vector<ChangedRun> changed = changed_runs_of(plan, options, shard);
  for (const char* sub : {"runs", "configs", "logs", ".locks"})
    io::make_directories((out / sub).string(), "output directory");
  record_compare_source(options.out, options.config);  // which config made it: for `normlab serve`
  if (!changed.empty()) {
    remove_changed(out, changed, logger);
    // A search's later rounds were chosen from the removed runs' outcomes: choose them again.
    plan = load_compare_plan(options.config, options.out);
  }
  PassTotals totals;
  plan = train_passes(std::move(plan), options, shard, totals, logger, stop);
  CompareResult result;
  const auto report_start = std::chrono::steady_clock::now();
  if (!shard) draw_report(plan, out, result);
  result.stop_signal = io::stop_signal(stop);
  result.failed = totals.failed;
  result.bad_input = totals.bad_input;
  result.failures = totals.failures;
  CompareTiming& timing = result.timing;
  const auto now = std::chrono::steady_clock::now();
  timing.wall_s = std::chrono::duration<double>(now - started).count();
  timing.report_s = std::chrono::duration<double>(now - report_start).count();
  timing.jobs = options.jobs > 0 ? options.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  timing.compare_cpu_s = self_cpu_seconds() - cpu_before;
  add_runs(timing, plan, out, totals);
  return result;
}

}  // namespace normlab::study
