// The report's first screen: the verdict (report_verdict.cpp), the headline figure (final
// held-out loss against learning rate, every variant in one panel per setting) and one compact table
// (variant x setting). Everything else follows under headings (render.cpp adds the contents).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "normlab/study/search.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

// The parts of a setting ("4 layers, no warmup") that differ between the settings: "no warmup".
std::string short_setting(const Context& c, const std::string& setting) {
  if (c.plan.settings.size() <= 1) return setting;
  const auto parts = [](const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string part; std::getline(in, part, ',');) out.push_back(part.substr(part.find_first_not_of(' ')));
    return out;
  };
  std::string out;
  for (const std::string& part : parts(setting)) {
    const bool shared = std::all_of(c.plan.settings.begin(), c.plan.settings.end(), [&](const std::string& other) {
      const std::vector<std::string> theirs = parts(other);
      return std::find(theirs.begin(), theirs.end(), part) != theirs.end();
    });
    if (!shared) out += (out.empty() ? "" : ", ") + part;
  }
  return out.empty() ? setting : out;
}

std::string ratio_with_interval(const BoundaryRatio& r) {
  return fmt::format("{} [{}, {}]", format_ratio(r.ratio), r.low_open ? "<" + format_ratio(r.low) : format_ratio(r.low),
                     r.high_open ? ">" + format_ratio(r.high) : format_ratio(r.high));
}

