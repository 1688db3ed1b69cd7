#pragma once
// `normlab train` as one call: a training session from the command's options to how the run ended,
// on one process or on every rank of a data-parallel launch (docs/scaling.md).
//
//   run directory (--resume DIR, --out DIR or runs/<config name>)
//   -> config (a new run's file, or the run's config.json for a resume) -> data and model
//   -> (N ranks) the ranks compare the data they read -> lock the run directory, start or resume
//   -> fit -> how it ended
//
// Every step before the first update can fail on one rank only, so its outcome is agreed
// (Communicator::agree): every rank returns the first failing rank's line and code, and nothing in
// the run directory is touched before the ranks agreed on the data. After that, an error on one
// rank ends the whole job (Communicator::abort_all) with that rank's line, since the others wait in
// the next reduction. The session never prints: its lines go to the SessionLogger the caller makes,
// and how the run ended comes back as a SessionResult for the caller to print.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "normlab/io/stop.hpp"
#include "normlab/train/records.hpp"

namespace normlab::dist {
class Communicator;
}

namespace normlab::train {

struct RunConfig;  // train/config.hpp

// The exit codes of normlab's commands; a session returns one of them.
inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitDiverged = 3;
// Stopped by SIGINT / SIGTERM (after checkpointing, or while loading): 128 + the signal, as a shell
// reports it.
inline constexpr int kExitInterrupted = 130;  // SIGINT
inline constexpr int kExitTerminated = 143;   // SIGTERM
// The exit code of a command stopped by a stop signal (io/stop.hpp): 143 for SIGTERM, else 130.
int exit_code_for_signal(int signal_number);

// "SIGINT", "SIGTERM" or "SIGUSR1" (a SIGUSR1 is recorded as SIGTERM: io::stopped_by_sigusr1).
std::string stop_signal_name(int signal_number);
// The command that continues the run in `dir` of `ranks` processes (another count is refused):
// "normlab train --resume DIR", or "mpirun -np N normlab train --resume DIR".
std::string resume_command(const std::string& dir, int ranks);

// What the session says besides the trainer's records.
class SessionLogger : public TrainLogger {
 public:
  // Ends a progress line left open (a terminal's redrawn bar) before the caller prints.
  virtual void end_line() {}
  // This rank's error, which must be out before the job is aborted (data-parallel).
  virtual void error(const std::string& line) { (void)line; }
};
// Makes the session's logger once the config is known (train.log_every).
using SessionLoggerFactory = std::function<std::unique_ptr<SessionLogger>(const RunConfig& config)>;

// `normlab train`'s options, as parsed.
struct SessionOptions {
  std::optional<std::string> config_path;  // --config
  std::string out;                         // --out ("": runs/<config name>)
  std::vector<std::string> overrides;      // --set section.key=value, in order
  bool resume = false;                     // --resume [DIR]
  std::string resume_dir;                  // --resume DIR ("": --out, or runs/<config name>)
  bool accept_changed_data = false;        // --accept-changed-data (with --resume)
  // Non-empty: the caller's refusal of config_path found while parsing (not a run config), raised
  // as the session's first set-up error so that every rank agrees on it.
  std::string config_refusal;
};

// How a session ended.
enum class SessionOutcome {
  refused,        // before anything was written: `line`, `exit_code` (2 bad input, 1 internal, 130/143 stopped)
  nothing_to_do,  // --resume of a run that already finished its steps: `line`, exit 0
  finished,       // all steps: `summary`, exit 0
  interrupted,    // a stop signal: checkpointed at `summary.steps`, exit 130 / 143
  diverged,       // a non-finite loss or gradient norm at summary.diverged_at_step, exit 3
};

struct SessionResult {
  SessionOutcome outcome = SessionOutcome::refused;
  int exit_code = kExitOk;
  std::string line;      // refused / nothing_to_do: the agreed line, "normlab: ..." (no newline)
  bool report = true;    // this rank reports the result (rank 0); the others print nothing
  int ranks = 1;         // processes of the launch
  std::string dir;       // the run directory (empty if refused before it was named)
  TrainSummary summary;  // finished, interrupted, diverged
};

// Runs `normlab train` with `options` on the ranks of `comm` (dist::world(); one process: rank 0
// of 1). `stop` is the flag the stop signals set (io::stop_flag()): loading stops with nothing
// written, training checkpoints and returns `interrupted`. Errors after the set-up: one process
// throws them (InputError, or any other exception for an internal error); N ranks print the
// failing rank's line through its logger and abort the job with exit 2 / 1.
SessionResult run_session(const SessionOptions& options, const SessionLoggerFactory& make_logger,
                          dist::Communicator& comm, io::StopFlag stop);

}  // namespace normlab::train
