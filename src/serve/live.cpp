// The live report: which runs DIR holds and in what state, the report drawn from them (a compare
// directory's as compare draws it; while runs are unfinished, judged on the finished ones), the
// run table's data and each run's chart series, drawn again only when a run's files or lock
// changed. Everything here reads; nothing writes.
#include "normlab/io/atomic_file.hpp"
#include "normlab/serve/live.hpp"

#include <fmt/format.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "normlab/error.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/study/render.hpp"
#include "normlab/serve/page.hpp"
#include "normlab/serve/series.hpp"
#include "normlab/study/compare_dir.hpp"
#include "normlab/study/progress.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/study/svg.hpp"

namespace normlab::serve {

namespace fs = std::filesystem;
using nlohmann::json;

const char* state_name(RunState state) {
  switch (state) {
    case RunState::queued: return "queued";
    case RunState::running: return "running";
    case RunState::finished: return "finished";
    case RunState::diverged: return "diverged";
    case RunState::stopped: return "stopped";
    case RunState::unreadable: return "unreadable";
    case RunState::error: return "error";
  }
  return "?";
}

namespace {

enum class DirKind { run, compare, folder };

// The run directories under DIR, as `normlab report DIR` names them.
struct Layout {
  std::vector<std::string> run_dirs;  // every run directory found, sorted
  std::vector<std::string> planned;   // compare: run names with DIR/configs/NAME.json
  bool compare = false;
};

// A run directory holds one of these; a directory that cannot be searched might, and is listed so
// that its row can say why it cannot be read.
bool is_run_dir(const fs::path& dir) {
  for (const char* file : {"config.json", "metrics.jsonl", "checkpoint.safetensors", io::kDirLockFile}) {
    std::error_code ec;
    if (fs::exists(dir / file, ec) || ec) return true;
  }
  return false;
}

DirKind kind_of(const std::string& dir) {
  if (study::is_compare_dir(dir)) return DirKind::compare;
  return is_run_dir(dir) ? DirKind::run : DirKind::folder;
}

// True if `path` (after links) is inside `root` (canonical).
bool inside(const fs::path& root, const fs::path& path) {
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) return false;
  const fs::path rel = real.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

// The subdirectories of `parent` that are run directories and do not lead outside `root`.
std::vector<std::string> run_subdirs(const fs::path& root, const fs::path& parent) {
  return study::run_subdirectories(parent.string(),
                                   [&](const std::string& sub) { return inside(root, sub) && is_run_dir(sub); });
}

Layout scan(const std::string& dir) {
  const fs::path root = fs::canonical(dir);
  Layout layout;
  switch (kind_of(dir)) {
    case DirKind::run: layout.run_dirs = {dir}; break;
    case DirKind::folder: layout.run_dirs = run_subdirs(root, dir); break;
    case DirKind::compare: {
      layout.compare = true;
      layout.run_dirs = run_subdirs(root, fs::path(dir) / "runs");
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(fs::path(dir) / "configs", ec))
        if (entry.path().extension() == ".json") layout.planned.push_back(entry.path().stem().string());
      std::sort(layout.planned.begin(), layout.planned.end());
      break;
    }
  }
  return layout;
}

// The (device, inode) of every flock(2) held on this machine, from /proc/locks: whether a trainer
// holds its run's lock, learnt without touching the lock.
std::set<std::tuple<unsigned, unsigned, uint64_t>> held_flocks() {
  std::set<std::tuple<unsigned, unsigned, uint64_t>> held;
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    if (line.find("FLOCK") == std::string::npos || line.find("->") != std::string::npos) continue;
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      unsigned major_id = 0, minor_id = 0;
      unsigned long long inode = 0;
      if (std::count(word.begin(), word.end(), ':') == 2 &&
          std::sscanf(word.c_str(), "%x:%x:%llu", &major_id, &minor_id, &inode) == 3)
        held.insert({major_id, minor_id, uint64_t(inode)});
    }
  }
  return held;
}

bool lock_held(const fs::path& run_dir, const std::set<std::tuple<unsigned, unsigned, uint64_t>>& held) {
  struct stat st {};
  if (::stat((run_dir / io::kDirLockFile).c_str(), &st) != 0) return false;
  return held.count({major(st.st_dev), minor(st.st_dev), uint64_t(st.st_ino)}) > 0;
}

// "size:mtime:mode" of a file ("-" if absent): what the fingerprint compares.
std::string file_stamp(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "-";
  return fmt::format("{}:{}.{}:{:o}", st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_mode);  // mode: chmod
}

double mtime_s(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NAN;
  return double(st.st_mtim.tv_sec) + 1e-9 * double(st.st_mtim.tv_nsec);
}

// A diagnostics record as the page's per-layer chart reads it.
LayerDiagnostics layer_diagnostics(const study::Diagnostics& d) {
  LayerDiagnostics out;
  out.step = d.step;
  for (const auto& [name, values] :
       {std::pair{"attention_max_logit", &d.attention_max_logit},
        std::pair{"attention_entropy_mean", &d.attention_entropy_mean},
        std::pair{"attention_entropy_min", &d.attention_entropy_min}, std::pair{"update_ratio", &d.update_ratio},
        std::pair{"layer_grad_norms", &d.layer_grad_norms}})
    if (!values->empty()) out.layers[name] = *values;
  out.log_z_mean = d.log_z_mean;
  out.log_z_max_abs = d.log_z_max_abs;
  return out;
}

