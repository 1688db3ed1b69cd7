// normlab compare --config FILE --out DIR [--jobs N] [--report-only] [--retrain-changed] [--shard I/K]
//
// Runs the grid as child processes (`normlab train ... --threads 1`), --jobs at a time, so one
// crashed or diverged run cannot take the others down, and each run directory is an ordinary run
// that `normlab eval` can open. Rerunning skips finished runs and resumes interrupted ones, but
// only runs whose resolved config is the one the grid asks for (study/reuse.cpp).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/io/paths.hpp"
#include "normlab/study/compare.hpp"

namespace normlab::cli {

namespace {

namespace fs = std::filesystem;
volatile std::sig_atomic_t g_interrupted = 0;  // the signal number, once one arrives
volatile std::sig_atomic_t g_signals = 0;      // how many have arrived
void on_interrupt(int signal_number) {
  g_interrupted = signal_number;
  g_signals = g_signals + 1;
}

struct Options {
  std::string config, out;
  int jobs = 0;
  bool report_only = false;
  bool retrain_changed = false;
  std::string shard;  // "I/K"
};

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
    throw InputError(fmt::format("--shard {}: expected I/K, e.g. 0/4 (this process trains the runs whose index is "
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
  const pid_t pid = fork();
  if (pid < 0) throw InputError(fmt::format("compare: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    // Its own process group: a Ctrl-C at the terminal reaches compare only, which then sends each
    // run one SIGTERM (a run that got both would take the second as "stop at once").
    setpgid(0, 0);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
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

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const int s = int(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

// Trains what the grid still needs (in children), then draws the report.
void train_grid_and_report(const Options& options) {
  if (options.report_only && options.retrain_changed)
    throw InputError("--report-only and --retrain-changed: choose one (--report-only never trains)");
  if (options.report_only && !options.shard.empty())
    throw InputError("--report-only and --shard: a shard trains part of the grid; draw the report with --report-only alone");
  std::optional<std::pair<size_t, size_t>> shard;
  if (!options.shard.empty()) shard = parse_shard(options.shard);
  const study::ComparePlan plan = study::load_compare_plan(options.config);
  const fs::path out(options.out);
  if (options.report_only && !fs::is_directory(out / "runs"))
    throw InputError(fmt::format("{}: no runs/ here: nothing to report (train the grid first: normlab compare --config {} "
                                 "--out {})",
                                 options.out, options.config, options.out));

  // Never report old results under new settings: a started run is reused only when its resolved
  // config is the one asked for now.
  std::vector<study::ChangedRun> changed = study::changed_runs(plan, options.out);
  if (shard) {
    std::vector<study::ChangedRun> mine;
    for (const study::ChangedRun& c : changed)
      for (size_t i = shard->first; i < plan.runs.size(); i += shard->second)
        if (plan.runs[i].name == c.name) mine.push_back(c);
    changed = mine;
  }
  if (!changed.empty() && !options.retrain_changed)
    throw InputError(study::changed_runs_message(changed, options.out));
  std::error_code ec;
  for (const char* sub : {"runs", "configs", "logs", ".locks"}) io::make_directories((out / sub).string(), "output directory");
  // Each run of the grid has one owner, so that shards can share one --out (on one machine or a
  // shared file system) while two compares never decide about the same run: this process locks
  // the runs it trains (its shard's), or all of them when it also draws the report; released by
  // the kernel if this process dies. The run's own directory lock belongs to its `normlab train`.
  std::vector<io::DirLock> run_locks;
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    if (shard && i % shard->second != shard->first) continue;
    run_locks.push_back(io::DirLock::acquire_file((out / ".locks" / (plan.runs[i].name + ".lock")).string(),
                                                  (out / "runs" / plan.runs[i].name).string(), "compare run"));
  }

  const int jobs = options.jobs > 0 ? options.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::string exe = self_exe();
  const bool tty = isatty(STDERR_FILENO);

  // Decide what each run needs.
  std::deque<size_t> queue;
  int already_done = 0;
  for (const study::ChangedRun& c : changed) {
    fs::remove_all(out / "runs" / c.name, ec);
    if (ec) throw InputError(fmt::format("{}: cannot remove the changed run: {}", (out / "runs" / c.name).string(), ec.message()));
    fs::remove(out / "logs" / (c.name + ".log"), ec);
  }
  if (!changed.empty())
    fmt::print(stderr, "compare: retraining {} run(s) whose config changed (first: {})\n", changed.size(),
               changed.front().name);
  for (size_t i = 0; i < plan.runs.size() && !options.report_only; ++i) {
    if (shard && i % shard->second != shard->first) continue;
    const study::RunSpec& run = plan.runs[i];
    const fs::path dir = out / "runs" / run.name;
    if (fs::exists(dir / "summary.json")) {
      ++already_done;
      continue;
    }
    if (fs::exists(dir) && !fs::exists(dir / "checkpoint.safetensors")) fs::remove_all(dir, ec);  // nothing to resume
    io::write_file_atomic((out / "configs" / (run.name + ".json")).string(), run.config.dump(2) + "\n");
    queue.push_back(i);
  }

  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  std::map<pid_t, std::pair<size_t, std::chrono::steady_clock::time_point>> running;
  int done = 0, diverged = 0, failed = 0, interrupted = 0;
  bool forwarded = false;
  double busy_seconds = 0;
  const size_t to_run = queue.size();
  const auto start = std::chrono::steady_clock::now();
  std::string last_line;
  std::string bad_input;  // a run rejected its input: stop launching, report it

  auto progress = [&](bool final_line) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int finished = done + diverged + failed;
    std::string eta = "?";
    if (finished > 0) {
      const double per_run = busy_seconds / finished;
      eta = format_duration(per_run * double(to_run - size_t(finished)) / jobs);
    }
    const std::string line =
        fmt::format("compare: {}/{} runs done ({} diverged, {} failed, {} skipped as finished{}), {} running, "
                    "elapsed {}, ETA {}",
                    finished, to_run, diverged, failed, already_done,
                    interrupted > 0 ? fmt::format(", {} stopped with a checkpoint", interrupted) : "",
                    running.size(), format_duration(elapsed), eta);
    if (tty) {
      fmt::print(stderr, "\r\033[K{}{}", line, final_line ? "\n" : "");
    } else if (line != last_line) {
      fmt::print(stderr, "{}\n", line);
    }
    last_line = line;
  };

  auto last_print = std::chrono::steady_clock::now();
  while ((!queue.empty() && !g_interrupted && bad_input.empty()) || !running.empty()) {
    while (running.size() < size_t(jobs) && !queue.empty() && !g_interrupted && bad_input.empty()) {
      const size_t i = queue.front();
      queue.pop_front();
      const study::RunSpec& run = plan.runs[i];
      const fs::path dir = out / "runs" / run.name;
      std::vector<std::string> args{"train",     "--config", (out / "configs" / (run.name + ".json")).string(),
                                    "--out",     dir.string(), "--threads", "1"};
      if (fs::exists(dir / "checkpoint.safetensors")) args.push_back("--resume");
      const pid_t pid = launch(exe, args, (out / "logs" / (run.name + ".log")).string());
      running[pid] = {i, std::chrono::steady_clock::now()};
    }
    if (g_interrupted && !forwarded) {
      // Each run finishes its step, writes a checkpoint and exits 130/143; rerunning resumes it.
      for (const auto& entry : running) kill(entry.first, SIGTERM);
      forwarded = true;
      if (!running.empty())
        fmt::print(stderr, "\ncompare: stopping: {} running run(s) write a checkpoint and exit\n", running.size());
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0 && running.count(pid)) {
      const auto [i, started] = running[pid];
      running.erase(pid);
      busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code == kExitOk) {
        ++done;
      } else if (code == kExitDiverged) {
        ++diverged;
      } else if ((code == kExitInterrupted || code == kExitTerminated) && g_interrupted) {
        ++interrupted;  // stopped on our request, checkpointed: not a failure
      } else {
        ++failed;
        if (code == kExitBadInput && bad_input.empty())
          bad_input = fmt::format("run {} rejected its input; see {}", plan.runs[i].name,
                                  (out / "logs" / (plan.runs[i].name + ".log")).string());
      }
      progress(false);
      continue;
    }
    if (pid < 0 && errno == ECHILD) running.clear();
    const auto now = std::chrono::steady_clock::now();
    if (now - last_print > std::chrono::seconds(tty ? 1 : 30)) {
      progress(false);
      last_print = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!options.report_only) progress(true);

  if (shard) {
    fmt::print(stderr,
               "compare: shard {}: no report drawn; when every shard is done (shards on other machines: their runs/ "
               "gathered into one --out), run: normlab compare --config {} --out {} --report-only\n",
               options.shard, options.config, options.out);
  } else {
    std::vector<study::RunResult> results;
    for (const study::RunSpec& run : plan.runs)
      results.push_back(study::read_run(run, (out / "runs" / run.name).string()));
    const int signals_before = g_signals;
    std::vector<std::string> answer;
    try {
      answer = study::write_report(plan, results, out.string(), [&] { return g_signals != signals_before; });
    } catch (const study::ReportStopped&) {
      fmt::print(stderr, "compare: stopped while drawing the report; rerun with --report-only to draw it\n");
      throw ExitCode{g_interrupted == SIGTERM ? kExitTerminated : kExitInterrupted};
    }
    fmt::print("Answer (held-out data; definitions in docs/compare.md):\n");
    for (const std::string& sentence : answer) fmt::print("  {}\n", sentence);
    fmt::print("compare: report written to {}\n", (out / "report.html").string());
  }
  if (!bad_input.empty()) throw InputError(bad_input);
  if (g_interrupted) {
    fmt::print(stderr, "compare: interrupted; run the same command again to resume the unfinished runs\n");
    throw ExitCode{g_interrupted == SIGTERM ? kExitTerminated : kExitInterrupted};
  }
  if (failed > 0) {
    fmt::print(stderr, "compare: {} run(s) failed; their logs are in {}\n", failed, (out / "logs").string());
    throw ExitCode{1};
  }
}

}  // namespace

void add_compare(CLI::App& app) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Train a grid of runs (normalization variant x lr x seed x depth x warmup) and write a report");
  cmd->add_option("--config", options->config, "Compare config (JSON: base, set, grid); see docs/compare.md")
      ->required();
  cmd->add_option("--out", options->out, "Output directory: runs/, report.html, report.md, runs.csv")->required();
  cmd->add_option("--jobs", options->jobs, "Runs in parallel, each single-threaded (default: one per core)")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--report-only", options->report_only, "Do not train; redraw the report from what is in --out");
  cmd->add_flag("--retrain-changed", options->retrain_changed,
                "Retrain (from scratch) the runs in --out whose config differs from the grid's; keep the others");
  cmd->add_option("--shard", options->shard, "I/K: train only the runs whose index is I modulo K (no report)");
  cmd->footer(
      "Rerunning with the same --out skips finished runs and resumes interrupted ones whose config is the\n"
      "one asked for; a run trained with another config stops the command (exit 2) unless --retrain-changed.\n"
      "Ctrl-C stops every running run with a checkpoint (exit 130).");
  cmd->callback([options] { train_grid_and_report(*options); });
}

}  // namespace normlab::cli
