// The report's learning-rate sections: held-out accuracy and loss against the rate (Stability), and
// the learning-rate search's boundaries with their chart and table.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "normlab/study/search.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

namespace {

// One endpoint against the learning rate for one setting: per variant the mean over seeds with its
// 95% band and every seed as a point. A diverged seed is drawn at the value the interval counts
// (the uniform guess's accuracy), or not at all for the loss.
Chart endpoint_chart(const Context& c, const std::string& setting, Interval GroupSummary::*mean,
                     double (*per_seed)(const RunResult&), bool accuracy) {
  Chart chart;
  const std::string what = accuracy ? "held-out accuracy, trained lengths" : "held-out loss, trained lengths";
  chart.title = setting.empty() ? what : what + " — " + setting;
  chart.x_label = "learning rate (log)";
  chart.y_label = accuracy ? "accuracy (trained lengths)" : "loss (trained lengths, log)";
  chart.log_x = true;
  chart.log_y = !accuracy;
  if (!c.plan.search.enabled()) chart.x_ticks = c.plan.lrs;  // a search's many rates would overlap: plain log ticks
  if (accuracy) {
    chart.y_max = 1.0;
    chart.h_lines.push_back({kSolvedAccuracy, fmt::format("solved {:.2f}", kSolvedAccuracy)});
    if (c.chance_accuracy > 0)
      chart.h_lines.push_back({c.chance_accuracy, fmt::format("chance {:.3f}", c.chance_accuracy)});
  } else {
    c.add_chance_line(chart);
    if (c.loss_cap() > 0) chart.y_max = c.loss_cap();
  }
  const double lowest = 0.0, highest = accuracy ? 1.0 : INFINITY;
  for (const std::string& variant : c.plan.variants) {
    Series s;
    s.label = variant;
    s.color = c.colors.at(variant);
    s.markers = true;
    for (double lr : c.plan.lrs) {
      const GroupSummary* g = c.group(variant, lr, setting);
      if (!g || !std::isfinite((g->*mean).mean)) continue;
      const Interval& i = g->*mean;
      s.x.push_back(lr);
      s.y.push_back(i.mean);
      s.y_low.push_back(i.has_interval() ? std::max(lowest, i.low) : i.mean);
      s.y_high.push_back(i.has_interval() ? std::min(highest, i.high) : i.mean);
      s.crossed.push_back(2 * (g->diverged + g->exploded) > int(g->runs.size()));
      for (const RunResult* r : g->runs)
        if (r->finished || r->diverged) s.point_x.push_back(lr), s.point_y.push_back(per_seed(*r));
    }
    chart.series.push_back(s);
  }
  chart.note = fmt::format(
      "mean, band: 95% t interval over {} seeds per point{}; circles: seeds; X: most seeds "
      "diverged or exploded",
      c.fewest_seeds, c.fewest_seeds < kMinSeeds ? " (few)" : "");
  return chart;
}

// The learning-rate search's chart for one setting: per variant, the learned fraction at each tested
// rate (dots joined), the fitted logistic curve (dashed), each seed's outcome by the strict rule as a point at 1
// (learned) or 0 (not), spread along x by seed and stacked by variant, and the boundary's 95%
// interval as a bar at 0.5.
Chart search_chart(const Context& c, const std::string& setting, const std::vector<VariantBoundary>& boundaries) {
  Chart chart;
  chart.title = setting.empty() ? "learned fraction against learning rate" : "learned fraction — " + setting;
  chart.x_label = "learning rate (log)";
  chart.y_label = "fraction of seeds that learned";
  chart.log_x = true;
  chart.h_lines.push_back({0.5, "half"});
  const double nudge = 0.03, seed_spread = 0.04;  // stacking per variant (y) and per seed (ln lr)
  const auto series_of = [](const std::string& label, const std::string& color) {
    Series s;
    s.label = label;
    s.color = color;
    return s;
  };
  for (size_t vi = 0; vi < boundaries.size(); ++vi) {
    const VariantBoundary& vb = boundaries[vi];
    const std::string& color = c.colors.at(vb.variant);
    Series fraction = series_of(vb.variant, color);
    fraction.markers = true;
    for (const RateOutcome& r : vb.tested)
      if (r.runs > 0) fraction.x.push_back(r.lr), fraction.y.push_back(r.fraction());
    chart.series.push_back(fraction);
    Series seeds = series_of("", color);  // one point per run, NaN between them so no line joins them
    seeds.markers = true;
    for (const GroupSummary& g : c.groups) {
      if (g.variant != vb.variant || g.setting != setting) continue;
      for (size_t k = 0; k < g.runs.size(); ++k) {
        const Outcome o = classify(*g.runs[k]);
        if (o == Outcome::unfinished || o == Outcome::not_evaluated) continue;
        const double spread = seed_spread * (double(k) - 0.5 * double(g.runs.size() - 1));
        seeds.x.push_back(g.lr * std::exp(spread));
        // The strict rule, as the fit drawn over these dots (a slow run below the learned level is a failure).
        seeds.y.push_back(learned_by(*g.runs[k], LearnedRule::strict) ? 1 + nudge * double(vi + 1)
                                                                      : -nudge * double(vi + 1));
        seeds.x.push_back(NAN);
        seeds.y.push_back(NAN);
      }
    }
    chart.series.push_back(seeds);
    if (vb.fit.kind != BoundaryFit::Kind::boundary) continue;
    Series curve = series_of("", color);
    curve.dashed = true;
    for (int i = 0; i <= 40; ++i) {
      const double lr = vb.fit.peak_lr * std::pow(vb.fit.top_lr / vb.fit.peak_lr, i / 40.0);
      curve.x.push_back(lr);
      curve.y.push_back(vb.fit.p_learned(lr));
    }
    chart.series.push_back(curve);
    Series interval = series_of("", color);  // the boundary with its interval: a bar at 0.5, dots at its ends
    interval.markers = true;
    const double bar_y = 0.5 + 1.2 * nudge * (double(vi) - 0.5 * double(boundaries.size() - 1));  // bars side by side
    interval.x = {vb.fit.low, vb.fit.lr50, vb.fit.high};
    interval.y = {bar_y, bar_y, bar_y};
    interval.y_low = {bar_y - 0.4 * nudge, bar_y - 0.4 * nudge, bar_y - 0.4 * nudge};
    interval.y_high = {bar_y + 0.4 * nudge, bar_y + 0.4 * nudge, bar_y + 0.4 * nudge};
    chart.series.push_back(interval);
  }
  chart.note = "joined dots: learned fraction; dots at 0 and 1: seeds; dashed: fit; bars at 0.5: boundary, 95% CI";
  return chart;
}

}  // namespace