namespace {

std::string boundary_text(const BoundaryFit& f) {
  return f.kind == BoundaryFit::Kind::boundary
             ? fmt::format("{} [{}{}, {}{}]", format_rate(f.lr50), f.low_open ? "<" : "", format_rate(f.low),
                           f.high_open ? ">" : "", format_rate(f.high))
         : f.kind == BoundaryFit::Kind::never_failed  ? "> " + format_rate(f.top_lr)
         : f.kind == BoundaryFit::Kind::never_learned ? "learned at no rate"
                                                      : "–";
}

// The headline figure's panel for one setting: the study's curve per variant (LossCurve::mean) as
// the line, the runs' own losses as circles, so that a seed above the chart's top is marked there.
Chart headline_chart(const Context& c, const FirstScreenNumbers& numbers, const std::string& setting) {
  const double ln_k = c.chance;
  Chart chart;
  chart.title =
      "final held-out loss against learning rate" + (setting.empty() ? "" : " — " + short_setting(c, setting));
  chart.x_label = "learning rate (log)";
  chart.y_label = "held-out loss, trained lengths";
  chart.log_x = true;
  chart.width = 620;
  chart.height = 320;
  if (std::isfinite(ln_k)) {
    chart.y_max = 1.5 * ln_k;
    chart.mark_above = true;
    chart.h_lines.push_back({ln_k, fmt::format("ln K = {:.2f}", ln_k)});
  }
  for (const StudyRow& n : numbers.table.rows) {
    if (n.setting != setting) continue;
    Series s;
    s.label = n.variant;
    s.color = c.colors.at(n.variant);
    s.markers = true;
    for (size_t i = 0; i < n.curve.lrs.size(); ++i) {
      if (n.curve.mean[i].n == 0) continue;
      s.x.push_back(n.curve.lrs[i]);
      s.y.push_back(n.curve.mean[i].mean);
    }
    for (double lr : n.curve.lrs)
      if (const GroupSummary* g = c.group(n.variant, lr, setting))
        for (const RunResult* r : g->runs)
          if (r->finished || r->diverged)
            s.point_x.push_back(lr), s.point_y.push_back(r->diverged ? INFINITY : r->final_trained().loss);
    chart.series.push_back(s);
  }
  chart.note =
      "line: mean over seeds of min(loss, ln K), diverged = ln K; circles: seeds; triangles: a seed "
      "above 1.5 ln K or diverged";
  return chart;
}

// The compact table's "at lr" and "converged" cells: the gate's (a), a best rate at an edge of the
// range, marked where the rate is given, and its (b), as the Answer's convergence lines say it.
std::string best_rate_cell(const FirstScreenNumbers& numbers, const StudyRow& n) {
  const ConvergenceCheck& g = n.convergence;
  const bool edge =
      numbers.table.gated && (g.edge == ConvergenceCheck::Edge::low || g.edge == ConvergenceCheck::Edge::high);
  return format_rate(n.curve.best_lr()) +
         (edge ? g.edge == ConvergenceCheck::Edge::low ? " (lowest probed)" : " (highest probed)" : "");
}
std::string converged_cell(const FirstScreenNumbers& numbers, const StudyRow& n) {
  const ConvergenceCheck& g = n.convergence;
  return n.curve.empty() || !numbers.table.gated || g.runs == 0 ? "–"
         : !g.judged                                            ? "not judged"
         : g.converged                                          ? "yes"
         : g.improving > 0 ? fmt::format("no: {}/{} still improving", g.improving, g.runs)
                           : fmt::format("no: {}/{} solved or plateaued", g.solved + g.plateaued, g.runs);
}

// A search's three columns: the strict rule's boundary (the slow-inclusive one beside it where it
// differs), the ratio to none's (none where either row failed the gate; marked where the two rules
// disagree), and how the runs above the boundary failed.
void add_boundary_cells(const FirstScreenNumbers& numbers, const StudyRow& n, std::vector<std::string>& row) {
  std::string boundary = boundary_text(n.strict);
  if (const std::string slow = boundary_text(n.slow_inclusive); slow != boundary && slow != "–")
    boundary += " (slow-inclusive " + slow + ")";
  row.push_back(boundary);
  const BoundaryRatio ratio = numbers.ratio_to_none(n);
  row.push_back(!std::isfinite(ratio.ratio) ? "–"
                : n.rules_agree             ? ratio_with_interval(ratio)
                                            : ratio_with_interval(ratio) + " (rules disagree)");
  row.push_back(n.failures_short.empty() ? "–" : n.failures_short);
}

// The compact table: one row per variant and setting; the sensitivity column with several rates,
// the boundary columns in a search.
void add_compact_table(const Context& c, const FirstScreenNumbers& numbers, Section& sec) {
  const bool rates = c.plan.lrs.size() > 1, boundaries = c.plan.search.enabled();
  std::vector<std::vector<std::string>> rows;
  for (const StudyRow& n : numbers.table.rows) {
    std::vector<std::string> row{n.variant};
    if (c.plan.settings.size() > 1) row.push_back(short_setting(c, n.setting));
    row.push_back(n.curve.empty() ? "–" : fmt_interval(n.curve.mean[n.curve.best], 0));
    row.push_back(best_rate_cell(numbers, n));
    row.push_back(converged_cell(numbers, n));
    if (rates) row.push_back(n.sensitivity.interval.n > 0 ? fmt_interval(n.sensitivity.interval, 0) : "–");
    if (boundaries) add_boundary_cells(numbers, n, row);
    rows.push_back(row);
  }
  std::vector<std::string> header{"variant"};
  if (c.plan.settings.size() > 1) header.push_back("setting");
  for (const char* h : {"best held-out loss [95% CI]", "at lr", "converged"}) header.push_back(h);
  if (rates) header.push_back("LR sensitivity [95% CI]");
  if (boundaries)
    for (const char* h : {"boundary [95% CI]", "× none's", "above the boundary"}) header.push_back(h);
  sec.table_html = html_table(header, rows);
  sec.table_md = md_table(header, rows);
}

}  // namespace

Section answer_section(const Context& c, const FirstScreenNumbers& numbers) {
  Section sec;
  sec.title = "Answer";
  sec.bullets = verdict(c, numbers);
  if (c.plan.lrs.size() > 1)
    for (const std::string& setting : c.plan.settings)
      sec.charts.push_back({"headline" + c.setting_slug(setting), c.draw(headline_chart(c, numbers, setting))});
  add_compact_table(c, numbers, sec);
  return sec;
}

}  // namespace normlab::study::report_parts
