#pragma once
// What the live report's files share (LiveReport, live.hpp, is their only caller; not a public
// interface). One drawing of the page goes through them in this order:
//   run_files.cpp      what DIR holds on disk: run directories, held locks, file stamps
//   live_draw.cpp      which runs the report reads whole, the plan of them, each run's row
//   run_status.cpp     a run's row (state, progress, figures) from what was read of it
//   report_so_far.cpp  the report while runs are unfinished: judged on the finished ones
//   run_table.cpp      the run table as HTML rows, the progress line, status.json
//   live_page.cpp      the page's text around the report
// live.cpp holds LiveReport itself (when to draw), live_readers.cpp the incremental metrics
// readers behind the charts and the rows of runs too large for the report, curves_csv.cpp the
// streamed curves.csv.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "normlab/serve/live.hpp"
#include "normlab/serve/series.hpp"
#include "normlab/study/report.hpp"

namespace normlab::serve::live_parts {

// ---- run_files.cpp: what DIR holds, read without opening a lock or writing anything.

enum class DirKind { run, compare, folder };
DirKind kind_of(const std::string& dir);

// The run directories under DIR, as `normlab report DIR` names them.
struct Layout {
  std::vector<std::string> run_dirs;  // every run directory found, sorted
  std::vector<std::string> planned;   // compare: run names with DIR/configs/NAME.json
  bool compare = false;
};
Layout scan(const std::string& dir);

// The (major, minor, inode) of every flock(2) held on this machine, and whether a run's is among them.
using FlockSet = std::set<std::tuple<unsigned, unsigned, uint64_t>>;
FlockSet held_flocks();
bool lock_held(const std::filesystem::path& run_dir, const FlockSet& held);

std::string file_stamp(const std::filesystem::path& path);  // "size:mtime:mode", "-" if absent
double mtime_s(const std::filesystem::path& path);          // NaN if absent
uint64_t file_size(const std::string& path);                // 0 if absent
// Why a run directory cannot be read ("" when it can).
std::string unreadable_run(const std::filesystem::path& run_dir);
// Why a metrics.jsonl cannot be read whole by the report: a line longer than kMaxLineBytes ("" when none is).
std::string long_line(const std::string& path);
// What changes whenever a run's files or lock do: one line per run directory.
std::string runs_fingerprint(const std::vector<std::string>& run_dirs, const FlockSet& held);

// ---- run_status.cpp: a run's row.

// A run's state and progress from what read_run found and whether its trainer holds the lock.
RunStatus status_of(const study::RunResult& r, bool running);
// A run's row from its metrics reader's summary and its summary.json (a run the report leaves out).
RunStatus status_of(const MetricsReader::Summary& summary, const std::filesystem::path& run_dir, bool running);
// The row's columns that come from the plan (variant, hyperparameters), and from the results too.
void fill_from_spec(RunStatus& st, const study::RunSpec& spec);
void fill_from_result(RunStatus& st, const study::RunResult& r);
// A planned run's row: queued, with its step count and hyperparameters from DIR/configs/NAME.json.
RunStatus queued_run(const std::string& name, const study::RunSpec* spec);
// Per run directory: the first (step, metrics.jsonl mtime) seen, for the rate behind the ETA.
using FirstSeen = std::map<std::string, std::pair<int64_t, double>>;
double eta_of(const RunStatus& st, const std::filesystem::path& run_dir, FirstSeen& first_seen);
int state_order(RunState state);  // the run table's default order
bool judged(RunState state);      // finished or diverged

// ---- live_draw.cpp: one drawing.

// Whether the report may read a run whole: "" yes; else why not, and whether that makes the run an
// error (a line no record can be) or only leaves it out (over the budget).
struct Admission {
  std::string reason;
  bool error = false;
};
using Admit = std::function<Admission(const std::string& run_dir)>;

// The admissions of one drawing: `budget` bytes of metrics.jsonl in all, given in the order asked;
// a line no record can be makes its run an error without reading it, checked once per version of
// the file (`checks`: metrics.jsonl path -> (file stamp, problem), kept across drawings, under `mutex`).
class Admitter {
 public:
  using LineChecks = std::map<std::string, std::pair<std::string, std::string>>;
  Admitter(uint64_t budget, LineChecks& checks, std::mutex& mutex)
      : total_(budget), budget_(budget), checks_(checks), mutex_(mutex) {}
  Admission operator()(const std::string& run_dir);
  void forget_unasked();  // drops the checks of runs this drawing did not ask about (removed runs)

 private:
  std::string checked_long_line(const std::string& path);
  uint64_t total_, budget_;
  LineChecks& checks_;
  std::mutex& mutex_;
  std::map<std::string, Admission> admitted_;  // by run directory
};

// The page's parts: every run's row, and the report of the runs that have a config.json.
struct Drawn {
  std::vector<RunStatus> runs;
  std::optional<study::ReportModel> report;
  std::string problem;  // why there is no report
  std::string runs_csv;
  std::shared_ptr<const std::vector<study::RunResult>> results;
};
// A run the report leaves out: its row from its metrics reader (LiveReport::row_from_reader).
using RowFromReader = std::function<RunStatus(const std::string& run_dir, bool running)>;
Drawn draw(const std::string& dir, const Layout& layout, const FlockSet& held, FirstSeen& first_seen,
           const Admit& admit, const RowFromReader& row_from_reader);

// ---- report_so_far.cpp

// The report while runs are unfinished: judged on the finished runs only, its Answer saying which
// runs are not in it. `results` are moved out and back (a long run's curves are not copied).
study::ReportModel live_report(const study::ComparePlan& plan, std::vector<study::RunResult>& results,
                               const std::vector<RunStatus>& runs);

// ---- run_table.cpp

std::string progress_line(const std::vector<RunStatus>& runs);  // compare's console line
std::string rows_html(const std::vector<RunStatus>& runs);      // the run table's rows, for a page without scripts
// What the page's script polls: the run table, the progress line, the series' colours and the
// metrics a chart can show.
std::string status_json(const std::vector<RunStatus>& runs, const std::string& page_etag, const std::string& dir,
                        bool compare, const std::vector<std::string>& metrics);
// The metrics the runs log, from the first lines of a few runs' metrics.jsonl.
std::vector<std::string> metric_names(const std::vector<std::string>& run_dirs);

// ---- live_page.cpp

// The page before the first drawing is done.
LiveReport::Page reading_page(const std::string& dir, bool compare);
// What the page says while DIR does not exist.
std::string waiting_text(const std::string& dir);
// The page of one drawing; `no_report` is the report's text when there is no report. Takes the
// drawing's report and runs.csv.
LiveReport::Page page_of(Drawn& drawn, const std::string& etag, const std::string& dir, const Layout& layout,
                         const std::string& no_report);

}  // namespace normlab::serve::live_parts
