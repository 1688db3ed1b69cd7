// The compare's runs as child processes (scheduler_parts.hpp: RunWatcher): each a `normlab train`
// started by the RunLauncher (scheduler_launcher.cpp), watched through its pidfd, counted by its
// exit code; a crash or failure said in its log and the others go on.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <thread>

#include "normlab/error.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/study/progress.hpp"
#include "scheduler_parts.hpp"

namespace normlab::study::scheduler_parts {

namespace {

std::string signal_name(int signal_number) {
  const char* abbrev = sigabbrev_np(signal_number);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal_number);
}

// A line at the end of a run's log (O_NOFOLLOW: never through a link).
void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) return;
  const std::string text = line + "\n";
  [[maybe_unused]] const ssize_t written = ::write(fd, text.data(), text.size());
  ::close(fd);
}

}  // namespace

std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw InputError("compare: cannot locate the normlab binary (/proc/self/exe)");
  return p.string();
}

void RunWatcher::run(std::deque<size_t> queue, RunLauncher& launcher, const Refill& refill) {
  to_run_ = queue.size();
  start_ = std::chrono::steady_clock::now();
  auto last_print = std::chrono::steady_clock::now();
  bool exited_since_refill = true;  // the caller's plan was read before this pass's first launch
  bool refilled = false;
  // A refill that threw (the plan no longer reads, a lock or a file fails): nothing more is
  // launched, the runs training go on to their end (their work is kept), then the error goes up.
  std::exception_ptr refill_error;
  auto can_launch = [&] { return !stopped() && bad_input_.empty() && !refill_error; };
  for (;;) {
    // A slot free and nothing queued: the next rounds the finished runs allow, while the other
    // slots still train (a round waits only on its own variant and setting's runs).
    if (refill && queue.empty() && exited_since_refill && running_.size() < size_t(jobs_) && can_launch()) {
      const auto refill_start = std::chrono::steady_clock::now();
      try {
        queue = refill();
      } catch (const std::exception& e) {
        refill_error = std::current_exception();
        queue.clear();
        logger_.note(fmt::format("compare: {}; the {} run(s) training finish first", e.what(), running_.size()));
      }
      refill_slot_s_ += double(size_t(jobs_) - running_.size()) *
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - refill_start).count();
      exited_since_refill = false;
      refilled = true;
      refilled_empty_ = queue.empty();
      to_run_ += queue.size();
    }
    if (!((!queue.empty() && can_launch()) || !running_.empty())) break;
    while (running_.size() < size_t(jobs_) && !queue.empty() && can_launch()) {
      const size_t i = queue.front();
      queue.pop_front();
      launch_run(i, launcher);
    }
    if (stopped() && !forwarded_) stop_running();
    int status = 0;
    rusage usage{};
    const pid_t pid = wait4(-1, &status, WNOHANG, &usage);
    if (pid > 0 && running_.count(pid)) {
      reap(pid, status, usage);
      exited_since_refill = true;
      refilled_empty_ = false;
      print_progress(false);
      continue;
    }
    if (pid < 0 && errno == ECHILD) {
      exited_since_refill = true;
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
  if (!refilled) refilled_empty_ = false;
  busy_wall_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (refill_error) std::rethrow_exception(refill_error);
}

std::set<std::string> RunWatcher::running_names() const {
  std::set<std::string> names;
  for (const auto& entry : running_) names.insert(entry.second.name);
  return names;
}

void RunWatcher::print_progress(bool final_line) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int finished = done_ + diverged_ + failed_;
  const std::string eta = format_duration(study_eta_seconds(busy_seconds_, size_t(finished), to_run_, size_t(jobs_)));
  const std::string line = fmt::format(
      "compare: {}/{} runs done ({} diverged, {} failed, {} skipped as finished{}), {} running, "
      "elapsed {}, ETA {}",
      finished, to_run_, diverged_, failed_, already_done_,
      interrupted_ > 0 ? fmt::format(", {} stopped with a checkpoint", interrupted_) : "", running_.size(),
      format_duration(elapsed), eta);
  if (tty_ || line != last_line_) logger_.progress(line, final_line);
  last_line_ = line;
}

// Until a run exits, a signal arrives or 100 ms pass (the stop flag and the progress line are
// looked at in between): each run's pidfd is polled, so the next run starts as soon as a slot
// frees, not at the next tick of a sleep. Without pidfds (kernels before 5.3): 5 ms naps.
void RunWatcher::wait_for_a_run() {
  std::vector<pollfd> fds;
  for (const auto& entry : running_)
    if (entry.second.pidfd >= 0) fds.push_back({entry.second.pidfd, POLLIN, 0});
  if (!fds.empty() && fds.size() == running_.size()) {
    ::poll(fds.data(), fds.size(), 100);  // EINTR on a signal: the loop looks at the stop flag
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(running_.empty() ? 0 : 5));
  }
}

void RunWatcher::launch_run(size_t i, RunLauncher& launcher) {
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
  const pid_t pid = launcher.launch(args, (out_ / "logs" / (run.name + ".log")).string());
  running_[pid] = {run.name, started, int(::syscall(SYS_pidfd_open, pid, 0))};
}

// Each run finishes its step, writes a checkpoint and exits 130/143; rerunning resumes it.
void RunWatcher::stop_running() {
  for (const auto& entry : running_) kill(entry.first, SIGTERM);
  forwarded_ = true;
  if (!running_.empty())
    logger_.note(fmt::format("\ncompare: stopping: {} running run(s) write a checkpoint and exit", running_.size()));
}

// A run has exited with `status` (wait4's, with its CPU time in `usage`): counted by its exit code.
// One that crashed or failed is said in its log and in failures(); the others go on.
void RunWatcher::reap(pid_t pid, int status, const rusage& usage) {
  const Running run = running_[pid];
  running_.erase(pid);
  if (run.pidfd >= 0) ::close(run.pidfd);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.started).count();
  busy_seconds_ += wall;
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  children_.push_back({run.name, code, wall, seconds(usage.ru_utime) + seconds(usage.ru_stime)});
  const std::string& name = run.name;
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

}  // namespace normlab::study::scheduler_parts
