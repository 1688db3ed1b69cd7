// One drawing of the live page's data: which runs the report may read whole (a budget of bytes, no
// over-long line), the plan of them (a compare directory's as compare plans it), one bad run set
// aside so that it cannot take the others' report down, and every run's row.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "live_parts.hpp"
#include "normlab/error.hpp"
#include "normlab/study/compare_dir.hpp"
#include "normlab/study/run_dirs.hpp"

namespace normlab::serve::live_parts {

namespace fs = std::filesystem;

Admission Admitter::operator()(const std::string& run_dir) {
  if (auto it = admitted_.find(run_dir); it != admitted_.end()) return it->second;
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  const uint64_t size = file_size(path);
  Admission a;
  if (size > budget_) {
    a.reason = fmt::format(
        "its metrics.jsonl ({:.1f} MB) is past what the live report reads ({:.0f} MB for all runs): "
        "left out of the report, its row and charts follow it; `normlab report` draws it",
        double(size) / 1e6, total_ / 1e6);
  } else if (std::string problem = checked_long_line(path); !problem.empty()) {
    a = {problem, true};
  } else {
    budget_ -= size;
  }
  return admitted_[run_dir] = a;
}

std::string Admitter::checked_long_line(const std::string& path) {
  const std::string stamp = file_stamp(path);
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    if (auto it = checks_.find(path); it != checks_.end() && it->second.first == stamp) return it->second.second;
  }
  std::string problem = long_line(path);
  const std::lock_guard<std::mutex> guard(mutex_);
  checks_[path] = {stamp, problem};
  return problem;
}

void Admitter::forget_unasked() {
  const std::lock_guard<std::mutex> guard(mutex_);
  for (auto it = checks_.begin(); it != checks_.end();)
    it = admitted_.count(fs::path(it->first).parent_path().string()) ? std::next(it) : checks_.erase(it);
}

namespace {

// Run directories by why their rows say they were not read: directory -> reason.
struct Reasons {
  std::map<std::string, std::string> unreadable;  // the directory or a file of it does not open
  std::map<std::string, std::string> refused;     // the report refuses its config or files: an error
  std::map<std::string, std::string> left_out;    // not admitted to the report (over the budget)
};

// The report's plan and every started run's results. `problem` says why there is no plan at all.
struct Planned {
  study::ComparePlan plan;
  std::map<std::string, study::RunResult> results;  // by run directory
  std::string problem;
};

// A run whose config or files are refused is set aside in `reasons.refused` and the rest are
// planned again without it. A compare output directory is planned as compare plans it (its names,
// settings and grid).
Planned plan_and_read(const std::string& dir, bool compare, std::vector<std::string> dirs, Reasons& reasons,
                      const Admit& admit) {
  Planned out;
  std::string reason;
  while (!dirs.empty()) {
    std::string refused_dir;
    reason.clear();
    try {
      out.plan = compare ? study::plan_from_compare_dir(dir, dirs) : study::plan_from_run_dirs(dirs, {});
      out.results.clear();
      for (const study::RunSpec& spec : out.plan.runs) {
        if (!std::count(dirs.begin(), dirs.end(), spec.dir)) continue;  // planned, not started
        refused_dir = spec.dir;
        if (const Admission a = admit(spec.dir); !a.reason.empty()) {
          if (a.error) throw InputError(a.reason);
          reasons.left_out[spec.dir] = a.reason;
          continue;
        }
        study::RunResult r = study::read_run(spec, spec.dir);
        // An unfinished run has no summary.json to say its thread count yet: its config does.
        if (r.threads == 0) r.threads = spec.config.train.threads;
        out.results[spec.dir] = std::move(r);
      }
      return out;
    } catch (const InputError& e) {
      reason = e.what();
    }
    // A refused config names its run's directory; a refused metrics/summary file is the run being read.
    const auto named = std::find_if(dirs.begin(), dirs.end(),
                                    [&](const std::string& d) { return reason.find(d + "/") != std::string::npos; });
    if (named != dirs.end()) refused_dir = *named;
    if (refused_dir.empty() || !std::count(dirs.begin(), dirs.end(), refused_dir)) break;  // not one run's fault
    reasons.refused[refused_dir] = reason;
    reasons.left_out.erase(refused_dir);
    dirs.erase(std::find(dirs.begin(), dirs.end(), refused_dir));
  }
  out.plan = {};
  out.results.clear();
  // No plan of them all (runs of different tasks, say): `report` refuses them with this reason.
  out.problem = dirs.empty() ? "no run has a readable config.json yet" : reason;
  return out;
}

// No plan holds them all: each run is still read on its own, so its row shows its real state
// (the page says why there is no report).
struct Alone {
  std::map<std::string, study::RunResult> results;  // by run directory
  std::vector<study::RunSpec> specs;                // for the rows' columns only
};

Alone read_alone(const std::vector<std::string>& with_config, Reasons& reasons, const Admit& admit) {
  Alone alone;
  for (const std::string& d : with_config) {
    if (reasons.refused.count(d)) continue;
    try {
      study::ComparePlan own = study::plan_from_run_dirs({d}, {});
      if (own.runs.empty()) continue;
      alone.specs.push_back(own.runs.front());
      if (const Admission a = admit(d); !a.reason.empty()) {
        (a.error ? reasons.refused : reasons.left_out)[d] = a.reason;
        continue;
      }
      alone.results[d] = study::read_run(own.runs.front(), d);
    } catch (const InputError& e) {
      reasons.refused[d] = e.what();
    }
  }
  return alone;
}

// What a run directory's row is drawn from.
struct RowSources {
  const std::map<std::string, study::RunResult>& planned;       // read whole, by run directory
  const std::map<std::string, study::RunResult>& alone;         // read on its own, by run directory
  const std::map<std::string, const study::RunSpec*>& spec_of;  // run name -> its spec in the plan
  const Reasons& reasons;
  const FlockSet& held;
  const RowFromReader& row_from_reader;
};

// A run directory's state and figures: from the report's reading of it, or from its metrics reader
// when the report leaves it out; unreadable or an error whatever it logged when it is either.
RunStatus row_of(const std::string& d, const RowSources& from) {
  const std::string name = fs::path(d).filename().string();
  static const study::RunResult not_read;
  const auto found = from.planned.find(d);
  const auto found_alone = from.alone.find(d);
  const study::RunResult& r = found != from.planned.end()       ? found->second
                              : found_alone != from.alone.end() ? found_alone->second
                                                                : not_read;
  RunStatus st = status_of(r, lock_held(d, from.held));
  if (const auto left_out = from.reasons.left_out.find(d); left_out != from.reasons.left_out.end()) {
    st = from.row_from_reader(d, lock_held(d, from.held));
    if (const auto spec = from.spec_of.find(name); spec != from.spec_of.end()) {
      fill_from_spec(st, *spec->second);
      st.total_steps = spec->second->config.train.steps;
    }
    if (st.problem.empty()) st.problem = left_out->second;
  } else {
    fill_from_result(st, r);
  }
  st.name = name;
  for (const auto& [reasons, state] :
       {std::pair{&from.reasons.unreadable, RunState::unreadable}, std::pair{&from.reasons.refused, RunState::error}})
    if (auto it = reasons->find(d); it != reasons->end()) st.state = state, st.problem = it->second, st.step = 0;
  return st;
}

// The report of the runs read whole (in plan order), and their runs.csv; a report the study refuses
// leaves its reason as the page's problem.
void add_report(Drawn& out, Planned& planned) {
  auto results = std::make_shared<std::vector<study::RunResult>>();
  for (const study::RunSpec& spec : planned.plan.runs)
    if (auto it = planned.results.find(spec.dir); it != planned.results.end())
      results->push_back(std::move(it->second));
  try {
    out.report = live_report(planned.plan, *results, out.runs);
    out.runs_csv = study::runs_csv(planned.plan, *results);
    out.results = results;
  } catch (const InputError& e) {
    out.problem = e.what();
  }
}

}  // namespace