// A run's state and progress from what read_run found and whether its trainer holds the lock.
RunStatus status_of(const study::RunResult& r, bool running) {
  RunStatus st;
  if (!r.diagnostics.empty()) {
    st.first_diagnostics = layer_diagnostics(r.diagnostics.front());
    st.last_diagnostics = layer_diagnostics(r.diagnostics.back());
  }
  st.name = r.spec.name;
  st.step = r.steps.empty() ? 0 : int64_t(r.steps.back());
  if (r.diverged && r.diverged_at > st.step) st.step = r.diverged_at;
  st.total_steps = r.planned_steps;
  for (size_t i = r.loss.size(); i-- > 0;)
    if (std::isfinite(r.loss[i])) {
      st.last_loss = r.loss[i];
      break;
    }
  st.state = r.diverged                          ? RunState::diverged
             : r.finished                        ? RunState::finished
             : running                           ? RunState::running
             : st.step > 0 || r.evals.size() > 0 ? RunState::stopped
                                                 : RunState::queued;
  return st;
}

std::string format_eta(double seconds) {
  const std::string text = study::format_duration(seconds);
  return text == "?" ? "–" : text;
}

// The report's step charts (validation, training loss, gradient norm: every logged point as SVG,
// megabytes on a long run) are the interactive charts above the report on the live page.
bool step_chart(const std::string& name) {
  return name.rfind("valid-", 0) == 0 || name.rfind("train-loss", 0) == 0 || name.rfind("grad-norm", 0) == 0;
}

using FlockSet = std::set<std::tuple<unsigned, unsigned, uint64_t>>;
using FirstSeen = std::map<std::string, std::pair<int64_t, double>>;

// Seconds left at the rate seen since this server first saw the run (or, on the first look, since
// its config.json was written); NaN when there is no rate yet.
double eta_of(const RunStatus& st, const fs::path& run_dir, FirstSeen& first_seen) {
  if (st.state != RunState::running || st.total_steps <= st.step || st.step <= 0) return NAN;
  const double now = mtime_s(run_dir / "metrics.jsonl");
  auto [it, added] = first_seen.try_emplace(run_dir.string(), st.step, now);
  double rate = NAN;
  if (!added && st.step > it->second.first && now > it->second.second)
    rate = double(st.step - it->second.first) / (now - it->second.second);
  else if (const double started = mtime_s(run_dir / "config.json"); now > started)
    rate = double(st.step) / (now - started);
  return rate > 0 ? double(st.total_steps - st.step) / rate : NAN;
}

// The page's parts: every run's row, and the report of the runs that have a config.json.
struct Drawn {
  std::vector<RunStatus> runs;
  std::optional<study::ReportModel> report;
  std::string problem;  // why there is no report
  std::string runs_csv;
  std::shared_ptr<const std::vector<study::RunResult>> results;
};

// The table's columns that come from the plan: variant, hyperparameters.
void fill_from_spec(RunStatus& st, const study::RunSpec& spec) {
  st.variant = spec.variant;
  st.lr = spec.lr();
  st.layers = spec.layers();
  st.seed = int64_t(spec.seed());
  st.warmup = spec.warmup() ? 1 : 0;
  st.extra = spec.extra;
}

// ... and from the results: the best held-out evaluation on trained lengths, the wall time.
void fill_from_result(RunStatus& st, const study::RunResult& r) {
  fill_from_spec(st, r.spec);
  st.wall_time_s = r.wall_time_s;
  for (const study::EvalPoint& e : r.evals) {
    if (std::isfinite(e.trained.accuracy) && !(e.trained.accuracy <= st.best_accuracy))
      st.best_accuracy = e.trained.accuracy;
    if (std::isfinite(e.trained.loss) && !(e.trained.loss >= st.best_loss)) st.best_loss = e.trained.loss;
  }
}

// A planned run's row: queued, with its step count and hyperparameters from DIR/configs/NAME.json.
RunStatus queued_run(const std::string& name, const study::RunSpec* spec) {
  RunStatus st;
  st.name = name;
  if (spec == nullptr) return st;
  fill_from_spec(st, *spec);
  st.total_steps = spec->config.train.steps;
  return st;
}

// Why a run directory cannot be read ("" when it can): the directory itself, or a file of it that
// exists but does not open.
std::string unreadable_run(const fs::path& run_dir) {
  if (std::string why = cannot_read(run_dir.string()); !why.empty()) return why;
  for (const char* file : {"config.json", "metrics.jsonl", "summary.json"})
    if (std::string why = cannot_read((run_dir / file).string()); !why.empty()) return why;
  return "";
}

// The report's plan and every started run's results. A run whose config or files are refused is
// set aside in `refused` (dir -> reason) and the rest are planned again without it, so one bad run
// cannot take the others' report down. `problem` says why there is no plan at all. A compare
// output directory is planned as compare plans it (its names, settings and grid).
struct Planned {
  study::ComparePlan plan;
  std::map<std::string, study::RunResult> results;  // by run directory
  std::string problem;
};

