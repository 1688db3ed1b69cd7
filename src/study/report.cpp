// The report: build_report gathers the sections (report_*.cpp, one job each, sharing the Context of
// report_parts.hpp) into the model render.cpp draws; write_report writes it with the charts, the CSV
// files and summary.json; report_run_dirs does it for any run directories.
#include "normlab/study/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/study/class_metrics.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/run_dirs.hpp"
#include "report_parts.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using namespace report_parts;

namespace {

// "Every figure comes from each run's last evaluation (its last checkpoint, checkpoint.safetensors;
// step 400)." (sentence = false: the clause alone).
std::string last_evaluation_text(const std::vector<RunResult>& results, bool sentence = true) {
  int64_t lo = INT64_MAX, hi = -1;
  for (const RunResult& r : results)
    if (!r.evals.empty()) lo = std::min(lo, r.evals.back().step), hi = std::max(hi, r.evals.back().step);
  const std::string steps = hi < 0     ? "no evaluation yet"
                            : lo == hi ? fmt::format("step {}", lo)
                                       : fmt::format("steps {}–{}", lo, hi);
  const std::string clause =
      fmt::format("each run's last evaluation (its last checkpoint, checkpoint.safetensors; {})", steps);
  return sentence ? fmt::format("Every figure comes from {}.", clause) : clause;
}

}  // namespace

ReportModel build_report(const ComparePlan& plan, const std::vector<RunResult>& results,
                         const std::function<bool()>& stop_requested) {
  const train::RunConfig& base = plan.base;
  const Context c = make_context(plan, results, base, stop_requested);
  std::vector<Section> sections;
  const FirstScreenNumbers numbers = first_screen_numbers(c);
  sections.push_back(answer_section(c, numbers));
  std::string checkpoints = last_evaluation_text(results);
  if (is_own_data_report(c)) {
    // Own data: the Answer speaks of accuracy, macro-F1 and the baseline; the loss table stays under it.
    OwnDataAnswer own = own_data_answer(c, numbers);
    sections.back().bullets = own.verdict;
    sections.push_back(std::move(own.section));
    checkpoints = fmt::format("The Answer's accuracy and macro-F1 come from {}; every other figure from {}.",
                              own.checkpoints, last_evaluation_text(results, false));
  }
  sections.push_back(details_section(c));
  sections.push_back(findings_section(c));
  sections.push_back(summary_section(c));
  if (plan.lrs.size() > 1) sections.push_back(stability_section(c));
  if (plan.search.enabled()) sections.push_back(search_section(c));
  sections.push_back(validation_section(c));
  sections.push_back(curves_section(c, &RunResult::loss, "Training loss", "train loss (log)", true, "train-loss"));
  sections.push_back(curves_section(c, &RunResult::grad_norm, "Gradient norm", "global grad norm before clipping (log)",
                                    false, "grad-norm"));
  sections.push_back(stack_section(c));
  sections.push_back(length_section(c));
  if (const std::optional<ClassMetricsTable> t = class_metrics_table(plan, c.groups)) {
    Section per_class{t->title, t->text, {}, {}, html_table(t->header, t->rows), md_table(t->header, t->rows)};
    sections.push_back(std::move(per_class));
  }
  const std::optional<Section> bn = batch_section(c);
  if (bn) sections.push_back(*bn);
  // The setup line, the first screen (the Answer) and its details; the setup follows them.
  const Provenance provenance = provenance_of(results);
  sections.insert(sections.begin() + (is_own_data_report(c) ? 3 : 2),
                  setup_section(c, base, provenance, bn.has_value()));
  ReportModel report{plan.title, {setup_line(c, base), checkpoints}, std::move(sections), {}};
  report.summary = summary_json(c, provenance, report.sections);
  report.summary["first_screen"] = first_screen_json(numbers);
  report.summary["study"] = study_json(numbers.table);  // the table behind the first screen and the Answer, in full
  return report;
}

std::vector<std::string> write_report(const ComparePlan& plan, const std::vector<RunResult>& results,
                                      const std::string& out_dir, const std::function<bool()>& stop_requested) {
  const ReportModel report = build_report(plan, results, stop_requested);
  // Every chart as its own file, then the pages that embed them.
  const fs::path chart_dir = fs::path(out_dir) / "charts";
  std::error_code ignored;
  fs::remove_all(chart_dir, ignored);  // charts of an earlier drawing with other names must not linger
  fs::create_directories(chart_dir);
  for (const Section& sec : report.sections)
    for (const auto& [name, svg] : sec.charts)
      io::write_file_atomic((chart_dir / (name + ".svg")).string(),
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + svg);
  io::write_file_atomic((fs::path(out_dir) / "runs.csv").string(), runs_csv(plan, results));
  io::write_file_atomic((fs::path(out_dir) / "curves.csv").string(), curves_csv(results));
  io::write_file_atomic((fs::path(out_dir) / "summary.json").string(), report.summary.dump(2) + "\n");
  io::write_file_atomic((fs::path(out_dir) / "report.md").string(), render_markdown(report));
  io::write_file_atomic((fs::path(out_dir) / "report.html").string(), render_html(report));
  std::vector<std::string> said = report.summary["verdict"].get<std::vector<std::string>>();
  if (report.summary.contains("answer"))
    for (const auto& sentence : report.summary["answer"]) said.push_back(sentence.get<std::string>());
  return said;
}

RunDirsReport report_run_dirs(const std::vector<std::string>& dirs,
                              const std::vector<std::pair<std::string, std::string>>& labels,
                              const std::string& out_dir, const std::function<bool()>& stop_requested) {
  ComparePlan plan;
  std::vector<RunResult> results;
  try {
    plan = plan_from_run_dirs(dirs, labels);
    for (const RunSpec& spec : plan.runs) results.push_back(read_run(spec, spec.dir));
  } catch (const fs::filesystem_error& e) {
    throw InputError(fmt::format("{}: cannot read: {}", e.path1().string(), e.code().message()));
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir))
    throw InputError(fmt::format("{}: cannot create the output directory: {}", out_dir, ec.message()));
  RunDirsReport out;
  out.answer = write_report(plan, results, out_dir, stop_requested);
  out.runs = plan.runs.size();
  out.series = plan.variants.size();
  out.report_path = (fs::path(out_dir) / "report.html").string();
  return out;
}

}  // namespace normlab::study
