// The live report: which runs DIR holds and in what state, and the report page drawn from them,
// drawn again only when a run's files or lock changed. Everything here reads; nothing writes.
#include "normlab/serve/live.hpp"

#include <fmt/format.h>
#include <fcntl.h>
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
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "normlab/error.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/study/render.hpp"
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

// A run's state and progress from what read_run found and whether its trainer holds the lock.
RunStatus status_of(const study::RunResult& r, bool running) {
  RunStatus st;
  st.name = r.spec.name;
  st.step = r.steps.empty() ? 0 : int64_t(r.steps.back());
  if (r.diverged && r.diverged_at > st.step) st.step = r.diverged_at;
  if (r.spec.config.contains("train")) st.total_steps = r.spec.config["train"].value("steps", int64_t(0));
  for (size_t i = r.loss.size(); i-- > 0;)
    if (std::isfinite(r.loss[i])) {
      st.last_loss = r.loss[i];
      break;
    }
  st.state = r.diverged                         ? RunState::diverged
             : r.finished                       ? RunState::finished
             : running                          ? RunState::running
             : st.step > 0 || r.evals.size() > 0 ? RunState::stopped
                                                : RunState::queued;
  return st;
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "–";
  const int s = int(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

std::string format_loss(double loss) { return std::isfinite(loss) ? fmt::format("{:.4g}", loss) : "–"; }

// The run table (scrolling on its own past 28 lines: a study has hundreds of runs), its counts line
// and a place for the update script's note.
std::string status_html(const std::vector<RunStatus>& runs) {
  std::map<RunState, int> counts;
  for (const RunStatus& r : runs) ++counts[r.state];
  std::string summary;
  for (RunState s : {RunState::running, RunState::queued, RunState::stopped, RunState::finished, RunState::diverged,
                     RunState::unreadable, RunState::error})
    if (counts[s] > 0) summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", counts[s], state_name(s));
  std::string html = fmt::format(
      "<section id=\"serve-status\"><h2>Runs</h2>\n<p>{} run(s): {}. This page follows the runs as they write "
      "(normlab serve); the report below is what <code>normlab report</code> draws from them now. "
      "<span id=\"serve-note\"></span></p>\n<div id=\"serve-runs\"><table><tr><th>run</th><th>state</th><th>step</th><th>ETA</th>"
      "<th>last loss</th></tr>\n",
      runs.size(), summary.empty() ? "none yet" : summary);
  for (const RunStatus& r : runs) {
    const std::string step = r.total_steps > 0 ? fmt::format("{} / {}", r.step, r.total_steps) : std::to_string(r.step);
    const std::string eta = r.state == RunState::running ? format_eta(r.eta_s) : "–";
    html += fmt::format("<tr class=\"serve-{0}\" data-state=\"{0}\"><td>{1}</td><td>{0}{2}</td><td>{3}</td><td>{4}</td>"
                        "<td>{5}</td></tr>\n",
                        state_name(r.state), study::xml_escape(r.name),
                        r.problem.empty() ? "" : " (" + study::xml_escape(r.problem) + ")", step, eta,
                        format_loss(r.last_loss));
  }
  return html + "</table></div></section>\n";
}

const char* kStatusStyle =
    "<style id=\"serve-style\">#serve-runs{max-height:28em;overflow-y:auto;display:inline-block}"
    "#serve-status th:nth-child(-n+2),#serve-status td:nth-child(2){text-align:left}"
    ".serve-running td:nth-child(2){color:#0072b2;font-weight:bold}.serve-diverged td:nth-child(2){color:#d55e00}"
    ".serve-stopped td:nth-child(2){color:#a0522d}.serve-unreadable td:nth-child(2),.serve-error td:nth-child(2){color:#d55e00}.serve-queued td{color:#888}#serve-note{color:#d55e00}</style>\n";

// Fetches the page every 2 s (a 304 when nothing changed) and swaps in the new body: no reload;
// its text never changes (the ETag is an attribute), so the page's CSP can allow it by its hash;
// the page's and the run table's scroll positions stay where the reader left them. <html
// data-serve-polls> counts the answers handled, for a test to see the script at work.
std::string update_script(const std::string& etag) {
  return "<script id=\"serve-live\" data-etag=\"" + study::xml_escape(etag) +
         "\">(function(){var polls=0,etag=document.getElementById('serve-live').getAttribute('data-etag');"
         "function again(ms){setTimeout(poll,ms);}"
         "function poll(){fetch(location.pathname,{cache:'no-store',headers:{'If-None-Match':etag}})"
         ".then(function(r){if(r.status===304)return null;if(!r.ok)throw new Error(r.status);"
         "etag=r.headers.get('ETag')||'';return r.text();})"
         ".then(function(text){if(text!==null){var doc=new DOMParser().parseFromString(text,'text/html');"
         "var y=window.scrollY,t=document.getElementById('serve-runs'),ty=t?t.scrollTop:0;"
         "document.title=doc.title;document.body.innerHTML=doc.body.innerHTML;window.scrollTo(0,y);"
         "t=document.getElementById('serve-runs');if(t)t.scrollTop=ty;}"
         "document.documentElement.setAttribute('data-serve-polls',++polls);again(2000);})"
         ".catch(function(){var n=document.getElementById('serve-note');"
         "if(n)n.textContent='normlab serve does not answer: this page is not updating.';again(5000);});}"
         "again(2000);})();</script>\n";
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
  std::string runs_csv, curves_csv;
};

// A planned run's row: queued, with its step count from DIR/configs/NAME.json.
RunStatus queued_run(const std::string& dir, const std::string& name) {
  RunStatus st;
  st.name = name;
  std::ifstream config(fs::path(dir) / "configs" / (name + ".json"));
  const json c = json::parse(config, nullptr, false);
  if (c.is_object() && c.contains("train") && c["train"].is_object() && c["train"].contains("steps") &&
      c["train"]["steps"].is_number_integer())
    st.total_steps = c["train"]["steps"].get<int64_t>();
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

// The report's plan and every planned run's results. A run whose config or files are refused is
// set aside in `refused` (dir -> reason) and the rest are planned again without it, so one bad run
// cannot take the others' report down. `problem` says why there is no plan at all.
struct Planned {
  study::ComparePlan plan;
  std::map<std::string, study::RunResult> results;  // by run directory
  std::string problem;
};

Planned plan_and_read(std::vector<std::string> dirs, std::map<std::string, std::string>& refused) {
  Planned out;
  while (!dirs.empty()) {
    std::string refused_dir, reason;
    try {
      out.plan = study::plan_from_run_dirs(dirs, {});
      out.results.clear();
      for (const study::RunSpec& spec : out.plan.runs) {
        refused_dir = spec.dir;
        out.results[spec.dir] = study::read_run(spec, spec.dir);
      }
      return out;
    } catch (const InputError& e) {
      reason = e.what();
    }
    // A refused config names its run's directory; a refused metrics/summary file is the run being read.
    const auto named = std::find_if(dirs.begin(), dirs.end(), [&](const std::string& d) {
      return reason.find(d + "/") != std::string::npos;
    });
    if (named != dirs.end()) refused_dir = *named;
    if (refused_dir.empty() || !std::count(dirs.begin(), dirs.end(), refused_dir)) break;  // not one run's fault
    refused[refused_dir] = reason;
    dirs.erase(std::find(dirs.begin(), dirs.end(), refused_dir));
  }
  out.plan = {};
  out.results.clear();
  out.problem = dirs.empty() ? "no run has a readable config.json yet" : "";
  return out;
}

Drawn draw(const std::string& dir, const Layout& layout, const FlockSet& held, FirstSeen& first_seen) {
  Drawn out;
  std::map<std::string, std::string> unreadable, refused;  // run directory -> reason
  std::vector<std::string> with_config;
  for (const std::string& d : layout.run_dirs) {
    std::error_code ec;
    if (std::string why = unreadable_run(d); !why.empty()) unreadable[d] = why;
    else if (fs::exists(fs::path(d) / "config.json", ec)) with_config.push_back(d);
  }
  Planned planned = plan_and_read(with_config, refused);
  out.problem = with_config.empty() ? "no run has written its config.json yet" : planned.problem;
  std::set<std::string> names;
  for (const std::string& d : layout.run_dirs) {
    study::RunResult r;
    r.spec.name = fs::path(d).filename().string();
    if (auto it = planned.results.find(d); it != planned.results.end()) r = it->second;
    RunStatus st = status_of(r, lock_held(d, held));
    for (const auto& [reasons, state] : {std::pair{&unreadable, RunState::unreadable}, std::pair{&refused, RunState::error}})
      if (auto it = reasons->find(d); it != reasons->end()) st.state = state, st.problem = it->second, st.step = 0;
    st.eta_s = eta_of(st, d, first_seen);
    out.runs.push_back(st);
    names.insert(fs::path(d).filename().string());
  }
  for (const std::string& name : layout.planned)
    if (!names.count(name)) out.runs.push_back(queued_run(dir, name));
  std::sort(out.runs.begin(), out.runs.end(), [](const RunStatus& a, const RunStatus& b) { return a.name < b.name; });
  if (planned.plan.runs.empty()) return out;
  std::vector<study::RunResult> results;
  for (const study::RunSpec& spec : planned.plan.runs) results.push_back(planned.results.at(spec.dir));
  try {
    out.report = study::build_report(planned.plan, results);
    out.runs_csv = study::runs_csv(planned.plan, results);
    out.curves_csv = study::curves_csv(results);
  } catch (const InputError& e) {
    out.problem = e.what();
  }
  return out;
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

LiveReport::LiveReport(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  if (!fs::exists(dir_, ec) && !ec) throw InputError(fmt::format("{}: no such directory", dir_));
  if (std::string why = cannot_read(dir_); !why.empty()) throw InputError(why);
  if (!fs::is_directory(dir_, ec)) throw InputError(fmt::format("{}: not a directory", dir_));
  if (kind_of(dir_) == DirKind::folder && scan(dir_).run_dirs.empty())
    throw InputError(fmt::format("{}: not a run directory (config.json, metrics.jsonl), a compare output directory "
                                 "(runs/) or a folder of run directories",
                                 dir_));
}

LiveReport::Page LiveReport::page() {
  const std::lock_guard<std::mutex> guard(mutex_);
  // DIR may stop being readable while served: the page then says so (and draws again when it can).
  std::string dir_problem = cannot_read(dir_);
  Layout layout;
  try {
    if (dir_problem.empty()) layout = scan(dir_);
  } catch (const fs::filesystem_error& e) {
    dir_problem = fmt::format("{}: cannot read: {}", dir_, e.code().message());
  }
  const FlockSet held = held_flocks();
  std::string fingerprint = dir_problem + "\n";
  for (const std::string& d : layout.run_dirs) {
    fingerprint += d + "|" + (lock_held(d, held) ? "L" : "-") + "|" + file_stamp(d);
    for (const char* file : {"config.json", "metrics.jsonl", "summary.json"})
      fingerprint.append("|").append(file_stamp(fs::path(d) / file));
    fingerprint += "\n";
  }
  for (const std::string& name : layout.planned) fingerprint += name + "\n";
  // Drawing again costs reading every run; while runs write, draw at most once per 5 drawing times,
  // so that a large study's page takes at most a fifth of a core from the trainers.
  const auto now = std::chrono::steady_clock::now();
  if (!cached_.html.empty() && (fingerprint == fingerprint_ || now - drawn_at_ < 5 * drawing_time_)) return cached_;

  Drawn drawn = draw(dir_, layout, held, first_seen_);
  if (!dir_problem.empty()) drawn.problem = dir_problem;
  Page page;
  page.etag = fmt::format("\"{:016x}\"", std::hash<std::string>{}(fingerprint));
  const study::HtmlExtras extras{kStatusStyle, status_html(drawn.runs), update_script(page.etag)};
  if (!drawn.report)
    drawn.report = study::ReportModel{"normlab serve: " + dir_, {"No report yet: " + drawn.problem + "."}, {}, {}};
  page.html = study::render_html(*drawn.report, extras);
  page.runs_csv = std::move(drawn.runs_csv);
  page.curves_csv = std::move(drawn.curves_csv);
  fingerprint_ = fingerprint;
  drawn_at_ = std::chrono::steady_clock::now();
  drawing_time_ = drawn_at_ - now;
  cached_ = page;
  return page;
}

}  // namespace normlab::serve