Drawn draw(const std::string& dir, const Layout& layout, const FlockSet& held, FirstSeen& first_seen,
           const Admit& admit, const RowFromReader& row_from_reader) {
  Drawn out;
  Reasons reasons;
  std::vector<std::string> with_config;
  for (const std::string& d : layout.run_dirs) {
    std::error_code ec;
    if (std::string why = unreadable_run(d); !why.empty()) reasons.unreadable[d] = why;
    else if (fs::exists(fs::path(d) / "config.json", ec)) with_config.push_back(d);
  }
  Planned planned = plan_and_read(dir, layout.compare, with_config, reasons, admit);
  out.problem = with_config.empty() ? "no run has written its config.json yet" : planned.problem;
  Alone alone;
  if (planned.plan.runs.empty() && !planned.problem.empty()) alone = read_alone(with_config, reasons, admit);
  for (const study::RunSpec& spec : alone.specs) planned.plan.runs.push_back(spec);
  std::map<std::string, const study::RunSpec*> spec_of;
  for (const study::RunSpec& spec : planned.plan.runs) spec_of[fs::path(spec.dir).filename().string()] = &spec;
  const RowSources from{planned.results, alone.results, spec_of, reasons, held, row_from_reader};
  std::set<std::string> names;
  for (const std::string& d : layout.run_dirs) {
    RunStatus st = row_of(d, from);
    st.eta_s = eta_of(st, d, first_seen);
    st.path = fs::path(d).lexically_relative(dir).string();
    st.version = file_stamp(fs::path(d) / "metrics.jsonl");
    names.insert(st.name);
    out.runs.push_back(std::move(st));
  }
  for (const std::string& name : layout.planned)
    if (!names.count(name)) {
      const auto spec = spec_of.find(name);
      out.runs.push_back(queued_run(name, spec != spec_of.end() ? spec->second : nullptr));
      out.runs.back().path = (fs::path("runs") / name).string();
    }
  std::sort(out.runs.begin(), out.runs.end(), [](const RunStatus& a, const RunStatus& b) {
    return std::pair(state_order(a.state), a.name) < std::pair(state_order(b.state), b.name);
  });
  if (planned.results.empty()) return out;
  planned.plan.runs.resize(planned.plan.runs.size() - alone.specs.size());
  add_report(out, planned);
  return out;
}

}  // namespace normlab::serve::live_parts