// Whether the report may read a run whole: "" yes; else why not, and whether that makes the run an
// error (a line no record can be) or only leaves it out (over the budget).
struct Admission {
  std::string reason;
  bool error = false;
};
using Admit = std::function<Admission(const std::string& run_dir)>;

Planned plan_and_read(const std::string& dir, bool compare, std::vector<std::string> dirs,
                      std::map<std::string, std::string>& refused, std::map<std::string, std::string>& left_out,
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
          left_out[spec.dir] = a.reason;
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
    refused[refused_dir] = reason;
    left_out.erase(refused_dir);
    dirs.erase(std::find(dirs.begin(), dirs.end(), refused_dir));
  }
  out.plan = {};
  out.results.clear();
  // No plan of them all (runs of different tasks, say): `report` refuses them with this reason.
  out.problem = dirs.empty() ? "no run has a readable config.json yet" : reason;
  return out;
}

// The run table's default order: running runs first, then stopped, diverged, the unreadable, queued, finished; by name
// within.
int state_order(RunState s) {
  switch (s) {
    case RunState::running: return 0;
    case RunState::stopped: return 1;
    case RunState::diverged: return 2;
    case RunState::error: return 3;
    case RunState::unreadable: return 4;
    case RunState::queued: return 5;
    case RunState::finished: return 6;
  }
  return 7;
}

bool judged(RunState state) { return state == RunState::finished || state == RunState::diverged; }

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

// The report while runs are unfinished: judged on the finished runs only (all of them when none
// has finished yet, with an Answer that judges nothing), its Answer saying which runs are not in it.
// The finished runs are moved out of `results` and back (a long run's curves are not copied).
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

// The live page's report: its step charts drawn by the page's charts instead, and a footer whose
// links are the server's live tables.
std::string live_html(study::ReportModel report, const study::HtmlExtras& extras) {
  for (study::ReportSection& sec : report.sections) {
    const size_t before = sec.charts.size();
    sec.charts.erase(std::remove_if(sec.charts.begin(), sec.charts.end(),
                                    [](const auto& c) { return step_chart(c.first); }),
                     sec.charts.end());
    if (sec.charts.size() < before)
      sec.text +=
          (sec.text.empty() ? "" : " ") + std::string("(Live: these curves are in the Charts panel above, per run.)");
  }
  std::string html = study::render_html(report, extras);
  const std::string footer = "each chart as SVG in charts/. Tables as Markdown: report.md.";
  if (const size_t at = html.find(footer); at != std::string::npos)
    html.replace(at, footer.size(), "the report as Markdown: <a href=\"report.md\">report.md</a> (all three live).");
  return html;
}

using RowFromReader = std::function<RunStatus(const std::string& run_dir, bool running)>;

Drawn draw(const std::string& dir, const Layout& layout, const FlockSet& held, FirstSeen& first_seen,
           const Admit& admit, const RowFromReader& row_from_reader) {
  Drawn out;
  std::map<std::string, std::string> unreadable, refused, left_out;  // run directory -> reason
  std::vector<std::string> with_config;
  for (const std::string& d : layout.run_dirs) {
    std::error_code ec;
    if (std::string why = unreadable_run(d); !why.empty()) unreadable[d] = why;
    else if (fs::exists(fs::path(d) / "config.json", ec)) with_config.push_back(d);
  }
  Planned planned = plan_and_read(dir, layout.compare, with_config, refused, left_out, admit);
  out.problem = with_config.empty() ? "no run has written its config.json yet" : planned.problem;
  // No plan holds them all: each run is still read on its own, so its row shows its real state
  // (the page says why there is no report).
  std::map<std::string, study::RunResult> alone;
  std::vector<study::RunSpec> alone_specs;
  if (planned.plan.runs.empty() && !planned.problem.empty())
    for (const std::string& d : with_config) {
      if (refused.count(d)) continue;
      try {
        study::ComparePlan own = study::plan_from_run_dirs({d}, {});
        if (own.runs.empty()) continue;
        alone_specs.push_back(own.runs.front());
        if (const Admission a = admit(d); !a.reason.empty()) {
          (a.error ? refused : left_out)[d] = a.reason;
          continue;
        }
        alone[d] = study::read_run(own.runs.front(), d);
      } catch (const InputError& e) {
        refused[d] = e.what();
      }
    }
  for (const study::RunSpec& spec : alone_specs) planned.plan.runs.push_back(spec);  // for the rows' columns only
  std::map<std::string, const study::RunSpec*> spec_of;                              // run name -> its spec in the plan
  for (const study::RunSpec& spec : planned.plan.runs) spec_of[fs::path(spec.dir).filename().string()] = &spec;
  std::set<std::string> names;
  for (const std::string& d : layout.run_dirs) {
    const std::string name = fs::path(d).filename().string();
    static const study::RunResult not_read;
    const auto found = planned.results.find(d);
    const auto found_alone = alone.find(d);
    const study::RunResult& r = found != planned.results.end() ? found->second
                                : found_alone != alone.end()   ? found_alone->second
                                                               : not_read;
    RunStatus st = status_of(r, lock_held(d, held));
    if (left_out.count(d)) {
      st = row_from_reader(d, lock_held(d, held));
      if (spec_of.count(name)) {
        fill_from_spec(st, *spec_of[name]);
        st.total_steps = spec_of[name]->config.train.steps;
      }
      if (st.problem.empty()) st.problem = left_out[d];
    } else {
      fill_from_result(st, r);
    }
    st.name = name;
    for (const auto& [reasons, state] :
         {std::pair{&unreadable, RunState::unreadable}, std::pair{&refused, RunState::error}})
      if (auto it = reasons->find(d); it != reasons->end()) st.state = state, st.problem = it->second, st.step = 0;
    st.eta_s = eta_of(st, d, first_seen);
    st.path = fs::path(d).lexically_relative(dir).string();
    st.version = file_stamp(fs::path(d) / "metrics.jsonl");
    out.runs.push_back(st);
    names.insert(name);
  }
  for (const std::string& name : layout.planned)
    if (!names.count(name)) {
      out.runs.push_back(queued_run(name, spec_of.count(name) ? spec_of[name] : nullptr));
      out.runs.back().path = (fs::path("runs") / name).string();
    }
  std::sort(out.runs.begin(), out.runs.end(), [](const RunStatus& a, const RunStatus& b) {
    return std::pair(state_order(a.state), a.name) < std::pair(state_order(b.state), b.name);
  });
  if (planned.results.empty()) return out;
  planned.plan.runs.resize(planned.plan.runs.size() - alone_specs.size());
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
  return out;
}