Section stability_section(const Context& c) {
  Section sec;
  sec.title = "Stability: held-out accuracy and loss against learning rate";
  sec.text =
      "On trained lengths at the last evaluation: the mean over seeds with its 95% interval as a band and "
      "each seed as a small circle. An X marks a learning rate at which most seeds diverged or exploded. "
      "Accuracy: the dashed line is the 'solved' level, the dotted grey one the chance accuracy c. Loss (the "
      "endpoint that does not saturate): the grey line is the uniform guess's ln K; a diverged seed has no "
      "loss and no circle.";
  for (const std::string& setting : c.plan.settings) {
    sec.charts.push_back(
        {"stability" + c.setting_slug(setting), c.draw(endpoint_chart(
                                                    c, setting, &GroupSummary::trained_accuracy,
                                                    [](const RunResult& r) { return r.judged_accuracy(); }, true))});
    sec.charts.push_back({"stability-loss" + c.setting_slug(setting),
                          c.draw(endpoint_chart(
                              c, setting, &GroupSummary::trained_loss,
                              [](const RunResult& r) { return r.diverged ? NAN : r.final_trained().loss; }, false))});
  }
  return sec;
}

// "Learning-rate boundary": the search's chart per setting and a table of the boundaries.
Section search_section(const Context& c) {
  Section sec;
  sec.title = "Learning-rate boundary: where each variant stops learning";
  sec.text = fmt::format(
      "The learning-rate search (docs/compare.md): round 0 ran {} log-spaced rates from {:g} to {:g}, each later round "
      "(up to {}) the geometric midpoints where the learned fraction changes above the rate where most seeds learned. "
      "P(learned) is fitted against ln lr by a logistic on the rates at or above that peak (Firth's penalized "
      "likelihood); the boundary is the rate where half the seeds learn, its 95% interval from the profile likelihood. "
      "'>' or '<': the interval runs past the searched range.",
      c.plan.search.points, c.plan.search.from, c.plan.search.to, c.plan.search.rounds);
  const std::vector<VariantBoundary> all = lr_boundaries(c.plan, c.groups);
  std::vector<std::vector<std::string>> rows;
  for (const std::string& setting : c.plan.settings) {
    std::vector<VariantBoundary> here;
    for (const VariantBoundary& vb : all)
      if (vb.setting == setting) here.push_back(vb);
    sec.charts.push_back({"search" + c.setting_slug(setting), c.draw(search_chart(c, setting, here))});
    for (const VariantBoundary& vb : here) {
      const BoundaryFit& f = vb.fit;
      std::string tested;
      for (const RateOutcome& r : vb.tested)
        tested += fmt::format("{}{} {}/{}", tested.empty() ? "" : ", ", format_rate(r.lr), r.learned, r.runs);
      const bool fitted = f.kind == BoundaryFit::Kind::boundary;
      std::vector<std::string> row{vb.variant};
      if (c.plan.settings.size() > 1) row.push_back(setting);
      row.push_back(fitted                                       ? format_rate(f.lr50)
                    : f.kind == BoundaryFit::Kind::never_failed  ? "> " + format_rate(f.top_lr)
                    : f.kind == BoundaryFit::Kind::never_learned ? "never learned"
                                                                 : "–");
      row.push_back(fitted ? fmt::format("{}{} – {}{}", f.low_open ? "< " : "", format_rate(f.low),
                                         f.high_open ? "> " : "", format_rate(f.high))
                           : "");
      row.push_back(tested);
      rows.push_back(row);
    }
  }
  std::vector<std::string> header{"variant"};
  if (c.plan.settings.size() > 1) header.push_back("setting");
  for (const char* h : {"boundary (half learn)", "95% interval", "learned/finished per rate"}) header.push_back(h);
  sec.table_html = html_table(header, rows);
  sec.table_md = md_table(header, rows);
  return sec;
}

}  // namespace normlab::study::report_parts
