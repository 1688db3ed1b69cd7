// Where a compare's time went (scheduler.hpp: CompareTiming): the runs' own records (summary.json
// "timing") summed, and what only the compare sees of their processes (wait4).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "normlab/error.hpp"
#include "scheduler_parts.hpp"

namespace normlab::study {

namespace scheduler_parts {

double self_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

namespace {

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

}  // namespace

void add_runs(CompareTiming& timing, const fs::path& out, const PassTotals& totals) {
  double child_wall = 0.0;
  for (const ChildRecord& child : totals.children) {
    child_wall += child.wall_s;
    std::optional<train::PartTimes> parts;
    if (child.code == kExitOk || child.code == kExitDiverged)
      parts = run_timing(out / "runs" / child.name);
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
  // A refill's plan read is the compare's own work (the rest of the slots' time), not an idle slot.
  timing.idle_s = std::max(0.0, totals.busy_slot_s - child_wall - totals.refill_slot_s);
}

}  // namespace scheduler_parts

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
                          {"process start and exit (launch, summary.json, exit)", process_wall_s, process_cpu_s}};
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

}  // namespace normlab::study
