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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/dist/communicator.hpp"
#include "normlab/dist/data_parallel.hpp"
#include "normlab/error.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/trainer.hpp"

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
class ConsoleLogger : public train::TrainLogger {
 public:
  ConsoleLogger(int64_t log_every, bool terminal) : log_every_(log_every), terminal_(terminal) {}
  ~ConsoleLogger() override { end_line(); }

  void info(const std::string& message) override {
    end_line();
    fmt::print(stderr, "{}\n", message);
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
    const std::string loss = record.diverged && !std::isfinite(record.loss) ? "nan" : fmt::format("{:.4f}", record.loss);
    if (terminal_) {
      const bool last = record.step == total_steps || record.diverged;
      if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(double(kWidth) * double(record.step) / double(total_steps));
      fmt::print(stderr, "\r[{}{}] {}/{} loss {} acc {:.3f} lr {:.2e} ETA {}\033[K", std::string(size_t(filled), '#'),
                 std::string(size_t(kWidth - filled), '.'), record.step, total_steps, loss, record.accuracy, record.lr,
                 format_duration(eta));
      std::fflush(stderr);
      bar_drawn_ = true;
      return;
    }
    if (record.step % log_every_ != 0 && record.step != total_steps && !record.diverged) return;
    fmt::print(stderr, "step {}/{}  loss {}  acc {:.4f}  lr {:.3e}  grad_norm {:.3f}  tok/s {:.0f}  ETA {}\n",
               record.step, total_steps, loss, record.accuracy, record.lr, record.grad_norm, record.tokens_per_s,
               format_duration(eta));
  }

  void eval(int64_t step, const train::EvalMetrics& metrics) override {
    end_line();
    fmt::print(stderr, "eval  step {}  valid {}\n", step, train::describe_groups(metrics));
  }

