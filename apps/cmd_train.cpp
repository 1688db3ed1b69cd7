// normlab train --config FILE [--out DIR] [--set section.key=value]... [--threads N] [--resume [DIR]]
//               [--accept-changed-data]
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/dist/communicator.hpp"
#include "normlab/error.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/io/text.hpp"
#include "normlab/nn/norm_registry.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/evaluate.hpp"
#include "normlab/train/run_dir.hpp"
#include "normlab/train/session.hpp"

namespace normlab::cli {

namespace {

struct TrainOptions {
  std::string config;
  std::string out;
  std::vector<std::string> overrides;
  int threads = -1;  // -1: as the config says
  std::string resume_dir;
  bool resume = false;
  bool accept_changed_data = false;  // --resume on data files whose content changed (recorded in data.json)
};

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int64_t total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
  return fmt::format("{}:{:02}", total / 60, total % 60);
}

// Progress on stderr: one redrawn line with a bar on a terminal, plain lines every log_every steps
// otherwise (a log file should not fill with carriage returns).
class ConsoleLogger : public train::SessionLogger {
 public:
  ConsoleLogger(int64_t log_every, bool terminal) : log_every_(log_every), terminal_(terminal) {}
  ~ConsoleLogger() override { end_line(); }

  void info(const std::string& message) override {
    end_line();
    fmt::print(stderr, "{}\n", io::escape_control_lines(message));  // it may echo a path or a key
  }

  void step(const train::StepRecord& record, int64_t total_steps) override {
    const auto now = std::chrono::steady_clock::now();
    if (!first_step_) {
      first_step_ = record.step;
      session_start_ = now;
    }
    const double elapsed = std::chrono::duration<double>(now - session_start_).count();
    const int64_t done = record.step - *first_step_ + 1;
    const double eta = elapsed / double(done) * double(total_steps - record.step);
    const auto loss = [&record] {
      return record.diverged && !std::isfinite(record.loss) ? std::string("nan") : fmt::format("{:.4f}", record.loss);
    };
    if (terminal_) {
      const bool last = record.step == total_steps || record.diverged;
      if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(double(kWidth) * double(record.step) / double(total_steps));
      fmt::print(stderr, "\r[{}{}] {}/{} loss {} acc {:.3f} lr {:.2e} ETA {}\033[K", std::string(size_t(filled), '#'),
                 std::string(size_t(kWidth - filled), '.'), record.step, total_steps, loss(), record.accuracy, record.lr,
                 format_duration(eta));
      std::fflush(stderr);
      bar_drawn_ = true;
      return;
    }
    if (record.step % log_every_ != 0 && record.step != total_steps && !record.diverged) return;
    fmt::print(stderr, "step {}/{}  loss {}  acc {:.4f}  lr {:.3e}  grad_norm {:.3f}  tok/s {:.0f}  ETA {}\n",
               record.step, total_steps, loss(), record.accuracy, record.lr, record.grad_norm, record.tokens_per_s,
               format_duration(eta));
  }

  void eval(int64_t step, const train::EvalMetrics& metrics) override {
    end_line();
    fmt::print(stderr, "eval  step {}  valid {}\n", step, train::describe_groups(metrics));
  }

  void error(const std::string& line) override { info(line); }

  void end_line() override {
    if (bar_drawn_) fmt::print(stderr, "\n");
    bar_drawn_ = false;
  }