// "6/20 runs done (1 diverged), 2 running, 12 queued, ETA 3m05s": compare's console line, from the
// run table. The ETA is compare's: a finished run's mean wall time x the runs left / runs at once.
std::string progress_line(const std::vector<RunStatus>& runs) {
  size_t done = 0, diverged = 0, running = 0, queued = 0, stopped = 0, with_time = 0;
  double busy = 0;
  for (const RunStatus& r : runs) {
    done += judged(r.state);
    diverged += r.state == RunState::diverged;
    running += r.state == RunState::running;
    queued += r.state == RunState::queued;
    stopped += r.state == RunState::stopped;
    if (judged(r.state) && std::isfinite(r.wall_time_s)) busy += r.wall_time_s, ++with_time;
  }
  const double eta =
      running == 0 ? NAN : study::study_eta_seconds(busy, with_time, with_time + runs.size() - done, running);
  return fmt::format("{}/{} runs done ({} diverged), {} running, {} queued{}, ETA {}", done, runs.size(), diverged,
                     running, queued, stopped ? fmt::format(", {} stopped", stopped) : "",
                     done == runs.size() ? "–" : study::format_duration(eta));
}

// The run table's rows as the server draws them (the page's script draws the same, and sorts).
std::string rows_html(const std::vector<RunStatus>& runs) {
  auto number = [](double v) { return std::isfinite(v) ? fmt::format("{:.4g}", v) : "–"; };
  std::string html;
  for (const RunStatus& r : runs) {
    const std::string step = r.total_steps > 0 ? fmt::format("{} / {}", r.step, r.total_steps) : std::to_string(r.step);
    std::string extra;
    for (const auto& [key, value] : r.extra) extra += "<td>" + study::xml_escape(value) + "</td>";
    html += fmt::format(
        "<tr class=\"serve-{0}\" data-state=\"{0}\" data-run=\"{1}\"><td></td><td>{1}</td><td>{2}</td><td>{0}{3}</td>"
        "<td>{4}</td><td>{5}</td><td>{6}</td><td>{7}</td><td>{8}</td><td>{9}</td><td>{10}</td><td>{11}</td><td>{12}</"
        "td>{13}"
        "<td></td></tr>\n",
        state_name(r.state), study::xml_escape(r.name), study::xml_escape(r.variant),
        r.problem.empty() ? "" : " (" + study::xml_escape(r.problem) + ")", step,
        r.state == RunState::running ? format_eta(r.eta_s) : "–", number(r.last_loss), number(r.best_accuracy),
        number(r.best_loss), number(r.lr), r.layers > 0 ? std::to_string(r.layers) : "–",
        r.warmup < 0 ? "–"
        : r.warmup   ? "on"
                     : "off",
        r.seed < 0 ? "–" : std::to_string(r.seed), extra);
  }
  return html;
}

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A figure in 4 significant digits (the page draws them; a run's 12 layers x 5 figures x 2 records
// stay a few hundred bytes), null when not finite.
json short_number(double v) { return std::isfinite(v) ? json(std::stod(fmt::format("{:.4g}", v))) : json(nullptr); }

// {"step": N, "attention_max_logit": [...], ..., "log_z_mean": x, "log_z_max_abs": y}, or null.
json diagnostics_json(const LayerDiagnostics& d) {
  if (d.step == 0) return nullptr;
  json out = {{"step", d.step},
              {"log_z_mean", short_number(d.log_z_mean)},
              {"log_z_max_abs", short_number(d.log_z_max_abs)}};
  for (const auto& [name, values] : d.layers) {
    json list = json::array();
    for (double v : values) list.push_back(short_number(v));
    out[name] = std::move(list);
  }
  return out;
}

// What the page's script polls: the run table, the progress line, the series' colours and the
// metrics a chart can show.
std::string status_json(const std::vector<RunStatus>& runs, const std::string& page_etag, const std::string& dir,
                        bool compare, const std::vector<std::string>& metrics) {
  json rows = json::array();
  std::vector<std::string> variants;
  for (const RunStatus& r : runs)
    if (!r.variant.empty() && std::find(variants.begin(), variants.end(), r.variant) == variants.end())
      variants.push_back(r.variant);
  json colors = json::object();
  for (size_t i = 0; i < variants.size(); ++i) {
    const study::Variant* v = study::find_variant(variants[i]);
    colors[variants[i]] = v ? v->color : study::palette(i);
  }
  std::vector<std::string> extra_keys;
  for (const RunStatus& r : runs)
    for (const auto& [key, value] : r.extra)
      if (std::find(extra_keys.begin(), extra_keys.end(), key) == extra_keys.end()) extra_keys.push_back(key);
  for (const RunStatus& r : runs) {
    json extra = json::object();
    for (const auto& [key, value] : r.extra) extra[key] = value;
    const std::string log = compare ? "logs/" + r.name + ".log" : "";
    std::error_code ec;
    rows.push_back(
        {{"name", r.name},
         {"variant", r.variant},
         {"state", state_name(r.state)},
         {"problem", r.problem},
         {"step", r.step},
         {"steps", r.total_steps},
         {"eta", r.state == RunState::running ? format_eta(r.eta_s) : "–"},
         {"loss", number_or_null(r.last_loss)},
         {"best_accuracy", number_or_null(r.best_accuracy)},
         {"best_loss", number_or_null(r.best_loss)},
         {"lr", number_or_null(r.lr)},
         {"layers", r.layers},
         {"warmup", r.warmup},
         {"seed", r.seed},
         {"extra", extra},
         {"path", r.path},
         {"log", !log.empty() && fs::exists(fs::path(dir) / log, ec) ? log : ""},
         {"version", r.version},
         {"log_z", short_number(r.last_diagnostics.log_z_max_abs)},
         {"diagnostics",
          {{"first", diagnostics_json(r.first_diagnostics)}, {"last", diagnostics_json(r.last_diagnostics)}}}});
  }
  return json{{"page", page_etag},  {"progress", progress_line(runs)},
              {"colors", colors},   {"extra_keys", extra_keys},
              {"metrics", metrics}, {"runs", rows}}
      .dump();
}

// The metrics the runs log, from the first lines of a few runs' metrics.jsonl (every run of a
// study logs the same ones); the evaluation's come first.
std::vector<std::string> metric_names(const std::vector<std::string>& run_dirs) {
  std::vector<std::string> names;
  size_t looked = 0;
  for (const std::string& d : run_dirs) {
    const RunSeries series = read_series((fs::path(d) / "metrics.jsonl").string(), 2, "", 2000);
    for (const MetricSeries& m : series.metrics)
      if (std::find(names.begin(), names.end(), m.name) == names.end()) names.push_back(m.name);
    if (!series.metrics.empty() && ++looked == 3) break;
  }
  std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n.rfind("valid/", 0) == 0; });
  return names;
}

}  // namespace