  void end_line() {
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

std::string signal_name(int signal_number) {
  if (signal_number != SIGTERM) return "SIGINT";
  return io::stopped_by_sigusr1() ? "SIGUSR1" : "SIGTERM";
}

// The command that continues a run of `ranks` processes (another process count is refused).
std::string resume_command(const std::string& dir, int ranks) {
  return ranks > 1 ? fmt::format("mpirun -np {} normlab train --resume {}", ranks, dir)
                   : fmt::format("normlab train --resume {}", dir);
}

// "Nothing to do" (the run already finished): not an error, but agreed like one, so that every
// rank returns.
constexpr int kNothingToDo = -1;

// The run directory: --resume DIR, --out DIR, or runs/<config name>.
std::string run_dir(const TrainOptions& options, const std::optional<std::string>& config_path) {
  namespace fs = std::filesystem;
  if (options.resume) {
    if (!options.resume_dir.empty() && !options.out.empty() && fs::path(options.resume_dir) != fs::path(options.out)) {
      throw InputError(fmt::format("--resume {} and --out {} name different directories", options.resume_dir,
                                   options.out));
    }
    std::string dir = !options.resume_dir.empty() ? options.resume_dir : options.out;
    if (dir.empty() && config_path) dir = (fs::path("runs") / fs::path(*config_path).stem()).string();
    if (dir.empty()) throw InputError("--resume: give the run directory (--resume DIR or --out DIR)");
    return dir;
  }
  if (!config_path) throw InputError("--config is required (or --resume DIR to continue a run)");
  return !options.out.empty() ? options.out : (fs::path("runs") / fs::path(*config_path).stem()).string();
}

// What a run needs before its first step; filled by set_up.
struct Setup {
  std::string dir;
  train::RunConfig config;
  std::unique_ptr<ConsoleLogger> logger;
  std::optional<train::Trainer> trainer;  // built, its run directory started or resumed
};

// Config, data and the model into setup; nothing is written. Returns 0 when the trainer is built,
// kNothingToDo with its line when the run already finished.
int build(const TrainOptions& options, const std::vector<std::string>& overrides,
          const std::optional<std::string>& config_path, int ranks, Setup& setup, std::string& line) {
  {
    if (config_path && study::config_kind(*config_path) == study::ConfigKind::compare)
      throw InputError(fmt::format("{}: is a compare config (base, set, grid), not a run config; run it with: "
                                   "normlab compare --config {} --out runs/{}",
                                   *config_path, *config_path, std::filesystem::path(*config_path).stem().string()));
    setup.dir = run_dir(options, config_path);
    if (!options.resume) {
      setup.config = train::load_config(*config_path, overrides);
    } else {
      setup.config = train::resume_config(setup.dir, config_path, overrides);
      if (const std::optional<int64_t> done = train::finished_steps(setup.dir);
          done && *done >= setup.config.train.steps) {
        line = fmt::format("normlab: {} already finished its {} steps; nothing to do. To train it further: {} --set "
                           "train.steps=N (N > {})",
                           setup.dir, *done, resume_command(setup.dir, ranks), *done);
        return kNothingToDo;
      }
      // The checkpoint must describe this run before a model of the requested size is built.
      train::check_resume_checkpoint(setup.dir, setup.config);
    }
    setup.logger = std::make_unique<ConsoleLogger>(setup.config.train.log_every, isatty(fileno(stderr)) == 1);
    setup.trainer.emplace(setup.config, setup.logger.get(), io::stop_flag());
    return 0;
  }
}

// The run directory's lock (rank 0) and the checkpoint (every rank): a new run, or the resume.
int open_run(const TrainOptions& options, Setup& setup) {
  if (options.resume) {
    setup.trainer->resume(setup.dir, options.accept_changed_data);
  } else {
    setup.trainer->start(setup.dir);
  }
  return 0;
}

// Runs one step of the set-up. Returns its code (0 when it succeeded); otherwise the exit code
// with its one line in `line`, for every rank to agree on.
int guarded(const TrainOptions& options, const std::vector<std::string>& overrides,
            const std::optional<std::string>& config_path, Setup& setup, std::string& line,
            const std::function<int()>& step) {
  try {
    return step();
  } catch (const io::StopRequested& stop) {
    line = fmt::format("normlab: stopped ({}) while loading the data; nothing was written",
                       signal_name(stop.signal_number()));
    return exit_code_for_signal(stop.signal_number());
  } catch (const InputError& e) {
    // Rules that need the data (model.vocab_size against a vocabulary read from the training file)
    // are checked when the trainer is built, not with the file: name the file all the same.
    std::string message = e.what();
    if ((message.rfind("model", 0) == 0 || message.rfind("task.", 0) == 0) && (options.resume || config_path)) {
      const std::string source =
          options.resume ? train::RunPaths(setup.dir).config
                         : overrides.empty() ? *config_path
                                             : fmt::format("{} with --set {}", *config_path, fmt::join(overrides, " --set "));
      message = fmt::format("{}: {}", source, message);
    }
    line = fmt::format("normlab: error: {}", message);
    return kExitBadInput;
  } catch (const std::exception& e) {
    line = fmt::format("normlab: internal error: {}", e.what());
    return 1;
  }
}

// The run directory (a fresh run) and the residual block being trained: with --set model.norm=none
// nothing else would say which.
void announce(const TrainOptions& options, const Setup& setup, int ranks) {
  const train::RunConfig& config = setup.config;
  if (!options.resume)
    setup.logger->info(fmt::format("run directory: {}{}", setup.dir,
                                   ranks > 1 ? fmt::format(" ({} data-parallel ranks)", ranks) : ""));
  const train::ModelConfig& m = config.model;
  const bool placement_moot = !nn::has_norm_layer(m.norm);
  setup.logger->info(
      fmt::format("block: {}{}", study::block_formula(m.norm.name(), nn::to_string(m.placement), m.final_norm),
                  placement_moot && m.placement == nn::Placement::post
                      ? fmt::format(" (model.placement=post has no effect with model.norm={})", m.norm.name())
                      : ""));
}

// Trainer::fit on every rank. data-parallel: an error on one rank cannot reach the others (they
// wait in the next reduction), so the whole job ends here, with this rank's line.
train::TrainSummary fit(Setup& setup, dist::Communicator& comm) {
  try {
    return setup.trainer->fit();
  } catch (const std::exception& e) {
    if (comm.size() == 1) throw;
    setup.logger->end_line();
    const bool input = dynamic_cast<const InputError*>(&e) != nullptr;
    fmt::print(stderr, "normlab: {}data-parallel rank {}: {}\n", input ? "error: " : "internal error: ", comm.rank(),
               e.what());
    comm.abort_all(input ? kExitBadInput : 1);
    throw;
  }
}

// How training ended: a stop (checkpointed, exit 130/143), divergence (exit 3), or the final
// numbers on stdout. Only the reporting rank prints.
void finish(const train::TrainSummary& summary, const std::string& dir, int ranks, bool report) {
  if (summary.interrupted()) {
    const bool term = summary.stop_request == SIGTERM;
    if (report)
      fmt::print(stderr, "normlab: {} after step {} of {}; checkpoint written to {}; continue with: {}\n",
                 term ? fmt::format("terminated ({})", signal_name(SIGTERM)) : "interrupted (SIGINT)", summary.steps,
                 summary.planned_steps, train::RunPaths(dir).checkpoint, resume_command(dir, ranks));
    throw ExitCode{exit_code_for_signal(summary.stop_request)};
  }
  if (summary.diverged) {
    if (report)
      fmt::print(stderr, "normlab: training diverged at step {} (non-finite loss or gradient norm); see {}\n",
                 summary.diverged_at_step.value_or(0), train::RunPaths(dir).metrics);
    throw ExitCode{kExitDiverged};
  }
  if (!report) return;
  fmt::print("trained {} steps in {}", summary.steps, format_duration(summary.wall_time_s));
  if (summary.final_valid) fmt::print(": valid {}", train::describe_groups(*summary.final_valid));
  if (summary.best_valid && summary.final_valid_step && summary.best_valid->step != *summary.final_valid_step)
    fmt::print("\nbest trained-length valid loss {:.4f} at step {}", train::selection_loss(*summary.best_valid),
               summary.best_valid->step);
  fmt::print("\nrun directory: {}\n", dir);
}

void run(const TrainOptions& options) {
  io::install_stop_signals({.sigusr1 = true, .second_stops_at_once = true, .announcement = kStopAnnouncement});
  dist::Communicator& comm = dist::world();  // data-parallel: the ranks of this launch (1 otherwise)
  const bool report = comm.rank() == 0;      // data-parallel: rank 0 reports
  if (!report) io::set_stop_announcement(nullptr);

  std::vector<std::string> overrides = options.overrides;
  if (options.threads >= 0) overrides.push_back(fmt::format("train.threads={}", options.threads));
  std::optional<std::string> config_path;
  if (!options.config.empty()) config_path = options.config;
  // Any step of the set-up can fail on one rank only, so the outcome is agreed: every rank gets the
  // first failing rank's line and exits with its code.
  // Built first, then (data-parallel) the ranks compare what data they read, and only then is the
  // run directory touched: a refusal at any of these steps leaves it as it was.
  Setup setup;
  std::string line;
  auto agreed = [&](int code) {
    const dist::Communicator::Verdict verdict = comm.agree(code, line);
    if (verdict.code == 0) return true;
    if (setup.logger) setup.logger->end_line();
    if (report) {
      std::string text = verdict.message;
      // Another rank's refusal: say which (its files may be on another machine).
      if (verdict.rank != 0 && text.rfind("normlab: ", 0) == 0)
        text.insert(9, fmt::format("data-parallel rank {}: ", verdict.rank));
      fmt::print(stderr, "{}\n", text);
    }
    if (verdict.code == kNothingToDo) return false;
    throw ExitCode{verdict.code};
  };
  if (!agreed(guarded(options, overrides, config_path, setup, line,
                      [&] { return build(options, overrides, config_path, comm.size(), setup, line); })))
    return;
  if (comm.size() > 1) {
    // The same verdict on every rank (computed from gathered digests): no rank waits for another.
    const std::string disagreement = train::data_disagreement(comm, setup.trainer->data_files());
    line = disagreement.empty() ? "" : fmt::format("normlab: error: {}", disagreement);
    agreed(disagreement.empty() ? 0 : kExitBadInput);
  }
  agreed(guarded(options, overrides, config_path, setup, line, [&] { return open_run(options, setup); }));

  if (report) announce(options, setup, comm.size());
  const train::TrainSummary summary = fit(setup, comm);
  setup.logger->end_line();
  finish(summary, setup.dir, comm.size(), report);
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
  CLI::Option* resume = cmd->add_option("--resume", options->resume_dir,
                                        "Continue the run in DIR (or in --out) from its checkpoint")
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
