// Tests for the training session as one library call (train/session.hpp), without the command
// line: what it returns for a finished run, a finished run resumed, a bad override, the caller's
// refusal of the config, a stop before the first step and another rank's refusal; what it logs.
#include <doctest/doctest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "normlab/dist/communicator.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/run_dir.hpp"
#include "normlab/train/session.hpp"

#include "support.hpp"

using normlab::test::read_text;
using normlab::test::TempDir;
using namespace normlab;
using namespace normlab::train;

namespace {

// What the session said through its loggers (one per call).
struct Heard {
  std::vector<std::string> info, errors;
  int steps = 0;
  int loggers = 0;
};

class CapturingLogger : public SessionLogger {
 public:
  explicit CapturingLogger(Heard& heard) : heard_(heard) {}
  void info(const std::string& message) override { heard_.info.push_back(message); }
  void step(const StepRecord&, int64_t) override { ++heard_.steps; }
  void error(const std::string& line) override { heard_.errors.push_back(line); }

 private:
  Heard& heard_;
};

SessionLoggerFactory capture(Heard& heard) {
  return [&heard](const RunConfig&) {
    ++heard.loggers;
    return std::make_unique<CapturingLogger>(heard);
  };
}

SessionOptions new_run(const std::string& config, const std::string& out) {
  SessionOptions options;
  options.config_path = config;
  options.out = out;
  return options;
}

// Rank 0 of two whose peer (rank 1) refuses the first set-up step: agree() returns its verdict.
class PeerRefuses : public dist::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void sum(std::span<double>) override {}
  std::vector<uint64_t> all_gather(uint64_t value) override { return {value, value}; }
  std::string describe() const override { return "two ranks (test)"; }
  Verdict agree(int code, const std::string& message) override {
    ++agreements;
    if (code != 0) return {code, 0, message};
    return {kExitBadInput, 1, "normlab: error: /elsewhere/train.jsonl: cannot read"};
  }
  int agreements = 0;
};

}  // namespace

TEST_CASE("train session: a new run finishes - the same run resumed has nothing to do") {
  TempDir dir("normlab_session");
  const std::string config = dir.write("tiny.json", normlab::test::kTwoStepRun);
  const std::string run = dir.sub("run");
  dist::SingleProcess comm;
  Heard heard;
  const SessionResult trained = run_session(new_run(config, run), capture(heard), comm, nullptr);
  CHECK(trained.outcome == SessionOutcome::finished);
  CHECK(trained.exit_code == kExitOk);
  CHECK(trained.dir == run);
  CHECK(trained.report);
  CHECK(trained.ranks == 1);
  CHECK(trained.summary.steps == 2);
  CHECK(trained.summary.planned_steps == 2);
  CHECK(heard.steps == 2);
  REQUIRE(heard.info.size() >= 2);
  CHECK(heard.info[0] == "run directory: " + run);
  CHECK(heard.info[1] == "block: x = x + f(LN(x)) (pre-norm, final LN after the stack)");
  CHECK(std::filesystem::exists(RunPaths(run).summary));

  const std::string metrics = read_text(RunPaths(run).metrics);
  SessionOptions resume;
  resume.resume = true;
  resume.resume_dir = run;
  Heard again;
  const SessionResult nothing = run_session(resume, capture(again), comm, nullptr);
  CHECK(nothing.outcome == SessionOutcome::nothing_to_do);
  CHECK(nothing.exit_code == kExitOk);
  CHECK(nothing.dir == run);
  CHECK(nothing.line == "normlab: " + run + " already finished its 2 steps; nothing to do. To train it further: " +
                            "normlab train --resume " + run + " --set train.steps=N (N > 2)");
  CHECK(again.loggers == 0);  // decided before anything was built
  CHECK(read_text(RunPaths(run).metrics) == metrics);
}

TEST_CASE("train session: a bad override is refused with exit 2 and a line naming it - nothing is written") {
  TempDir dir("normlab_session");
  const std::string config = dir.write("tiny.json", normlab::test::kTwoStepRun);
  const std::string run = dir.sub("run");
  SessionOptions options = new_run(config, run);
  options.overrides = {"train.steps=0"};
  dist::SingleProcess comm;
  Heard heard;
  const SessionResult refused = run_session(options, capture(heard), comm, nullptr);
  CHECK(refused.outcome == SessionOutcome::refused);
  CHECK(refused.exit_code == kExitBadInput);
  CHECK(refused.line ==
        "normlab: error: --set train.steps=0: train.steps: must be an integer in [1, 100000000], got 0");
  CHECK(refused.dir == run);
  CHECK(heard.loggers == 0);
  CHECK_FALSE(std::filesystem::exists(run));
}

TEST_CASE("train session: the caller's refusal of the config comes back as the agreed line, before any file") {
  TempDir dir("normlab_session");
  SessionOptions options = new_run(dir.sub("missing.json"), dir.sub("run"));
  options.config_refusal = "compare.json: is a compare config";
  dist::SingleProcess comm;
  Heard heard;
  const SessionResult refused = run_session(options, capture(heard), comm, nullptr);
  CHECK(refused.outcome == SessionOutcome::refused);
  CHECK(refused.exit_code == kExitBadInput);
  CHECK(refused.line == "normlab: error: compare.json: is a compare config");
  CHECK(refused.dir.empty());  // refused before the run directory was named
  CHECK_FALSE(std::filesystem::exists(dir.sub("run")));
}

TEST_CASE("train session: without --config or --resume it asks for one") {
  dist::SingleProcess comm;
  Heard heard;
  const SessionResult refused = run_session(SessionOptions{}, capture(heard), comm, nullptr);
  CHECK(refused.outcome == SessionOutcome::refused);
  CHECK(refused.exit_code == kExitBadInput);
  CHECK(refused.line == "normlab: error: --config is required (or --resume DIR to continue a run)");
}

TEST_CASE("train session: a stop requested before the first step ends while loading, exit 130, nothing written") {
  TempDir dir("normlab_session");
  const std::string config = dir.write("tiny.json", normlab::test::kTwoStepRun);
  const std::string run = dir.sub("run");
  dist::SingleProcess comm;
  const std::atomic<int> stop{SIGINT};
  Heard heard;
  const SessionResult stopped = run_session(new_run(config, run), capture(heard), comm, &stop);
  CHECK(stopped.outcome == SessionOutcome::refused);
  CHECK(stopped.exit_code == kExitInterrupted);
  CHECK(stopped.line == "normlab: stopped (SIGINT) while loading the data; nothing was written");
  CHECK(heard.steps == 0);
  CHECK_FALSE(std::filesystem::exists(run));
}

TEST_CASE("train session: another rank's refusal is every rank's result, named by its rank") {
  TempDir dir("normlab_session");
  const std::string config = dir.write("tiny.json", normlab::test::kTwoStepRun);
  const std::string run = dir.sub("run");
  PeerRefuses comm;
  Heard heard;
  const SessionResult refused = run_session(new_run(config, run), capture(heard), comm, nullptr);
  CHECK(comm.agreements == 1);  // the first set-up step's verdict ends it
  CHECK(refused.outcome == SessionOutcome::refused);
  CHECK(refused.exit_code == kExitBadInput);
  CHECK(refused.ranks == 2);
  CHECK(refused.line == "normlab: data-parallel rank 1: error: /elsewhere/train.jsonl: cannot read");
  CHECK_FALSE(std::filesystem::exists(run));  // the run directory is touched only after agreeing
  CHECK(resume_command(run, 2) == "mpirun -np 2 normlab train --resume " + run);
  CHECK(resume_command(run, 1) == "normlab train --resume " + run);
}