std::string cannot_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errno == ENOENT ? "" : fmt::format("{}: cannot read: {}", path, std::strerror(errno));
  struct stat st {};
  int error = 0;
  // A directory must be searchable too: looking up any name in it tells (EACCES when it is not).
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && ::fstatat(fd, "config.json", &st, 0) != 0 && errno != ENOENT)
    error = errno;
  ::close(fd);
  return error != 0 ? fmt::format("{}: cannot read: {}", path, std::strerror(error)) : "";
}

LiveReport::LiveReport(std::string dir, uint64_t report_bytes) : dir_(std::move(dir)), report_bytes_(report_bytes) {
  std::error_code ec;
  if (!fs::exists(dir_, ec) && !ec) return;  // waits for it: the page says what to run
  if (std::string why = cannot_read(dir_); !why.empty()) throw InputError(why);
  if (!fs::is_directory(dir_, ec)) throw InputError(fmt::format("{}: not a directory", dir_));
  if (kind_of(dir_) == DirKind::folder && scan(dir_).run_dirs.empty())
    throw InputError(
        fmt::format("{}: not a run directory (config.json, metrics.jsonl), a compare output directory "
                    "(runs/) or a folder of run directories",
                    dir_));
}

bool LiveReport::waiting() {
  std::error_code ec;
  return !fs::exists(dir_, ec);
}

static std::string waiting_text(const std::string& dir) {
  return fmt::format(
      "{} does not exist yet: this page waits for it and follows it from then on. Start the study with "
      "`normlab compare --config FILE --out {}` (or one run with `normlab train --config FILE --out {}`).",
      dir, dir, dir);
}

LiveReport::~LiveReport() {
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  readers_changed_.notify_all();
  redraw_.notify_all();
  if (catch_up_.joinable()) catch_up_.join();
  if (drawer_.joinable()) drawer_.join();
}

LiveReport::Page LiveReport::latest() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cached_.html.empty()) {
      redraw_wanted_ = true;
      if (!drawer_.joinable() && !stopping_)
        drawer_ = std::thread([this] {
          std::unique_lock<std::mutex> wait(mutex_);
          for (;;) {
            redraw_.wait(wait, [&] { return redraw_wanted_ || stopping_; });
            if (stopping_) return;
            redraw_wanted_ = false;
            wait.unlock();
            page();  // draws only if the runs changed (and not sooner than 5 drawing times after the last)
            wait.lock();
          }
        });
      Page page = cached_;
      lock.unlock();
      redraw_.notify_all();
      return page;
    }
  }
  return page();
}

