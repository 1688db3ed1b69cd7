// The report while runs are unfinished: `normlab report`'s sections judged on the finished runs
// only (all of them when none has finished yet, with an Answer that judges nothing), its Answer
// saying which runs are not in it yet and, before any run finishes, what the evaluations say so far.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "live_parts.hpp"

namespace normlab::serve::live_parts {

namespace {

// "a (running, step 120 of 400), b (queued) and 7 more": the runs not judged yet.
std::string unfinished_list(const std::vector<const RunStatus*>& unfinished) {
  std::string list;
  const size_t shown = std::min<size_t>(unfinished.size(), 4);
  for (size_t i = 0; i < shown; ++i) {
    const RunStatus& r = *unfinished[i];
    const std::string step =
        r.step > 0 ? fmt::format(", step {}{}", r.step, r.total_steps > 0 ? fmt::format(" of {}", r.total_steps) : "")
                   : "";
    list += fmt::format("{}{} ({}{})",
                        i == 0                                         ? ""
                        : i + 1 == shown && shown == unfinished.size() ? " and "
                                                                       : ", ",
                        r.name, state_name(r.state), step);
  }
  if (unfinished.size() > shown) list += fmt::format(" and {} more", unfinished.size() - shown);
  return list;
}

// No run has finished: what the evaluations say so far, per series, without judging anything:
// the median over its runs of the last held-out accuracy on trained lengths.
std::string so_far(const study::ComparePlan& plan, const std::vector<study::RunResult>& results) {
  int64_t at = 0;
  std::string parts;
  for (const std::string& variant : plan.variants) {
    std::vector<double> last;
    for (const study::RunResult& r : results)
      if (r.spec.variant == variant && !r.evals.empty() && std::isfinite(r.evals.back().trained.accuracy)) {
        last.push_back(r.evals.back().trained.accuracy);
        at = std::max(at, r.evals.back().step);
      }
    if (last.empty()) continue;
    std::sort(last.begin(), last.end());
    const double median =
        last.size() % 2 ? last[last.size() / 2] : 0.5 * (last[last.size() / 2 - 1] + last[last.size() / 2]);
    parts += fmt::format("{}{} {:.2f} ({} run{})", parts.empty() ? "" : "; ", variant, median, last.size(),
                         last.size() > 1 ? "s" : "");
  }
  if (parts.empty()) return "No run has been evaluated yet.";
  return fmt::format(
      "So far, at step {}: held-out accuracy on trained lengths at each run's last evaluation "
      "(median over runs) — {}. Nothing is judged before a run finishes.",
      at, parts);
}

}  // namespace

study::ReportModel live_report(const study::ComparePlan& plan, std::vector<study::RunResult>& results,
                               const std::vector<RunStatus>& runs) {
  std::vector<const RunStatus*> unfinished;
  for (const RunStatus& r : runs)
    if (!judged(r.state)) unfinished.push_back(&r);
  if (unfinished.empty()) return study::build_report(plan, results);
  std::vector<study::RunResult> finished;
  std::vector<size_t> finished_at;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].finished || results[i].diverged) finished_at.push_back(i), finished.push_back(std::move(results[i]));
  study::ReportModel report = study::build_report(plan, finished.empty() ? results : finished);
  for (size_t k = 0; k < finished.size(); ++k) results[finished_at[k]] = std::move(finished[k]);
  for (study::ReportSection& sec : report.sections) {
    if (sec.title == "Answer" && finished.empty())
      sec.bullets = {fmt::format("No run has finished yet ({} unfinished: {}).", unfinished.size(),
                                 unfinished_list(unfinished)),
                     so_far(plan, results)};
    else if (sec.title == "Answer")
      sec.bullets
          .insert(sec.bullets.begin(),
                  fmt::format("So far {} of {} runs {} finished; this Answer, the Findings and the Summary judge "
                              "{} only. Not yet judged: {}.",
                              finished.size(), runs.size(), finished.size() == 1 ? "has" : "have",
                              finished.size() == 1 ? "that run" : "those", unfinished_list(unfinished)));
    else if (sec.title == "Findings" && finished.empty()) sec.bullets = {"The Findings wait for a finished run."};
  }
  return report;
}

}  // namespace normlab::serve::live_parts
