// The compare scheduler (scheduler.hpp): the flags, the plan's bookkeeping (changed runs, the
// runs' locks, the queue), the passes of a learning-rate search and the report. The runs as child
// processes are scheduler_children.cpp; where the time went, compare_timing.cpp.
#include "normlab/study/scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/io/paths.hpp"
#include "normlab/study/compare_dir.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "scheduler_parts.hpp"

namespace normlab::study {

namespace {

namespace fs = std::filesystem;
using scheduler_parts::add_runs;
using scheduler_parts::ChildRecord;
using scheduler_parts::PassTotals;
using scheduler_parts::RunLauncher;
using scheduler_parts::RunWatcher;
using scheduler_parts::self_cpu_seconds;
using scheduler_parts::self_exe;
using train::kExitDiverged;
using train::kExitOk;

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
// its config file and a place in the queue (by index). Runs named in `skip` (crashed or failed in
// an earlier pass, or being trained now) are left alone.
std::deque<size_t> queue_runs(const ComparePlan& plan, const fs::path& out, const CompareOptions& options,
                              const Shard& shard, const std::set<std::string>& skip, int& already_done) {
  std::error_code ec;
  std::deque<size_t> queue;
  std::vector<std::pair<std::string, std::string>> configs;  // path, text
  for (size_t i = 0; i < plan.runs.size() && !options.report_only; ++i) {
    if (shard && !in_shard(plan, i, shard->first, shard->second)) continue;
    const RunSpec& run = plan.runs[i];
    if (skip.count(run.name)) continue;  // a crashed or failed one is retried by a rerun
    const fs::path dir = out / "runs" / run.name;
    if (fs::exists(dir / "summary.json")) {
      ++already_done;
      continue;
    }
    if (fs::exists(dir) && !fs::exists(dir / "checkpoint.safetensors")) fs::remove_all(dir, ec);  // nothing to resume
    configs.emplace_back((out / "configs" / (run.name + ".json")).string(), run.config_file.dump(2) + "\n");
    queue.push_back(i);
  }
  // The queue's configs in group commits (each file written whole as before): two journal commits
  // per 64 files, each file open until its group commits, instead of two per run while every slot
  // waits (the demo's round 0 is 160 runs).
  constexpr size_t kGroup = 64;
  for (size_t first = 0; first < configs.size(); first += kGroup) {
    std::vector<io::NamedText> files;
    for (size_t k = first; k < std::min(configs.size(), first + kGroup); ++k)
      files.push_back({configs[k].first, configs[k].second});
    io::write_files_atomic(files);
  }
  return queue;
}

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

// Trains what the plan still needs in passes: a grid in one; a search pass by pass, the plan read
// again after each, until no round adds a run this process trains. Returns the final plan.
ComparePlan train_passes(ComparePlan plan, const CompareOptions& options, const Shard& shard, PassTotals& totals,
                         RunLauncher& launcher, CompareLogger& logger, io::StopFlag stop) {
  const fs::path out(options.out);
  std::vector<io::DirLock> run_locks;
  std::set<std::string> locked;
  const int jobs = options.jobs > 0 ? options.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
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
    // A search's next rounds as soon as a slot is free and the queue is empty: the plan read again
    // while the other slots still train, the runs they train skipped (they have no summary yet).
    // Indices into the new plan: the watcher holds `plan` by reference.
    const bool searching = plan.search.enabled() && !options.report_only;
    auto refill = [&]() -> std::deque<size_t> {
      plan = load_compare_plan(options.config, options.out);
      lock_runs(plan, out, shard, run_locks, locked);
      std::set<std::string> skip = totals.failed_runs;
      for (const ChildRecord& child : watcher.children())
        if (child.code != kExitOk && child.code != kExitDiverged) skip.insert(child.name);
      skip.merge(watcher.running_names());
      int finished = 0;
      std::deque<size_t> more = queue_runs(plan, out, options, shard, skip, finished);
      if (!more.empty()) logger.note(fmt::format("compare: search: the next round adds {} run(s) here", more.size()));
      return more;
    };
    watcher.run(std::move(queue), launcher, searching ? RunWatcher::Refill(refill) : RunWatcher::Refill{});
    if (!options.report_only) watcher.print_progress(true);
    totals.failed += watcher.failed();
    if (totals.bad_input.empty()) totals.bad_input = watcher.bad_input();
    totals.failures.insert(totals.failures.end(), watcher.failures().begin(), watcher.failures().end());
    for (const ChildRecord& child : watcher.children()) {
      totals.children.push_back(child);
      if (child.code != kExitOk && child.code != kExitDiverged) totals.failed_runs.insert(child.name);
    }
    totals.busy_slot_s += double(jobs) * watcher.busy_wall_s();
    totals.refill_slot_s += watcher.refill_slot_s();
    // A crashed run does not stop the search: the rounds that wait on it wait, the others go on.
    if (!searching || io::stop_signal(stop) != 0 || !totals.bad_input.empty()) break;
    // The watcher's last refill read the plan after the last run exited and found nothing to add
    // here: that plan is final (a shard may still wait for other shards' runs).
    if (watcher.refilled_empty() && !shard) break;
    plan = load_compare_plan(options.config, options.out);
  }
  return plan;
}

}  // namespace

CompareResult run_compare(const CompareOptions& options, CompareLogger& logger, io::StopFlag stop) {
  const auto started = std::chrono::steady_clock::now();
  const double cpu_before = self_cpu_seconds();
  const Shard shard = check_options(options);
  // Before the plan and the runs' records are read: the launcher is forked while compare is small.
  RunLauncher launcher(self_exe(), options.report_only ? TrainEntry{} : options.train_entry);
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
  plan = train_passes(std::move(plan), options, shard, totals, launcher, logger, stop);
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
  add_runs(timing, out, totals);
  return result;
}

}  // namespace normlab::study