namespace {

// Why a metrics.jsonl cannot be read whole by the report: a line longer than kMaxLineBytes (the
// report would hold it in memory whole; no record is that long). "" when none is. Scans for
// newlines only (memchr: a gigabyte in well under a second), holding 1 MiB.
std::string long_line(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return "";
  std::vector<char> buffer(1 << 20);
  uint64_t run = 0;  // bytes since the last newline
  int64_t line = 1;
  std::string problem;
  for (ssize_t n; problem.empty() && (n = ::read(fd, buffer.data(), buffer.size())) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (const char *at = buffer.data(), *end = at + n; at < end;) {
      const char* newline = static_cast<const char*>(std::memchr(at, '\n', size_t(end - at)));
      run += uint64_t((newline ? newline : end) - at);
      if (run > kMaxLineBytes) {
        problem = fmt::format("{}: line {}: longer than {} MiB: not a metrics record", path, line, kMaxLineBytes >> 20);
        break;
      }
      if (!newline) break;
      run = 0, ++line, at = newline + 1;
    }
  }
  ::close(fd);
  return problem;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

// A run's state from its summary.json alone (finished, diverged, wall time), for a run the report
// leaves out; a summary too large to be one is ignored.
void read_summary_state(const fs::path& run_dir, RunStatus& st, bool& finished, bool& diverged) {
  const std::string path = (run_dir / "summary.json").string();
  if (file_size(path) == 0 || file_size(path) > (1u << 20)) return;
  json summary;
  try {  // a FIFO or device under the name is refused, never waited on (io/atomic_file.hpp)
    summary = json::parse(*io::open_regular_stream(path, "cannot read"), nullptr, false);
  } catch (const InputError&) {
    return;
  }
  if (!summary.is_object()) return;
  finished = true;
  if (summary.contains("diverged") && summary["diverged"] == true) diverged = true;
  if (summary.contains("wall_time_s") && summary["wall_time_s"].is_number())
    st.wall_time_s = summary["wall_time_s"].get<double>();
}

}  // namespace

std::shared_ptr<LiveReport::Reader> LiveReport::reader_of(const std::string& metrics_path) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& slot = readers_[metrics_path];
  if (!slot) {
    slot = std::make_shared<Reader>(metrics_path);
    if (!catch_up_.joinable() && !stopping_) catch_up_ = std::thread([this] { catch_up_loop(); });
  }
  slot->used = std::chrono::steady_clock::now();
  auto reader = slot;
  lock.unlock();
  readers_changed_.notify_all();
  return reader;
}

// The background reader: catches every reader up with its file, 256 KiB at a time (each slice
// holds only that run's reader, a few milliseconds), so a request for a run never waits for a
// large file to be parsed: it gets what has been read so far. Readers past kReaderBytes of series
// are dropped, least recently used first.
void LiveReport::catch_up_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    std::vector<std::shared_ptr<Reader>> behind;
    for (const auto& [path, r] : readers_) behind.push_back(r);
    lock.unlock();
    bool any = false;
    size_t bytes = 0;
    for (const auto& r : behind) {
      // std::mutex is not fair: without this, the next slice could take the lock again ahead of
      // a request that has been waiting for it.
      for (int i = 0; i < 100 && r->waiting.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const std::lock_guard<std::mutex> guard(r->mutex);
      if (r->behind) r->behind = r->reader.update(256 << 10), any = true;
      bytes += r->reader.memory_bytes();
    }
    lock.lock();
    if (bytes > kReaderBytes) {
      std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> by_use;
      for (const auto& [path, r] : readers_) by_use.emplace_back(r->used, path);
      std::sort(by_use.begin(), by_use.end());
      for (size_t i = 0; i < by_use.size() / 2; ++i) readers_.erase(by_use[i].second);
    }
    readers_changed_.notify_all();  // wait_for_readers()
    if (!any) readers_changed_.wait_for(lock, std::chrono::seconds(1));
  }
}