 private:
  int64_t log_every_;
  bool terminal_;
  bool bar_drawn_ = false;
  std::optional<int64_t> first_step_;
  std::chrono::steady_clock::time_point session_start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// SIGINT / SIGTERM / SIGUSR1 (io/stop.hpp): loading data stops with nothing written; training
// finishes its step (or abandons an evaluation), writes a checkpoint and returns; either way run()
// exits 130 / 143. SIGUSR1 is a SIGTERM that mpirun forwards to every rank without killing them a
// second later (docs/scaling.md, the grace period). A second Ctrl-C stops at once (the last
// checkpoint and complete metrics lines survive that too).
constexpr char kStopAnnouncement[] =
    "\nnormlab: stopping as soon as it is safe (a run in progress writes a checkpoint first; send the signal again "
    "to stop at once)\n";

// How training ended, printed by the reporting rank: a refusal or "nothing to do" (its line), a
// stop (checkpointed, exit 130/143), divergence (exit 3), or the final numbers on stdout.
void print_result(const train::SessionResult& result) {
  using train::SessionOutcome;
  const train::TrainSummary& summary = result.summary;
  const std::string& dir = result.dir;
  if (!result.report) return;
  switch (result.outcome) {
    case SessionOutcome::refused:
    case SessionOutcome::nothing_to_do:
      fmt::print(stderr, "{}\n", io::escape_control_lines(result.line));  // it may echo a path, a key, a CSV header
      return;
    case SessionOutcome::interrupted:
      fmt::print(stderr, "normlab: {} after step {} of {}; checkpoint written to {}; continue with: {}\n",
                 summary.stop_request == SIGTERM ? fmt::format("terminated ({})", train::stop_signal_name(SIGTERM))
                                                 : "interrupted (SIGINT)",
                 summary.steps, summary.planned_steps, train::RunPaths(dir).checkpoint,
                 train::resume_command(dir, result.ranks));
      return;
    case SessionOutcome::diverged:
      fmt::print(stderr, "normlab: training diverged at step {} (non-finite loss or gradient norm); see {}\n",
                 summary.diverged_at_step.value_or(0), train::RunPaths(dir).metrics);
      return;
    case SessionOutcome::finished: break;
  }
  fmt::print("trained {} steps in {}", summary.steps, format_duration(summary.wall_time_s));
  if (summary.final_valid) fmt::print(": valid {}", train::describe_groups(*summary.final_valid));
  if (summary.best_valid && summary.final_valid_step && summary.best_valid->step != *summary.final_valid_step)
    fmt::print("\nbest {} valid loss {:.4f} at step {}",
               summary.final_valid && !train::has_length_buckets(*summary.final_valid) ? "held-out" : "trained-length",
               train::selection_loss(*summary.best_valid), summary.best_valid->step);
  fmt::print("\nrun directory: {}\n", dir);
}

void run(const TrainOptions& options) {
  io::install_stop_signals({.sigusr1 = true, .second_stops_at_once = true, .announcement = kStopAnnouncement});
  dist::Communicator& comm = dist::world();                  // data-parallel: the ranks of this launch (1 otherwise)
  if (comm.rank() != 0) io::set_stop_announcement(nullptr);  // data-parallel: rank 0 speaks

  train::SessionOptions session;
  session.config_path = options.config.empty() ? std::nullopt : std::optional<std::string>(options.config);
  session.out = options.out;
  session.overrides = options.overrides;
  if (options.threads >= 0) session.overrides.push_back(fmt::format("train.threads={}", options.threads));
  session.resume = options.resume;
  session.resume_dir = options.resume_dir;
  session.accept_changed_data = options.accept_changed_data;
  if (session.config_path && study::config_kind(options.config) == study::ConfigKind::compare)
    session.config_refusal = fmt::format(
        "{}: is a compare config (base, set, grid), not a run config; run it with: normlab compare --config {} "
        "--out runs/{}",
        options.config, options.config, std::filesystem::path(options.config).stem().string());
  const bool terminal = isatty(fileno(stderr)) == 1;
  const train::SessionResult result = train::run_session(
      session,
      [terminal](const train::RunConfig& config) {
        return std::make_unique<ConsoleLogger>(config.train.log_every, terminal);
      },
      comm, io::stop_flag());
  print_result(result);
  if (result.exit_code != kExitOk) throw ExitCode{result.exit_code};
}

}  // namespace

void add_train(CLI::App& app) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model from a JSON config (docs/config.md)");
  cmd->add_option("--config", options->config, "Config file (JSON: model, task, optim, train)");
  cmd->add_option("--out", options->out, "Run directory (default: runs/<config name>)");
  cmd->add_option("--set", options->overrides, "Override a config key: --set optim.lr=0.0003 (repeatable)");
  cmd->add_option("--threads", options->threads, "Threads (overrides train.threads; 0: all cores)")
      ->check(CLI::Range(0, 1024));
  CLI::Option* resume =
      cmd->add_option("--resume", options->resume_dir, "Continue the run in DIR (or in --out) from its checkpoint")
          ->expected(0, 1);
  cmd->add_flag("--accept-changed-data", options->accept_changed_data,
                "With --resume: continue although a data file's content changed since the checkpoint (refused "
                "otherwise); the change is recorded in the run's data.json");
  cmd->footer(
      fmt::format("model.norm: {} (normlab help norms)\n", fmt::join(nn::norm_names(), ", ")) +
      "Ctrl-C (SIGINT), SIGTERM or SIGUSR1: the step in flight finishes, a checkpoint is written, exit 130 / 143;\n"
      "continue with: normlab train --resume DIR (a run of N ranks: mpirun -np N normlab train --resume DIR).\n"
      "A second signal stops at once (the last checkpoint stays). Under mpirun, stop with SIGUSR1 to mpirun.\n"
      "Exit codes: 0 done, 2 bad input, 3 diverged.");
  cmd->callback([options, resume] {
    options->resume = resume->count() > 0;
    if (options->accept_changed_data && !options->resume)
      throw InputError("--accept-changed-data: only with --resume (a new run records the data it reads)");
    run(*options);
  });
}

}  // namespace normlab::cli
