#pragma once
// The comparison report: what a set of runs left in their directories, summarized over seeds,
// classified, and written as report.html (inline SVG), report.md, runs.csv, curves.csv and
// summary.json. The runs come from a compare plan (plan.hpp) or from any run directories
// (run_dirs.hpp); render.hpp turns the model into Markdown and HTML.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "normlab/study/batch_eval.hpp"
#include "normlab/study/findings.hpp"
#include "normlab/study/outcome.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/results.hpp"
#include "normlab/study/statistics.hpp"

namespace normlab::study {

// One section of the report: the Markdown and the HTML renderer draw the same list.
struct ReportSection {
  std::string title, text;
  std::vector<std::string> bullets;
  std::vector<std::pair<std::string, std::string>> charts;  // file name (no extension), SVG
  std::string table_html, table_md;
};
// The report before it is rendered: what report.md, report.html and summary.json say.
struct ReportModel {
  std::string title;
  std::vector<std::string> intro;       // paragraphs before the first section
  std::vector<ReportSection> sections;  // Answer (the first screen), its details, Setup, Findings, Summary, charts
  nlohmann::json summary;               // summary.json
  size_t lead_sections = 1;             // the first screen; a contents list links the sections after it
};
// Computes every section from the runs; throws ReportStopped when stop_requested() turns true
// (polled between charts). Writes nothing.
ReportModel build_report(const ComparePlan& plan, const std::vector<RunResult>& results,
                         const std::function<bool()>& stop_requested = {});
// runs.csv (one row per run) and curves.csv (every training and evaluation point).
std::string runs_csv(const ComparePlan& plan, const std::vector<RunResult>& results);
std::string curves_csv(const std::vector<RunResult>& results);

// Writes DIR/report.html (self-contained, inline SVG), DIR/report.md, DIR/runs.csv, DIR/curves.csv,
// DIR/charts/*.svg and DIR/summary.json: build_report rendered. stop_requested is polled between charts.
// Returns the verdict's sentences, then the Answer's in full (summary.json's "verdict" and
// "answer"), for the CLI to print.
std::vector<std::string> write_report(const ComparePlan& plan, const std::vector<RunResult>& results,
                                      const std::string& out_dir, const std::function<bool()>& stop_requested = {});

// `normlab report RUN_DIR...`: the runs of the directories (run_dirs.hpp: labels {label, run dir})
// read, and their report written to out_dir (created). InputError for a directory that cannot be
// read or created; ReportStopped as write_report.
struct RunDirsReport {
  size_t runs = 0, series = 0;
  std::vector<std::string> answer;  // the Answer's sentences
  std::string report_path;          // out_dir/report.html
};
RunDirsReport report_run_dirs(const std::vector<std::string>& dirs,
                              const std::vector<std::pair<std::string, std::string>>& labels,
                              const std::string& out_dir, const std::function<bool()>& stop_requested = {});

}  // namespace normlab::study