void LiveReport::wait_for_readers() {
  for (;;) {
    std::vector<std::shared_ptr<Reader>> all;
    {
      const std::lock_guard<std::mutex> guard(mutex_);
      for (const auto& [path, r] : readers_) all.push_back(r);
    }
    bool behind = false;
    for (const auto& r : all) {
      const std::lock_guard<std::mutex> guard(r->mutex);
      behind = behind || r->behind;
    }
    if (!behind) return;
    std::unique_lock<std::mutex> lock(mutex_);
    readers_changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

RunStatus LiveReport::row_from_reader(const std::string& run_dir, bool running) {
  RunStatus st;
  const auto reader = reader_of((fs::path(run_dir) / "metrics.jsonl").string());
  MetricsReader::Summary summary;
  {
    const std::lock_guard<std::mutex> guard(reader->mutex);
    if (reader->behind) reader->behind = reader->reader.update(256 << 10);  // what was appended lately, at most 256 KiB
    summary = reader->reader.summary();
  }
  bool finished = false, diverged = summary.diverged;
  read_summary_state(run_dir, st, finished, diverged);
  st.step = summary.last_step;
  st.last_loss = summary.last_loss;
  st.best_accuracy = summary.best_accuracy;
  st.best_loss = summary.best_loss;
  st.first_diagnostics = summary.first_diagnostics;
  st.last_diagnostics = summary.last_diagnostics;
  st.state = diverged                                  ? RunState::diverged
             : finished                                ? RunState::finished
             : running                                 ? RunState::running
             : st.step > 0 || summary.eval_records > 0 ? RunState::stopped
                                                       : RunState::queued;
  // What the report would refuse, as far as read: an error run, as when the report reads it.
  const std::lock_guard<std::mutex> guard(reader->mutex);
  if (!reader->reader.problem().empty()) st.state = RunState::error, st.problem = reader->reader.problem();
  return st;
}

static LiveReport::Page reading_page(const std::string& dir, bool compare) {
  LiveReport::Page page;
  page.etag = "\"first-drawing\"";
  const study::HtmlExtras extras{live_head(), live_top("reading the runs…", ""), live_script(page.etag)};
  const study::ReportModel
      model{compare ? "normlab compare report" : "normlab serve: " + dir,
            {"Reading the runs: the first drawing of this page is under way; it appears here when done."},
            {},
            {}};
  page.html = study::render_html(model, extras);
  page.report_md = study::render_markdown(model);
  page.status_json = json{{"page", page.etag},           {"progress", "reading the runs…"}, {"colors", json::object()},
                          {"extra_keys", json::array()}, {"metrics", json::array()},        {"runs", json::array()}}
                         .dump();
  return page;
}

LiveReport::Page LiveReport::page() {
  // One drawer; everyone else takes the last drawing at once instead of waiting for this one.
  std::unique_lock<std::mutex> drawing(draw_mutex_, std::try_to_lock);
  if (!drawing.owns_lock()) {
    const std::lock_guard<std::mutex> guard(mutex_);
    if (!cached_.html.empty()) return cached_;
    return reading_page(dir_, study::is_compare_dir(dir_));
  }
  // DIR may stop being readable while served: the page then says so (and draws again when it can).
  const bool absent = waiting();
  std::string dir_problem = absent ? waiting_text(dir_) : cannot_read(dir_);
  Layout layout;
  try {
    if (dir_problem.empty()) layout = scan(dir_);
  } catch (const fs::filesystem_error& e) {
    dir_problem = fmt::format("{}: cannot read: {}", dir_, e.code().message());
  }
  const FlockSet held = held_flocks();
  std::string fingerprint = dir_problem + "\n";
  std::vector<std::pair<std::string, std::shared_ptr<Reader>>> readers;
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    for (const auto& [path, r] : readers_) readers.emplace_back(path, r);
  }
  for (const std::string& d : layout.run_dirs) {
    fingerprint += d + "|" + (lock_held(d, held) ? "L" : "-") + "|" + file_stamp(d);
    for (const char* file : {"config.json", "metrics.jsonl", "summary.json"})
      fingerprint.append("|").append(file_stamp(fs::path(d) / file));
    fingerprint += "\n";
  }
  // A reader's progress changes a left-out run's row (its step, or the line that makes it an error).
  for (const auto& [path, r] : readers) {
    const std::lock_guard<std::mutex> guard(r->mutex);
    fingerprint += path + "@" + std::to_string(r->reader.offset()) + (r->reader.problem().empty() ? "\n" : "!\n");
  }
  for (const std::string& name : layout.planned) fingerprint += name + "\n";
  // Drawing again costs reading every run; while runs write, draw at most once per 5 drawing times,
  // so that a large study's page takes at most a fifth of a core from the trainers.
  const auto now = std::chrono::steady_clock::now();
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    if (!cached_.html.empty() && (fingerprint == fingerprint_ || now - drawn_at_ < 5 * drawing_time_)) return cached_;
  }

  // The report reads runs whole up to kReportBytes of metrics in all; a line no record can be makes
  // its run an error without reading it (checked once per version of the file).
  uint64_t budget = report_bytes_;
  std::map<std::string, Admission> admitted;
  const Admit admit = [&](const std::string& run_dir) {
    if (auto it = admitted.find(run_dir); it != admitted.end()) return it->second;
    const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
    const uint64_t size = file_size(path);
    Admission a;
    if (size > budget) {
      a.reason = fmt::format(
          "its metrics.jsonl ({:.1f} MB) is past what the live report reads ({:.0f} MB for all runs): "
          "left out of the report, its row and charts follow it; `normlab report` draws it",
          double(size) / 1e6, report_bytes_ / 1e6);
    } else {
      const std::string stamp = file_stamp(path);
      std::string problem;
      {
        const std::lock_guard<std::mutex> guard(mutex_);
        if (auto it = line_checks_.find(path); it != line_checks_.end() && it->second.first == stamp)
          problem = it->second.second;
        else problem = "?";
      }
      if (problem == "?") {
        problem = long_line(path);
        const std::lock_guard<std::mutex> guard(mutex_);
        line_checks_[path] = {stamp, problem};
      }
      if (!problem.empty()) a = {problem, true};
      else budget -= size;
    }
    return admitted[run_dir] = a;
  };
  Drawn drawn = draw(dir_, layout, held, first_seen_, admit,
                     [this](const std::string& run_dir, bool running) { return row_from_reader(run_dir, running); });
  if (!dir_problem.empty()) drawn.problem = dir_problem;
  Page page;
  page.etag = fmt::format("\"{:016x}\"", std::hash<std::string>{}(fingerprint));
  // Once every run is judged the page opens on the report's first screen (the verdict, the headline
  // figure, the table), the run table and live charts below it; until then the runs come first.
  const bool all_judged =
      !drawn.runs.empty() && drawn.report &&
      std::all_of(drawn.runs.begin(), drawn.runs.end(), [](const RunStatus& r) { return judged(r.state); });
  std::string top = live_top(progress_line(drawn.runs), rows_html(drawn.runs));
  const study::HtmlExtras extras{live_head(), all_judged ? "" : top, live_script(page.etag), all_judged ? top : ""};
  if (!drawn.report)
    drawn.report = study::ReportModel{layout.compare ? "normlab compare report" : "normlab serve: " + dir_,
                                      {absent ? dir_problem : "No report yet: " + drawn.problem + "."},
                                      {},
                                      {}};
  page.html = live_html(*drawn.report, extras);
  page.report_md = study::render_markdown(*drawn.report);
  page.runs_csv = std::move(drawn.runs_csv);
  page.status_json = status_json(drawn.runs, page.etag, dir_, layout.compare, metric_names(layout.run_dirs));
  drawn.report.reset();
  ::malloc_trim(0);  // a long run's curves were read and drawn: give their pages back to the system
  const std::lock_guard<std::mutex> guard(mutex_);
  run_dirs_.clear();
  for (const std::string& d : layout.run_dirs) run_dirs_[fs::path(d).filename().string()] = d;
  for (auto it = line_checks_.begin(); it != line_checks_.end();)  // forget removed runs
    it = admitted.count(fs::path(it->first).parent_path().string()) ? std::next(it) : line_checks_.erase(it);
  results_ = drawn.results;
  fingerprint_ = fingerprint;
  drawn_at_ = std::chrono::steady_clock::now();
  drawing_time_ = drawn_at_ - now;
  cached_ = page;
  return page;
}

