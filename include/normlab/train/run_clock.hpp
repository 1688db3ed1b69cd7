#pragma once
// Where a run's time goes: summary.json's "timing" (docs/run-directory.md). A session's time is
// cut into stretches, each charged to one part as wall time and as CPU time of the process, so
// the parts add up to the session from the process's start to the summary:
//
//   setup        process start (static initialization) to the first step: config, data, model,
//                run directory
//   steps        training steps (the batch, forward, backward, update) and the loop around them
//   diagnostics  what a diagnostics step computes beyond a plain step (attention statistics, per-layer
//                gradient norms, update ratios)
//   evaluation   held-out evaluations
//   checkpoints  checkpoint.safetensors and best.safetensors
//   logs         metrics.jsonl lines and the log
//   finish       after the last step's checkpoint, before summary.json
//
// What happens before static initialization (exec, loading the shared libraries; for a run that
// compare forks, the fork) and after the summary (exit) is outside; `normlab compare` measures it
// from outside (study/scheduler.hpp).
#include <array>
#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace normlab::train {

enum class RunPart { setup, steps, diagnostics, evaluation, checkpoints, logs, finish };
inline constexpr size_t kRunParts = 7;
const char* to_string(RunPart part);

// Seconds per part, wall and CPU (CLOCK_PROCESS_CPUTIME_ID: every thread of the process).
struct PartTimes {
  std::array<double, kRunParts> wall_s{}, cpu_s{};
  double& wall(RunPart p) { return wall_s[size_t(p)]; }
  double& cpu(RunPart p) { return cpu_s[size_t(p)]; }
  double wall_total() const;
  double cpu_total() const;
  PartTimes& operator+=(const PartTimes& other);
};

// {"wall_s": {"setup": ..., ...}, "cpu_s": {...}}; from_json throws InputError naming `where`.
nlohmann::json to_json(const PartTimes& times);
PartTimes part_times_from_json(const nlohmann::json& j, const std::string& where);

// A process forked to train without exec (compare's runs, study/scheduler.hpp) starts its first
// clock here, at the fork, not at its parent's static initialization.
void restart_process_clock();

class RunClock {
 public:
  // Marks the process's start for the first clock of a process (a `normlab train`), now for any
  // later one (tests and benchmarks build several trainers in one process).
  RunClock();
  // The time since the last charge (or the start) goes to `part`.
  void charge(RunPart part);
  const PartTimes& session() const { return session_; }
  // Sessions before a resume (from the checkpoint), added to this one in total().
  void set_previous(const PartTimes& times, int sessions) { previous_ = times, previous_sessions_ = sessions; }
  PartTimes total() const;
  int sessions() const { return previous_sessions_ + 1; }
  // summary.json's "timing": the sum over sessions; with more than one, "last_session" as well.
  nlohmann::json summary_json() const;
  // The checkpoint's record: the sum so far and the number of sessions.
  nlohmann::json state_json() const;
  // A checkpoint's record back (InputError naming `where`); a checkpoint without one: nothing.
  void restore(const nlohmann::json& state, const std::string& where);

 private:
  struct Mark {
    std::chrono::steady_clock::time_point wall;
    double cpu_s = 0.0;
    static Mark now();
  };
  Mark mark_;
  PartTimes session_, previous_;
  int previous_sessions_ = 0;
};

}  // namespace normlab::train
