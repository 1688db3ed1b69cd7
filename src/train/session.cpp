#include "normlab/train/session.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <signal.h>

#include <exception>
#include <filesystem>
#include <optional>

#include "normlab/dist/communicator.hpp"
#include "normlab/error.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/train/data_fingerprint.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/trainer.hpp"

namespace normlab::train {

int exit_code_for_signal(int signal_number) { return signal_number == SIGTERM ? kExitTerminated : kExitInterrupted; }

std::string stop_signal_name(int signal_number) {
  if (signal_number != SIGTERM) return "SIGINT";
  return io::stopped_by_sigusr1() ? "SIGUSR1" : "SIGTERM";
}

std::string resume_command(const std::string& dir, int ranks) {
  return ranks > 1 ? fmt::format("mpirun -np {} normlab train --resume {}", ranks, dir)
                   : fmt::format("normlab train --resume {}", dir);
}

namespace {

// "Nothing to do" (the run already finished): not an error, but agreed like one, so that every
// rank returns.
constexpr int kNothingToDo = -1;

// The run directory: --resume DIR, --out DIR, or runs/<config name>.
std::string choose_run_dir(const SessionOptions& options) {
  namespace fs = std::filesystem;
  const std::optional<std::string>& config_path = options.config_path;
  if (options.resume) {
    if (!options.resume_dir.empty() && !options.out.empty() && fs::path(options.resume_dir) != fs::path(options.out)) {
      throw InputError(
          fmt::format("--resume {} and --out {} name different directories", options.resume_dir, options.out));
    }
    std::string dir = !options.resume_dir.empty() ? options.resume_dir : options.out;
    if (dir.empty() && config_path) dir = (fs::path("runs") / fs::path(*config_path).stem()).string();
    if (dir.empty()) throw InputError("--resume: give the run directory (--resume DIR or --out DIR)");
    return dir;
  }
  if (!config_path) throw InputError("--config is required (or --resume DIR to continue a run)");
  return !options.out.empty() ? options.out : (fs::path("runs") / fs::path(*config_path).stem()).string();
}

// What a run needs before its first step; filled by build.
struct Setup {
  std::string dir;
  RunConfig config;
  std::unique_ptr<SessionLogger> logger;
  std::optional<Trainer> trainer;  // built, its run directory started or resumed
};

// Config, data and the model into setup; nothing is written. Returns 0 when the trainer is built,
// kNothingToDo with its line when the run already finished.
int build(const SessionOptions& options, const SessionLoggerFactory& make_logger, io::StopFlag stop, int ranks,
          Setup& setup, std::string& line) {
  if (!options.config_refusal.empty()) throw InputError(options.config_refusal);
  setup.dir = choose_run_dir(options);
  if (!options.resume) {
    setup.config = load_config(*options.config_path, options.overrides);
  } else {
    setup.config = resume_config(setup.dir, options.config_path, options.overrides);
    if (const std::optional<int64_t> done = finished_steps(setup.dir); done && *done >= setup.config.train.steps) {
      line = fmt::format(
          "normlab: {} already finished its {} steps; nothing to do. To train it further: {} --set "
          "train.steps=N (N > {})",
          setup.dir, *done, resume_command(setup.dir, ranks), *done);
      return kNothingToDo;
    }
    // The checkpoint must describe this run before a model of the requested size is built.
    check_resume_checkpoint(setup.dir, setup.config);
  }
  setup.logger = make_logger(setup.config);
  setup.trainer.emplace(setup.config, setup.logger.get(), stop);
  return 0;
}

// The run directory's lock (rank 0) and the checkpoint (every rank): a new run, or the resume.
int open_run(const SessionOptions& options, Setup& setup) {
  if (options.resume) {
    setup.trainer->resume(setup.dir, options.accept_changed_data);
  } else {
    setup.trainer->start(setup.dir);
  }
  return 0;
}

// Runs one step of the set-up. Returns its code (0 when it succeeded); otherwise the exit code
// with its one line in `line`, for every rank to agree on.
int guarded(const SessionOptions& options, const Setup& setup, std::string& line, const std::function<int()>& step) {
  try {
    return step();
  } catch (const io::StopRequested& stop) {
    line = fmt::format("normlab: stopped ({}) while loading the data; nothing was written",
                       stop_signal_name(stop.signal_number()));
    return exit_code_for_signal(stop.signal_number());
  } catch (const InputError& e) {
    // Rules that need the data (model.vocab_size against a vocabulary read from the training file)
    // are checked when the trainer is built, not with the file: name the file all the same.
    std::string message = e.what();
    const std::optional<std::string>& config_path = options.config_path;
    if ((message.rfind("model", 0) == 0 || message.rfind("task.", 0) == 0) && (options.resume || config_path)) {
      const std::string source = options.resume              ? RunPaths(setup.dir).config
                                 : options.overrides.empty() ? *config_path
                                                             : fmt::format("{} with --set {}", *config_path,
                                                                           fmt::join(options.overrides, " --set "));
      message = fmt::format("{}: {}", source, message);
    }
    line = fmt::format("normlab: error: {}", message);
    return kExitBadInput;
  } catch (const std::exception& e) {
    line = fmt::format("normlab: internal error: {}", e.what());
    return 1;
  }
}

// Every rank's outcome of one set-up step, agreed: nullopt when every rank succeeded, else how the
// session ends (the first failing rank's line and code).
std::optional<SessionResult> agree(dist::Communicator& comm, int code, const std::string& line, Setup& setup,
                                   const SessionResult& base) {
  const dist::Communicator::Verdict verdict = comm.agree(code, line);
  if (verdict.code == 0) return std::nullopt;
  if (setup.logger) setup.logger->end_line();
  SessionResult result = base;
  result.line = verdict.message;
  // Another rank's refusal: say which (its files may be on another machine).
  if (verdict.rank != 0 && result.line.rfind("normlab: ", 0) == 0)
    result.line.insert(9, fmt::format("data-parallel rank {}: ", verdict.rank));
  result.outcome = verdict.code == kNothingToDo ? SessionOutcome::nothing_to_do : SessionOutcome::refused;
  result.exit_code = verdict.code == kNothingToDo ? kExitOk : verdict.code;
  return result;
}

// Built first, then (data-parallel) the ranks compare what data they read, and only then is the
// run directory touched: a refusal at any of these steps leaves it as it was.
std::optional<SessionResult> set_up(const SessionOptions& options, const SessionLoggerFactory& make_logger,
                                    dist::Communicator& comm, io::StopFlag stop, Setup& setup,
                                    const SessionResult& base) {
  std::string line;
  const int built =
      guarded(options, setup, line, [&] { return build(options, make_logger, stop, comm.size(), setup, line); });
  if (std::optional<SessionResult> ended = agree(comm, built, line, setup, base)) return ended;
  if (comm.size() > 1) {
    // The same verdict on every rank (computed from gathered digests): no rank waits for another.
    const std::string disagreement = data_disagreement(comm, setup.trainer->data_files());
    line = disagreement.empty() ? "" : fmt::format("normlab: error: {}", disagreement);
    if (std::optional<SessionResult> ended = agree(comm, disagreement.empty() ? 0 : kExitBadInput, line, setup, base))
      return ended;
  }
  const int opened = guarded(options, setup, line, [&] { return open_run(options, setup); });
  return agree(comm, opened, line, setup, base);
}

// The run directory (a fresh run) and the residual block being trained: with --set model.norm=none
// nothing else would say which.
void announce(const SessionOptions& options, const Setup& setup, int ranks) {
  if (!options.resume)
    setup.logger->info(fmt::format("run directory: {}{}", setup.dir,
                                   ranks > 1 ? fmt::format(" ({} data-parallel ranks)", ranks) : ""));
  const ModelConfig& m = setup.config.model;
  const bool placement_moot = !nn::has_norm_layer(m.norm);
  setup.logger->info(
      fmt::format("block: {}{}", nn::block_formula(m.norm, m.placement, m.final_norm, m.residual),
                  placement_moot && m.placement == nn::Placement::post
                      ? fmt::format(" (model.placement=post has no effect with model.norm={})", m.norm.name())
                      : ""));
}

// Trainer::fit on every rank. data-parallel: an error on one rank cannot reach the others (they
// wait in the next reduction), so the whole job ends here, with this rank's line.
TrainSummary fit(Setup& setup, dist::Communicator& comm) {
  try {
    return setup.trainer->fit();
  } catch (const std::exception& e) {
    if (comm.size() == 1) throw;
    setup.logger->end_line();
    const bool input = dynamic_cast<const InputError*>(&e) != nullptr;
    setup.logger->error(fmt::format("normlab: {}data-parallel rank {}: {}",
                                    input ? "error: " : "internal error: ", comm.rank(), e.what()));
    comm.abort_all(input ? kExitBadInput : 1);
    throw;
  }
}

}  // namespace

SessionResult run_session(const SessionOptions& options, const SessionLoggerFactory& make_logger,
                          dist::Communicator& comm, io::StopFlag stop) {
  SessionResult result;
  result.report = comm.rank() == 0;  // data-parallel: rank 0 reports
  result.ranks = comm.size();
  Setup setup;
  if (std::optional<SessionResult> ended = set_up(options, make_logger, comm, stop, setup, result)) {
    ended->dir = setup.dir;
    return *ended;
  }
  result.dir = setup.dir;
  if (result.report) announce(options, setup, comm.size());
  result.summary = fit(setup, comm);
  setup.logger->end_line();
  // How training ended: a stop (checkpointed), divergence, or every step.
  if (result.summary.interrupted()) {
    result.outcome = SessionOutcome::interrupted;
    result.exit_code = exit_code_for_signal(result.summary.stop_request);
  } else if (result.summary.diverged) {
    result.outcome = SessionOutcome::diverged;
    result.exit_code = kExitDiverged;
  } else {
    result.outcome = SessionOutcome::finished;
    result.exit_code = kExitOk;
  }
  return result;
}

}  // namespace normlab::train