std::string LiveReport::CurvesWriter::next(size_t bytes) {
  std::string out;
  if (header_) {
    header_ = false;
    out = study::curves_csv({});
  }
  if (!results_) return out;
  // study::curves_csv of a slice of one run at a time (the same rows, the header dropped): up to
  // 20,000 steps, then that run's evaluations.
  while (out.size() < bytes && run_ < results_->size()) {
    const study::RunResult& r = (*results_)[run_];
    std::vector<study::RunResult> slice(1);
    slice[0].spec = r.spec;
    if (!evals_) {
      const size_t end = std::min(r.steps.size(), step_ + 20000);
      auto part = [&](const std::vector<double>& v) {
        return std::vector<double>(v.begin() + std::ptrdiff_t(std::min(step_, v.size())),
                                   v.begin() + std::ptrdiff_t(std::min(end, v.size())));
      };
      slice[0].steps = part(r.steps), slice[0].loss = part(r.loss), slice[0].accuracy = part(r.accuracy);
      step_ = end;
      if (step_ >= r.steps.size()) evals_ = true;
    } else {
      slice[0].evals = r.evals;
      evals_ = false, step_ = 0, ++run_;
    }
    const std::string rows = study::curves_csv(slice);
    out.append(rows, std::min(rows.size(), rows.find('\n') + 1));
  }
  return out;
}

LiveReport::CurvesWriter LiveReport::curves_writer() {
  const std::lock_guard<std::mutex> guard(mutex_);
  return CurvesWriter(results_);
}

std::string LiveReport::curves_csv() {
  CurvesWriter writer = curves_writer();
  std::string csv;
  for (std::string piece; !(piece = writer.next(1 << 20)).empty();) csv += piece;
  return csv;
}

LiveReport::SeriesAnswer LiveReport::series(const std::string& run, const std::string& metric) {
  std::string path;
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    const auto it = run_dirs_.find(run);
    if (it == run_dirs_.end()) return {};
    path = (fs::path(it->second) / "metrics.jsonl").string();
  }
  // What was appended lately is read now (at most 256 KiB: a poll's worth); a larger backlog is the
  // background reader's, and this answer has what it read so far (its ETag changes as it reads).
  const auto reader = reader_of(path);
  SeriesAnswer answer;
  {
    ++reader->waiting;
    std::unique_lock<std::mutex> guard(reader->mutex);
    --reader->waiting;
    // A backlog is the background thread's; a reader new or caught up reads 256 KiB here.
    if (!reader->behind || reader->reader.offset() == 0) reader->behind = reader->reader.update(256 << 10);
    answer.etag = fmt::format("\"{:016x}\"", std::hash<std::string>{}(path + "|" + metric + "|" + file_stamp(path) +
                                                                      "|" + std::to_string(reader->reader.offset())));
    {
      const std::lock_guard<std::mutex> cache(mutex_);
      if (auto it = series_cache_.find(answer.etag); it != series_cache_.end()) return answer.json = it->second, answer;
    }
    answer.json = series_json(reader->reader.series(metric));
  }
  readers_changed_.notify_all();
  const std::lock_guard<std::mutex> guard(mutex_);
  if (series_cache_.size() >= 64) series_cache_.clear();  // a few recent answers: the runs the page shows
  series_cache_[answer.etag] = answer.json;
  return answer;
}

}  // namespace normlab::serve
