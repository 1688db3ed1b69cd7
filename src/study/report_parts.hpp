#pragma once
// What the report's section files (src/study/report_*.cpp) share: the Context every section reads,
// table and number formatting, and one function per section. Not a public interface: build_report
// (report.cpp) is the only caller.
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/provenance.hpp"
#include "normlab/study/convergence.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/search.hpp"
#include "normlab/study/svg.hpp"
#include "normlab/train/config.hpp"

namespace normlab::study::report_parts {

using Section = ReportSection;

// Everything the sections share.
struct Context {
  const ComparePlan& plan;
  const std::vector<RunResult>& results;
  std::vector<GroupSummary> groups;
  double chance;                              // the uniform guess's loss
  double chance_accuracy;                     // the best guess's accuracy over the runs (0: unknown)
  size_t fewest_seeds;                        // in any cell
  bool has_batchnorm;                         // some run normalizes with BatchNorm
  size_t window;                              // moving-average window of the curves, in steps
  std::map<std::string, std::string> colors;  // series label -> colour
  std::function<bool()> stop_requested;
  mutable int charts_drawn = 0;  // numbers each chart's clip path within this report

  const GroupSummary* group(const std::string& variant, double lr, const std::string& setting) const;
  // The chart's SVG; throws ReportStopped when stop_requested() turns true.
  std::string draw(const Chart& chart) const;
  // "-6-layers-no-warmup": a setting in a chart's file name ("" for the only setting).
  std::string setting_slug(const std::string& setting) const;
  // The learning rates the per-rate detail charts are drawn at: all of them when that is a handful
  // of charts, else the one where the variants differ most.
  std::vector<double> detail_lrs(const std::string& setting) const;
  // Loss charts end at 10x the chance loss, so that one blown-up variant does not flatten the others.
  double loss_cap() const;
  void add_chance_line(Chart& chart) const;
};

Context make_context(const ComparePlan& plan, const std::vector<RunResult>& results, const train::RunConfig& base,
                     const std::function<bool()>& stop_requested);

// Formatting (report_context.cpp).
std::string fmt_num(double v, const char* spec = "{:.3f}");
// "0.912 [0.880, 0.944]": a mean with its 95% interval (no interval from one seed), the interval
// cut to the values the quantity can take (an accuracy stays in [0, 1], a loss above 0).
std::string fmt_interval(const Interval& i, double lowest = -INFINITY, double highest = INFINITY);
std::string html_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
// "lr 0.01, 4 layers, no warmup": a chart's learning rate and setting.
std::string where(double lr, const std::string& setting);

// ---- The first screen's numbers per variant and setting -------------------------------------------
// The verdict, the headline figure and the compact table read the study's table (convergence.hpp:
// StudyTable, one StudyRow per variant and setting), the same one the Answer's convergence, boundary
// and sensitivity sentences come from, so the first screen and the Answer cannot disagree.
struct FirstScreenNumbers {
  StudyTable table;
  // The gate failed for this row: judged, and most seeds at the best rate neither solved nor
  // plateaued (StudyTable::not_converged). No ratio is stated for such a row, nor against it.
  bool not_converged(const StudyRow& row) const;
  // The row's strict ratio to none, where the Answer states one: both rows passed the gate (NaN otherwise).
  BoundaryRatio ratio_to_none(const StudyRow& row) const;
};
FirstScreenNumbers first_screen_numbers(const Context& c);
// summary.json's "first_screen": per row {variant, setting, best_lr, best_loss {mean, low, high, n},
// edge, converged, judged, improving, runs, lr_sensitivity {...}, lr_sensitivity_range,
// boundary_ratio_to_none {ratio, low, high} or null (as ratio_to_none), rules_agree}; the full
// table is summary.json's "study" (study_json).
nlohmann::json first_screen_json(const FirstScreenNumbers& numbers);

// The sections, in the order build_report lays them out.
// The first screen (report_answer.cpp): the verdict, the headline figure, the compact table.
Section answer_section(const Context& c, const FirstScreenNumbers& numbers);
// The verdict's sentences (report_verdict.cpp).
std::vector<std::string> verdict(const Context& c, const FirstScreenNumbers& numbers);
// The parts of a setting ("4 layers, no warmup") that differ between the plan's settings: "no warmup".
std::string short_setting(const Context& c, const std::string& setting);
// "1.8 [1.2, >3.0]": a boundary ratio with its interval, an open end marked < or >.
std::string ratio_with_interval(const BoundaryRatio& r);
// report_owndata.cpp: an own-data compare (a data-defined task) answers in a classifier's words:
// held-out macro-F1 and accuracy per variant at its kept checkpoint (report_owndata_figures.cpp),
// against the bag-of-words baseline and against the best variant (docs/compare.md, "Own data").
bool is_own_data_report(const Context& c);
struct OwnDataAnswer {
  std::vector<std::string> verdict;  // the Answer's (at most three) sentences
  Section section;                   // "Against the baseline": the table behind them
  std::string checkpoints;           // which checkpoint the figures come from, in words
  bool baseline = false;             // the baseline could be fitted
};
OwnDataAnswer own_data_answer(const Context& c, const FirstScreenNumbers& numbers);
// report_findings.cpp: the Answer's sentences in full (summary.json's "answer").
inline constexpr const char* kDetailsTitle = "The Answer in full: boundaries and comparisons";
Section details_section(const Context& c);
Section findings_section(const Context& c);
Section summary_section(const Context& c);
Section stability_section(const Context& c);  // report_stability.cpp
Section search_section(const Context& c);
Section validation_section(const Context& c);  // report_curves.cpp
Section curves_section(const Context& c, const std::vector<double> RunResult::*field, const std::string& name,
                       const std::string& y_label, bool chance_line, const std::string& slug);
Section stack_section(const Context& c);  // report_inside.cpp
Section length_section(const Context& c);
std::optional<Section> batch_section(const Context& c);  // nothing when the grid has no BatchNorm run

// Where the numbers came from (report_setup.cpp).
// Which normlab, CPU and thread counts produced these runs.
struct Provenance {
  std::string version = NORMLAB_VERSION;
  std::string cpu = normlab::cpu_model();
  std::string kernels = normlab::kernels_in_use();
  std::vector<int64_t> threads;
  std::string text() const;  // the sentence the Setup section says it in
};
Provenance provenance_of(const std::vector<RunResult>& results);
// The one line of setup before the Answer: task, lengths, steps, seeds and the grid.
std::string setup_line(const Context& c, const train::RunConfig& base);
// The details after the Answer: the model, where the numbers came from, what LayerNorm computes,
// and one bullet per series.
Section setup_section(const Context& c, const train::RunConfig& base, const Provenance& provenance, bool batch_lesson);
nlohmann::json summary_json(const Context& c, const Provenance& provenance, const std::vector<Section>& sections);

}  // namespace normlab::study::report_parts
