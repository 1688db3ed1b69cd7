// The report: a header saying what was run and by what, the Findings, a summary table, and the
// charts (stability, curves, inside the stack, accuracy by length). One function per section;
// build_report gathers them into the model (render.cpp draws it), write_report writes it.
#include "normlab/study/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "common.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/stats.hpp"
#include "normlab/provenance.hpp"
#include "normlab/study/class_metrics.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/study/search.hpp"
#include "normlab/study/svg.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;
using detail::format_lr;

namespace {

using Section = ReportSection;

// Everything the sections share.
struct Context {
  const ComparePlan& plan;
  const std::vector<RunResult>& results;
  std::vector<GroupSummary> groups;
  double chance;           // the uniform guess's loss
  double chance_accuracy;  // the best guess's accuracy over the runs (0: unknown)
  size_t fewest_seeds;     // in any cell
  bool has_batchnorm;      // some run normalizes with BatchNorm
  size_t window;                            // moving-average window of the curves, in steps
  std::map<std::string, std::string> colors;  // series label -> colour
  std::function<bool()> stop_requested;
  mutable int charts_drawn = 0;  // numbers each chart's clip path within this report

  const GroupSummary* group(const std::string& variant, double lr, const std::string& setting) const {
    for (const GroupSummary& g : groups)
      if (g.variant == variant && g.lr == lr && g.setting == setting) return &g;
    return nullptr;
  }
  std::string draw(const Chart& chart) const {
    if (stop_requested && stop_requested()) throw ReportStopped{};
    return render_svg(chart, ++charts_drawn);
  }
  // "-6-layers-no-warmup": a setting in a chart's file name ("" for the only setting).
  std::string setting_slug(const std::string& setting) const {
    if (plan.settings.size() <= 1 || setting.empty()) return "";
    std::string slug = "-";
    for (char ch : setting) {
      const bool keep = std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '=';
      if (keep) slug += ch;
      else if (slug.back() != '-') slug += '-';
    }
    while (slug.size() > 1 && slug.back() == '-') slug.pop_back();
    return slug;
  }
  // The learning rates the per-rate detail charts are drawn at: all of them when that is a handful
  // of charts, else the one where the variants differ most.
  std::vector<double> detail_lrs(const std::string& setting) const {
    if (plan.lrs.size() * plan.settings.size() <= 6) return plan.lrs;
    return {most_different_lr(plan, groups, setting)};
  }
  // Loss charts end at 10x the chance loss, so that one blown-up variant does not flatten the others.
  double loss_cap() const { return std::isfinite(chance) ? 10 * chance : 0; }
  void add_chance_line(Chart& chart) const {
    if (std::isfinite(chance)) chart.h_lines.push_back({chance, fmt::format("chance {:.3f}", chance)});
  }
};

// One fixed colour per variant in every report: a known variant name (or a label whose runs are all
// one known variant) gets the variant's colour; other labels share a palette in order.
std::map<std::string, std::string> series_colors(const ComparePlan& plan) {
  std::map<std::string, std::string> colors;
  std::set<std::string> used;
  for (const std::string& label : plan.variants) {
    std::string kind = find_variant(label) ? label : "";
    if (kind.empty()) {
      std::set<std::string> kinds;
      for (const RunSpec& r : plan.runs)
        if (r.variant == label && r.config.contains("model"))
          kinds.insert(variant_of(r.config["model"].value("norm", ""), r.config["model"].value("placement", "")));
      if (kinds.size() == 1) kind = *kinds.begin();
    }
    const Variant* v = kind.empty() ? nullptr : find_variant(kind);
    if (v && !used.count(v->color)) {
      colors[label] = v->color;
      used.insert(v->color);
    }
  }
  size_t next = 0;
  for (const std::string& label : plan.variants) {
    if (colors.count(label)) continue;
    while (used.count(palette(next))) ++next;
    colors[label] = palette(next);
    used.insert(palette(next));
  }
  return colors;
}

std::string fmt_num(double v, const char* spec = "{:.3f}") {
  if (!std::isfinite(v)) return "–";
  if (std::abs(v) >= 1e4) return fmt::format("{:.2g}", v);
  return fmt::format(fmt::runtime(spec), v);
}

std::string html_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table><tr>";
  for (const std::string& h : header) out += "<th>" + xml_escape(h) + "</th>";
  out += "</tr>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const std::string& c : row) out += "<td>" + xml_escape(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "|";
  for (const std::string& h : header) out += " " + h + " |";
  out += "\n|";
  for (size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& row : rows) {
    out += "|";
    for (const std::string& c : row) out += " " + c + " |";
    out += "\n";
  }
  return out;
}

// "lr 0.01, 4 layers, no warmup": a chart's learning rate and setting.
std::string where(double lr, const std::string& setting) {
  return "lr " + format_lr(lr) + (setting.empty() ? "" : ", " + setting);
}

// Median and min-max over seeds of a per-step series, smoothed by a trailing moving average.
Series curve(const GroupSummary& g, const std::vector<double> RunResult::*field, const std::string& color,
             size_t window) {
  Series s;
  s.label = g.variant;
  s.color = color;
  size_t longest = 0;
  for (const RunResult* r : g.runs) longest = std::max(longest, (r->*field).size());
  std::vector<std::vector<double>> smoothed;
  for (const RunResult* r : g.runs) {
    const std::vector<double>& v = r->*field;
    std::vector<double> out(v.size());
    double acc = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      acc += v[i];
      if (i >= window) acc -= v[i - window];
      out[i] = acc / double(std::min(i + 1, window));
    }
    smoothed.push_back(out);
  }
  for (size_t i = 0; i < longest; ++i) {
    std::vector<double> at;
    double step = double(i + 1);
    for (size_t k = 0; k < g.runs.size(); ++k)
      if (i < smoothed[k].size()) {
        at.push_back(smoothed[k][i]);
        step = g.runs[k]->steps[i];
      }
    at.erase(std::remove_if(at.begin(), at.end(), [](double x) { return !std::isfinite(x); }), at.end());
    if (at.empty()) continue;
    s.x.push_back(step);
    s.y.push_back(median(at));
    s.y_low.push_back(*std::min_element(at.begin(), at.end()));
    s.y_high.push_back(*std::max_element(at.begin(), at.end()));
  }
  return s;
}

// "0.912 [0.880, 0.944]": a mean with its 95% interval (no interval from one seed), the interval
// cut to the values the quantity can take (an accuracy stays in [0, 1], a loss above 0).
std::string fmt_interval(const Interval& i, double lowest = -INFINITY, double highest = INFINITY) {
  if (!std::isfinite(i.mean)) return "–";
  if (!i.has_interval()) return fmt_num(i.mean);
  return fmt::format("{} [{}, {}]", fmt_num(i.mean), fmt_num(std::max(lowest, i.low)), fmt_num(std::min(highest, i.high)));
}

Section answer_section(const Context& c) {
  Section sec;
  sec.title = "Answer";
  sec.text = "Computed from the runs: held-out data in evaluation mode, trained and unseen lengths apart, "
             "'learned' and 'solved' as defined under Findings, differences paired by seed with 95% t intervals.";
  sec.bullets = answer(c.plan, c.groups);
  return sec;
}

Section findings_section(const Context& c) {
  Section sec;
  sec.title = "Findings";
  const double c_example = 0.1;
  sec.text = fmt::format(
      "Each run is judged at its last evaluation on held-out data of trained lengths (eval mode), against "
      "c = the better of a uniform guess and always answering the training data's most frequent label, and named "
      "from its own diagnostics, in this order: diverged = stopped on a non-finite loss or gradient; exploded = "
      "held-out loss above {:g}x the uniform guess's ln K; solved = accuracy >= {:.2f}; slow = above c + "
      "{:.2f}(1 - c) with the held-out loss falling at each of the last {} evaluations and by >= {:.0f}% over them "
      "(counted as learned: still improving when the budget ended); learned = accuracy >= c + {:.2f}(1 - c) (for "
      "c = {}: {:.3f}); exploded = short of learned with a block's residual RMS grown over {:g}x its first logged "
      "value; collapsed = at chance or one label for >= {:.0f}% of predictions, with the first half of the blocks' "
      "gradient norms below {:g}x the last block's at the last diagnostics step; weak = above c + {:.2f}(1 - c); "
      "at chance = below it. 'Most seeds' = more than half. Comparisons are against {} at the same learning rate "
      "and setting, per seed (paired), on three trained-length endpoints: held-out loss (it does not saturate), the "
      "area under the held-out accuracy curve over steps (normalised to [0, 1]; rewards learning early) and the "
      "final accuracy. Each gets a difference test (t) and an equivalence test (two one-sided t tests against the "
      "margin), all p-values of the report Holm-adjusted together; the words are differs / equivalent within ±m / "
      "undecided (with about how many seeds would decide). Intervals printed are unadjusted 95% t intervals. A "
      "diverged seed counts as a uniform guess in accuracy and is left out of loss. docs/compare.md defines every "
      "word.",
      kBlowUpFactor, kSolvedAccuracy, kChanceShare, kSlowEvaluations, 100 * kSlowDrop, kLearnedShare, c_example,
      c_example + kLearnedShare * (1 - c_example), kExplodeRmsFactor, 100 * kConstantPredictionShare,
      kCollapseGradRatio, kChanceShare, reference_variant(c.plan));
  sec.bullets = findings(c.plan, c.groups);
  return sec;
}

// "3 solved, 2 slow": a cell's outcome counts, most successful first.
std::string outcome_counts(const GroupSummary& g) {
  std::string out;
  for (const auto& [count, word] :
       {std::pair{g.solved, "solved"}, std::pair{g.learned, "learned"}, std::pair{g.slow, "slow"},
        std::pair{g.weak, "weak"}, std::pair{g.at_chance, "at chance"}, std::pair{g.collapsed, "collapsed"},
        std::pair{g.exploded, "exploded"}, std::pair{g.diverged, "diverged"}})
    if (count > 0) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", count, word);
  return out.empty() ? "–" : out;
}

Section summary_section(const Context& c) {
  Section sec;
  sec.title = "Summary: held-out metrics per cell, mean [95% interval] over seeds";
  sec.text = fmt::format(
      "n = seeds in the cell; intervals are cut to the possible range (accuracy 0–1, loss >= 0). Outcomes count seeds. Accuracy AUC: area under the held-out trained-length accuracy curve over steps, normalised to [0, 1]. "
      "Trained and unseen accuracy and loss are from the last evaluation (eval mode{}); loss leaves diverged seeds "
      "out. Final train loss (median over seeds, training mode, mean of the last 10% of steps) is a column, not a "
      "judge. Steps to solve: median first evaluation step at trained accuracy >= {:.2f} (k/n seeds that reached "
      "it). Spikes: steps whose train loss exceeds {:g}x the median of the previous {} and that median by more "
      "than {:g}x the first step's loss (a run of such steps counts once), mean per seed. Peak grad norm: largest global gradient norm before clipping, median over seeds.{}",
      c.has_batchnorm ? ": BatchNorm uses its running averages; every other variant computes exactly what it computed "
                        "in training"
                      : ": dropout off",
      kSolvedAccuracy, kSpikeFactor, kSpikeWindow, kSpikeMinRise, c.fewest_seeds < kMinSeeds ? fmt::format(" Warning: cells with fewer than {} seeds have wide intervals.", kMinSeeds)
                                 : "");
  std::vector<std::vector<std::string>> rows;
  for (const GroupSummary& g : c.groups) {
    std::vector<std::string> row{g.variant, format_lr(g.lr)};
    if (c.plan.settings.size() > 1) row.push_back(g.setting);
    const size_t n = g.runs.size();
    const std::string solve = g.reached_solve > 0 ? fmt::format("{:.0f} ({}/{})", g.steps_to_solve, g.reached_solve, n)
                                                  : fmt::format("– (0/{})", n);
    for (const std::string& cell :
         {fmt::format("{}{}", n, n < kMinSeeds ? " (!)" : ""),
          outcome_counts(g), fmt_interval(g.trained_accuracy, 0, 1), fmt_interval(g.trained_loss, 0),
          fmt_interval(g.accuracy_auc, 0, 1), fmt_interval(g.unseen_accuracy, 0, 1),
          fmt_interval(g.unseen_loss, 0), fmt_num(g.train_loss), solve, fmt_num(g.loss_spikes, "{:.1f}"),
          fmt_num(g.peak_grad_norm, "{:.3g}")})
      row.push_back(cell);
    rows.push_back(row);
  }
  std::vector<std::string> header{"variant", "lr"};
  if (c.plan.settings.size() > 1) header.push_back("setting");
  for (const char* h : {"n", "outcomes", "trained acc", "trained loss", "accuracy AUC", "unseen acc", "unseen loss",
                        "final train loss", "steps to solve", "spikes", "peak grad norm"})
    header.push_back(h);
  sec.table_html = html_table(header, rows);
  sec.table_md = md_table(header, rows);
  return sec;
}

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
    if (c.chance_accuracy > 0) chart.h_lines.push_back({c.chance_accuracy, fmt::format("chance {:.3f}", c.chance_accuracy)});
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
  chart.note = fmt::format("mean, band: 95% t interval over {} seeds per point{}; circles: seeds; X: most seeds "
                           "diverged or exploded",
                           c.fewest_seeds, c.fewest_seeds < kMinSeeds ? " (few)" : "");
  return chart;
}

Section stability_section(const Context& c) {
  Section sec;
  sec.title = "Stability: held-out accuracy and loss against learning rate";
  sec.text = "On trained lengths at the last evaluation: the mean over seeds with its 95% interval as a band and "
             "each seed as a small circle. An X marks a learning rate at which most seeds diverged or exploded. "
             "Accuracy: the dashed line is the 'solved' level, the dotted grey one the chance accuracy c. Loss (the "
             "endpoint that does not saturate): the grey line is the uniform guess's ln K; a diverged seed has no "
             "loss and no circle.";
  for (const std::string& setting : c.plan.settings) {
    sec.charts.push_back({"stability" + c.setting_slug(setting),
                          c.draw(endpoint_chart(c, setting, &GroupSummary::trained_accuracy,
                                                [](const RunResult& r) { return r.judged_accuracy(); }, true))});
    sec.charts.push_back({"stability-loss" + c.setting_slug(setting),
                          c.draw(endpoint_chart(c, setting, &GroupSummary::trained_loss,
                                                [](const RunResult& r) { return r.diverged ? NAN : r.final_trained().loss; },
                                                false))});
  }
  return sec;
}

// The learning-rate search's chart for one setting: per variant, the learned fraction at each tested
// rate (dots joined), the fitted logistic curve (dashed), each seed's outcome as a point at 1
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
        seeds.y.push_back(has_learned(o) ? 1 + nudge * double(vi + 1) : -nudge * double(vi + 1));
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
      for (const RateOutcome& r : vb.tested) tested += fmt::format("{}{} {}/{}", tested.empty() ? "" : ", ", format_rate(r.lr), r.learned, r.runs);
      const bool fitted = f.kind == BoundaryFit::Kind::boundary;
      std::vector<std::string> row{vb.variant};
      if (c.plan.settings.size() > 1) row.push_back(setting);
      row.push_back(fitted ? format_rate(f.lr50)
                           : f.kind == BoundaryFit::Kind::never_failed ? "> " + format_rate(f.top_lr)
                           : f.kind == BoundaryFit::Kind::never_learned ? "never learned" : "–");
      row.push_back(fitted ? fmt::format("{}{} – {}{}", f.low_open ? "< " : "", format_rate(f.low), f.high_open ? "> " : "",
                                         format_rate(f.high))
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

// Median and min-max over seeds of one length group's held-out loss or accuracy at each evaluation.
Series eval_curve(const GroupSummary& g, HeldOut EvalPoint::*group, double HeldOut::*field, const std::string& label,
                  const std::string& color, bool dashed) {
  Series s;
  s.label = label;
  s.color = color;
  s.dashed = dashed;
  std::map<int64_t, std::vector<double>> at_step;
  for (const RunResult* r : g.runs)
    for (const EvalPoint& e : r->evals)
      if (const double v = e.*group.*field; std::isfinite(v)) at_step[e.step].push_back(v);
  for (const auto& [step, values] : at_step) {
    s.x.push_back(double(step));
    s.y.push_back(median(values));
    s.y_low.push_back(*std::min_element(values.begin(), values.end()));
    s.y_high.push_back(*std::max_element(values.begin(), values.end()));
  }
  return s;
}

Section validation_section(const Context& c) {
  Section sec;
  sec.title = "Validation curves: held-out loss and accuracy, trained (solid) and unseen (dashed) lengths";
  sec.text = "Every evaluation of every run, in eval mode: median over seeds with a min–max band. Trained lengths "
             "are those of the training data; unseen lengths are longer than any training sequence.";
  if (std::any_of(c.results.begin(), c.results.end(), [](const RunResult& r) { return r.single_length; }))
    sec.text += " Runs of a single-length regime trained on one length only: their shorter lengths count as unseen too.";
  const bool any_unseen = std::any_of(c.results.begin(), c.results.end(), [](const RunResult& r) {
    return std::any_of(r.evals.begin(), r.evals.end(), [](const EvalPoint& e) { return e.unseen.targets > 0; });
  });
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.plan.lrs)
      for (const bool accuracy : {false, true}) {
        Chart chart;
        chart.title = std::string(accuracy ? "held-out accuracy" : "held-out loss") + " — " + where(lr, setting);
        chart.x_label = "step";
        chart.y_label = accuracy ? "accuracy" : "loss (log)";
        chart.log_y = !accuracy;
        if (accuracy) {
          chart.y_max = 1.0;
          chart.h_lines.push_back({kSolvedAccuracy, "solved"});
        } else {
          c.add_chance_line(chart);
        }
        double HeldOut::*field = accuracy ? &HeldOut::accuracy : &HeldOut::loss;
        std::string off_top;
        for (const std::string& variant : c.plan.variants)
          if (const GroupSummary* g = c.group(variant, lr, setting)) {
            const Series trained = eval_curve(*g, &EvalPoint::trained, field, variant, c.colors.at(variant), false);
            const double peak = trained.y.empty() ? 0 : *std::max_element(trained.y.begin(), trained.y.end());
            if (!accuracy && c.loss_cap() > 0 && peak > c.loss_cap())
              off_top += fmt::format("{}{} (median up to {:.2g})", off_top.empty() ? "" : ", ", variant, peak);
            chart.series.push_back(trained);
            if (any_unseen)
              chart.series.push_back(eval_curve(*g, &EvalPoint::unseen, field, "", c.colors.at(variant), true));
          }
        if (!off_top.empty()) {
          chart.y_max = c.loss_cap();
          chart.note = "leaves the chart at the top: " + off_top;
        } else {
          chart.note = fmt::format("median and min–max over {} seeds{}", c.fewest_seeds,
                                   any_unseen ? "; solid: trained lengths, dashed: unseen lengths" : "");
        }
        sec.charts.push_back({fmt::format("valid-{}-lr{}{}", accuracy ? "accuracy" : "loss", format_lr(lr), c.setting_slug(setting)),
                              c.draw(chart)});
      }
  return sec;
}

Section curves_section(const Context& c, const std::vector<double> RunResult::*field, const std::string& name,
                       const std::string& y_label, bool chance_line, const std::string& slug) {
  Section sec;
  sec.title = name + " curves";
  sec.text = fmt::format("Training mode, every step: median over seeds with a min–max band, moving average over {} "
                         "steps. A curve that stops early belongs to a run that diverged.{}",
                         c.window, chance_line && std::isfinite(c.chance) ? " The dashed grey line is the uniform guess's loss." : "");
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.plan.lrs) {
      Chart chart;
      chart.title = where(lr, setting);
      chart.x_label = "step";
      chart.y_label = y_label;
      chart.log_y = true;
      if (chance_line) c.add_chance_line(chart);
      std::string off_top;
      for (const std::string& variant : c.plan.variants)
        if (const GroupSummary* g = c.group(variant, lr, setting)) {
          chart.series.push_back(curve(*g, field, c.colors.at(variant), c.window));
          const Series& s = chart.series.back();
          const double peak = s.y.empty() ? 0 : *std::max_element(s.y.begin(), s.y.end());
          if (chance_line && c.loss_cap() > 0 && peak > c.loss_cap())
            off_top += fmt::format("{}{} (median up to {:.2g})", off_top.empty() ? "" : ", ", variant, peak);
        }
      if (!off_top.empty()) {
        chart.y_max = c.loss_cap();
        chart.note = "leaves the chart at the top: " + off_top;
      }
      sec.charts.push_back({fmt::format("{}-lr{}{}", slug, format_lr(lr), c.setting_slug(setting)), c.draw(chart)});
    }
  return sec;
}

Section stack_section(const Context& c) {
  Section sec;
  sec.title = "Inside the stack: per-layer residual RMS and gradient norm";
  sec.text = "First diagnostics step (dashed) and last (solid), median over seeds. Without normalization nothing "
             "bounds the residual stream, so at a high learning rate its RMS can grow by orders of magnitude from "
             "block to block; post-LN re-normalizes it after every block, pre-LN lets it grow but normalizes what "
             "each sublayer reads. Drawn at every learning rate of the grid, or, for a large grid, at the one where "
             "the variants' held-out accuracies differ most.";
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.detail_lrs(setting))
      for (const auto& [init_field, end_field, what, slug] :
           {std::tuple{&RunResult::init_residual_rms, &RunResult::end_residual_rms, "residual RMS after block", "residual-rms"},
            std::tuple{&RunResult::init_layer_grad_norms, &RunResult::end_layer_grad_norms, "grad norm of block",
                       "block-grad-norm"}}) {
        Chart chart;
        chart.title = fmt::format("{} — {}", what, where(lr, setting));
        chart.x_label = "block";
        chart.integer_x = true;
        chart.y_label = std::string(what) + " (log)";
        chart.log_y = true;
        for (const std::string& variant : c.plan.variants) {
          const GroupSummary* g = c.group(variant, lr, setting);
          if (!g) continue;
          size_t blocks = 0;
          for (const RunResult* r : g->runs) blocks = std::max(blocks, (r->*end_field).size());
          for (bool at_end : {false, true}) {
            Series s;
            s.label = at_end ? variant : "";
            s.color = c.colors.at(variant);
            s.dashed = !at_end;
            s.markers = true;
            for (size_t layer = 0; layer < blocks; ++layer) {
              std::vector<double> values;
              for (const RunResult* r : g->runs) {
                const std::vector<double>& v = at_end ? r->*end_field : r->*init_field;
                if (layer < v.size() && std::isfinite(v[layer])) values.push_back(v[layer]);
              }
              s.x.push_back(double(layer));
              s.y.push_back(median(values));
              if (at_end)
                for (double v : values) s.point_x.push_back(double(layer)), s.point_y.push_back(v);
            }
            chart.series.push_back(s);
          }
        }
        chart.note = "median; dashed: first diagnostics step; solid: last, circles: its seeds";
        sec.charts.push_back({fmt::format("{}-lr{}{}", slug, format_lr(lr), c.setting_slug(setting)), c.draw(chart)});
      }
  return sec;
}

Section length_section(const Context& c) {
  Section sec;
  sec.title = "Accuracy per sequence length";
  sec.text = "Last evaluation, median over the seeds that did not diverge. The grey band holds lengths longer than "
             "any training sequence. Drawn at the same learning rates as the section above.";
  std::vector<std::vector<std::string>> rows;
  std::set<std::pair<int64_t, int64_t>> all_buckets;
  for (const GroupSummary& g : c.groups)
    for (const auto& [range, acc] : g.bucket_accuracy) all_buckets.insert(range);
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.detail_lrs(setting)) {
      Chart chart;
      chart.title = "accuracy by length — " + where(lr, setting);
      chart.x_label = "sequence length (bucket middle)";
      chart.y_label = "accuracy";
      for (const std::string& variant : c.plan.variants) {
        const GroupSummary* g = c.group(variant, lr, setting);
        if (!g) continue;
        Series s;
        s.label = variant;
        s.color = c.colors.at(variant);
        s.markers = true;
        std::vector<std::string> row{variant, where(lr, setting)};
        for (const auto& range : all_buckets) {
          auto it = g->bucket_accuracy.find(range);
          row.push_back(it == g->bucket_accuracy.end() ? "–" : fmt_num(it->second));
        }
        rows.push_back(row);
        for (const auto& [range, acc] : g->bucket_accuracy) {
          s.x.push_back(0.5 * double(range.first + range.second));
          s.y.push_back(acc);
          if (g->bucket_beyond_train.at(range)) {
            if (chart.shade_to <= chart.shade_from || range.first - 0.5 < chart.shade_from)
              chart.shade_from = double(range.first) - 0.5;
            chart.shade_to = std::max(chart.shade_to, double(range.second) + 0.5);
            chart.shade_label = "longer than trained";
          }
        }
        chart.series.push_back(s);
      }
      sec.charts.push_back({fmt::format("length-lr{}{}", format_lr(lr), c.setting_slug(setting)), c.draw(chart)});
    }
  std::vector<std::string> header{"variant", "at"};
  for (const auto& [lo, hi] : all_buckets) header.push_back(fmt::format("len {}–{}", lo, hi));
  sec.table_md = md_table(header, rows);
  return sec;
}

// The BatchNorm section, or nothing when the grid has no BatchNorm run.
std::optional<Section> batch_section(const Context& c) {
  const std::vector<BatchEvalCell> cells = batch_dependence(c.plan, c.results, c.groups, c.stop_requested);
  if (cells.empty()) return std::nullopt;
  Section sec;
  sec.title = "BatchNorm and its batch: the same trained models, evaluated four ways";
  sec.text =
      "LayerNorm's mean and variance are over each token's own features, so a model computes the same function in "
      "training and evaluation and a sequence's result does not depend on its batch-mates or their lengths. "
      "BatchNorm's are over the batch's real tokens per feature: at evaluation it uses running averages, and with "
      "batch statistics its answer depends on what else is in the batch. Each row evaluates the same checkpoints "
      "(every finished seed) on the held-out set: (1) with running averages; (2) IN-DISTRIBUTION BATCH DEPENDENCE: "
      "each batch's own statistics at the training batch size, over held-out sequences of trained lengths only, "
      "the kind of batch BatchNorm was trained on; (3) CONTAMINATION FROM UNSEEN LENGTHS: the same batch size over "
      "the whole held-out set, where sequences longer than any trained one share the batches: the change of "
      "trained-length accuracy from (2) to (3) is what unseen batch-mates do to the statistics, not batch "
      "dependence on trained data; (4) "
      "batch statistics over one sequence at a time (batch 1). Mean over seeds [95% interval]; 'max change' is the "
      "largest per-seed change of trained-length accuracy from the first row.";
  std::vector<std::vector<std::string>> rows;
  std::map<std::pair<std::string, std::string>, const BatchEvalCell*> first;
  for (const BatchEvalCell& cell : cells) {
    const auto key = std::pair{cell.variant, cell.setting};
    if (!first.count(key)) first[key] = &cell;
    const BatchEvalCell& base = *first[key];
    double max_change = 0;
    for (size_t i = 0; i < cell.trained.size() && i < base.trained.size(); ++i)
      max_change = std::max(max_change, std::abs(cell.trained[i] - base.trained[i]));
    std::vector<std::string> row{cell.variant, where(cell.lr, cell.setting), cell.mode.statistics, cell.mode.batches,
                                 std::to_string(cell.mode.batch_size), std::to_string(cell.seeds.size()),
                                 fmt_interval(t_interval(cell.trained), 0, 1),
                                 cell.mode.trained_lengths_only ? "—" : fmt_interval(t_interval(cell.unseen), 0, 1),
                                 fmt::format("{:.4f}", max_change)};
    rows.push_back(row);
  }
  const std::vector<std::string> header{"variant", "at", "normalized with", "held-out batches", "eval batch", "n",
                                        "trained acc", "unseen acc", "max change"};
  sec.table_html = html_table(header, rows);
  sec.table_md = md_table(header, rows);
  return sec;
}

// A formula a spreadsheet would run: text that begins with = + - @ (or a tab / carriage return,
// which some spreadsheets strip before looking), unless the whole cell is a number such as -0.5.
bool reads_as_formula(const std::string& text) {
  if (text.empty() || std::string_view("=+-@\t\r").find(text[0]) == std::string_view::npos) return false;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end != text.c_str() + text.size();
}

// One text cell of runs.csv / curves.csv: a formula-looking text gets a leading ' (the OWASP advice
// against CSV injection: the spreadsheet shows the text instead of running it), then RFC 4180
// quoting when the cell holds a comma, a quote, a line break or a leading / trailing space.
std::string csv_field(const std::string& text) {
  const std::string cell = reads_as_formula(text) ? "'" + text : text;
  if (cell.find_first_of(",\"\r\n") == std::string::npos && (cell.empty() || (cell.front() != ' ' && cell.back() != ' ')))
    return cell;
  std::string quoted = "\"";
  for (char ch : cell) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return quoted + "\"";
}

std::string runs_csv_of(const ComparePlan& plan, const std::vector<RunResult>& results) {
  std::string extra_header;
  for (const auto& [key, values] : plan.extra_axes) extra_header.append(",").append(csv_field(key));
  std::string csv = "name,variant,norm,placement,lr,layers,warmup,seed" + extra_header +
                    ",finished,diverged,diverged_at_step,outcome,steps_done,first_train_loss,final_train_loss,"
                    "trained_valid_loss,trained_valid_accuracy,unseen_valid_loss,unseen_valid_accuracy,"
                    "chance_accuracy,steps_to_solve,loss_spikes,peak_grad_norm,final_valid_loss,final_valid_accuracy,"
                    "accuracy_auc,outcome_evidence,wall_time_s\n";
  auto num = [](double v, const char* spec) { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : ""; };
  for (const RunResult& r : results) {
    const json m = r.spec.config.contains("model") ? r.spec.config["model"] : json::object();
    std::string extra;
    for (const auto& [key, value] : r.spec.extra) extra.append(",").append(csv_field(value));
    const int64_t solve = r.steps_to_solve();
    csv += fmt::format("{},{},{},{},{},{},{},{}{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                       csv_field(r.spec.name), csv_field(r.spec.variant), csv_field(m.value("norm", "")),
                       csv_field(m.value("placement", "")), format_lr(r.spec.lr),
                       r.spec.layers, r.spec.warmup ? 1 : 0, r.spec.seed, extra, r.finished ? 1 : 0, r.diverged ? 1 : 0,
                       r.diverged_at >= 0 ? std::to_string(r.diverged_at) : "", csv_field(outcome_name(classify(r))), r.steps.size(),
                       num(r.first_train_loss(), "{:.6g}"), num(r.final_train_loss, "{:.6g}"),
                       num(r.final_trained().loss, "{:.6g}"), num(r.final_trained().accuracy, "{:.6g}"),
                       num(r.final_unseen().loss, "{:.6g}"), num(r.final_unseen().accuracy, "{:.6g}"),
                       num(r.baseline.chance_accuracy(), "{:.6g}"), solve >= 0 ? std::to_string(solve) : "",
                       r.loss_spikes(), num(r.peak_grad_norm(), "{:.6g}"), num(r.final_valid_loss, "{:.6g}"),
                       num(r.final_valid_accuracy, "{:.6g}"), num(r.accuracy_auc(), "{:.6g}"),
                       csv_field(outcome_evidence(r)), num(r.wall_time_s, "{:.2f}"));
  }
  return csv;
}

// Every curve the charts draw, for re-plotting elsewhere: training steps and evaluations.
std::string curves_csv_of(const std::vector<RunResult>& results) {
  std::string csv = "run,variant,lr,seed,step,split,lengths,loss,accuracy\n";
  auto num = [](double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string(); };
  for (const RunResult& r : results) {
    const std::string prefix =
        fmt::format("{},{},{},{},", csv_field(r.spec.name), csv_field(r.spec.variant), format_lr(r.spec.lr), r.spec.seed);
    for (size_t i = 0; i < r.steps.size(); ++i)
      csv += fmt::format("{}{:.0f},train,all,{},{}\n", prefix, r.steps[i], num(i < r.loss.size() ? r.loss[i] : NAN),
                         num(i < r.accuracy.size() ? r.accuracy[i] : NAN));
    for (const EvalPoint& e : r.evals)
      for (const auto& [name, group] : {std::pair{"trained", &e.trained}, std::pair{"unseen", &e.unseen},
                                        std::pair{"all", &e.all}})
        if (group->targets > 0 || std::string(name) == "all")
          csv += fmt::format("{}{},valid,{},{},{}\n", prefix, e.step, name, num(group->loss), num(group->accuracy));
  }
  return csv;
}

// Which normlab, CPU and thread counts produced these runs.
struct Provenance {
  std::string version = NORMLAB_VERSION;
  std::string cpu = normlab::cpu_model();
  std::string kernels = normlab::kernels_in_use();
  std::vector<int64_t> threads;
  std::string text() const {
    std::string t;
    for (int64_t n : threads) t += (t.empty() ? "" : ", ") + std::to_string(n);
    return fmt::format("Produced by normlab {} ({} kernels) on {}; the runs used {} thread(s) each{}. A rerun with the same "
                       "thread count gives the same numbers on any of the fast kernel paths (generic, avx2, avx512); "
                       "the reference path rounds differently.",
                       version, kernels, cpu, t.empty() ? "?" : t, threads.size() > 1 ? " (different runs, different counts)" : "");
  }
};

Provenance provenance_of(const std::vector<RunResult>& results) {
  Provenance provenance;
  for (const RunResult& r : results)
    if (r.threads > 0 && std::find(provenance.threads.begin(), provenance.threads.end(), r.threads) == provenance.threads.end())
      provenance.threads.push_back(r.threads);
  return provenance;
}

Context make_context(const ComparePlan& plan, const std::vector<RunResult>& results, const train::RunConfig& base,
                     const std::function<bool()>& stop_requested) {
  Context c{plan, results, summarize(results), chance_loss(plan.base), 0, 0, false,
            size_t(std::max<int64_t>(1, base.train.steps / 40)), series_colors(plan), stop_requested};
  for (const RunResult& r : results) {
    if (std::isfinite(r.baseline.uniform_loss) && !std::isfinite(c.chance)) c.chance = r.baseline.uniform_loss;
    c.chance_accuracy = std::max(c.chance_accuracy, r.baseline.chance_accuracy());
  }
  c.has_batchnorm = std::any_of(results.begin(), results.end(), [](const RunResult& r) {
    return r.spec.config.contains("model") && r.spec.config["model"].value("norm", "") == "batchnorm";
  });
  for (size_t i = 0; i < c.groups.size(); ++i)
    c.fewest_seeds = i == 0 ? c.groups[i].runs.size() : std::min(c.fewest_seeds, c.groups[i].runs.size());
  return c;
}

// The one line of setup before the Answer: task, lengths, steps, seeds and the grid.
std::string setup_line(const Context& c, const train::RunConfig& base) {
  const ComparePlan& plan = c.plan;
  std::string grid;
  if (plan.title == "normlab report") {
    grid = fmt::format("{} run(s) from {}.", plan.runs.size(), plan.source);
  } else {
    std::string extra;
    for (const auto& [key, values] : plan.extra_axes) extra += fmt::format(" × {} values of {}", values.size(), key);
    grid = fmt::format("Grid: {} variants × {} learning rates × {} seeds × {} depths × {} warmup settings{} = {} runs.",
                       plan.variants.size(), plan.lrs.size(), plan.seeds.size(), plan.layers.size(),
                       plan.warmups.size(), extra, plan.runs.size());
  }
  std::string seeds;
  for (uint64_t s : plan.seeds) seeds += (seeds.empty() ? "" : ", ") + std::to_string(s);
  return fmt::format(
      "Task {}, trained on lengths {}–{} and evaluated on held-out lengths up to {}; {} steps of {}, batch {}; seeds "
      "{}. {}",
      train::task_title(base), base.task.min_len, base.task.max_len, base.task.eval_max_len, base.train.steps,
      optim::to_string(base.optim.name),
      base.train.batch_size, seeds.empty() ? "as given" : seeds, grid);
}

// The details after the Answer: the model, where the numbers came from, what LayerNorm computes,
// and one bullet per series.
Section setup_section(const Context& c, const train::RunConfig& base, const Provenance& provenance, bool batch_lesson) {
  Section about;
  about.title = "Setup";
  for (const std::string& name : c.plan.variants) {
    const Variant* v = find_variant(name);
    const std::string description =
        v ? v->description + "; block " + block_formula(v->norm, v->placement, base.model.final_norm) : "";
    about.bullets.push_back(fmt::format("{}{}", name, description.empty() ? "" : ": " + description));
  }
  const std::string details = fmt::format(
      "Model: d_model {}, {} heads, ffn {}, norm eps {:g}; uniform-guess loss {}; warmup {} steps where on; gradient "
      "clipping {}; weight decay {:g}.",
      base.model.d_model, base.model.heads, base.model.ffn, base.model.norm_eps,
      std::isfinite(c.chance) ? fmt::format("{:.3f}", c.chance) : "unknown", base.optim.warmup_steps,
      base.optim.clip_grad_norm > 0 ? fmt::format("at {:g}", base.optim.clip_grad_norm) : "off", base.optim.weight_decay);
  const std::string ln_fact =
      std::string("LayerNorm computes y = gamma * (x - mean) / sqrt(var + eps) + beta with mean and (biased) variance "
                  "over each token's own features, so training and evaluation compute the same function and a "
                  "sequence's result does not depend on its batch-mates or their lengths.") +
      (!c.has_batchnorm ? ""
       : batch_lesson   ? " BatchNorm's statistics are over the batch's tokens per feature, with running averages at "
                          "evaluation — the last section evaluates the same trained models both ways."
                        : " BatchNorm's statistics are over the batch's tokens per feature, with running averages at "
                          "evaluation.");
  about.text = details + " " + provenance.text() + " " + ln_fact;
  return about;
}

json summary_json(const Context& c, const Provenance& provenance, const std::vector<Section>& sections) {
  json summary = {{"normlab_version", provenance.version}, {"cpu", provenance.cpu}, {"kernels", provenance.kernels},
                  {"threads", provenance.threads}, {"runs", c.results.size()},
                  {"chance_loss", std::isfinite(c.chance) ? json(c.chance) : json(nullptr)},
                  {"reference", reference_variant(c.plan)}, {"seeds", c.plan.seeds}};
  std::map<std::string, int> outcomes;
  for (const RunResult& r : c.results) ++outcomes[outcome_name(classify(r))];
  summary["outcomes"] = outcomes;
  const EquivalenceMargins& m = c.plan.equivalence;
  summary["equivalence"] = {{"loss", m.loss}, {"accuracy_auc", m.accuracy_auc}, {"accuracy", m.accuracy},
                            {"from_config", m.from_config}};
  summary["answer"] = sections.front().bullets;
  summary["findings"] = sections[2].bullets;
  if (c.plan.search.enabled()) summary["lr_boundaries"] = boundaries_json(c.plan, c.groups);
  return summary;
}

}  // namespace

ReportModel build_report(const ComparePlan& plan, const std::vector<RunResult>& results,
                         const std::function<bool()>& stop_requested) {
  const train::RunConfig base = train::config_from_json(plan.base, plan.source, ".", false);
  const Context c = make_context(plan, results, base, stop_requested);
  std::vector<Section> sections;
  sections.push_back(answer_section(c));
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
  // The setup line, then the Answer; the details follow it.
  const Provenance provenance = provenance_of(results);
  sections.insert(sections.begin() + 1, setup_section(c, base, provenance, bn.has_value()));
  ReportModel report{plan.title, {setup_line(c, base)}, std::move(sections), {}};
  report.summary = summary_json(c, provenance, report.sections);
  return report;
}

std::string runs_csv(const ComparePlan& plan, const std::vector<RunResult>& results) {
  return runs_csv_of(plan, results);
}

std::string curves_csv(const std::vector<RunResult>& results) { return curves_csv_of(results); }

std::vector<std::string> write_report(const ComparePlan& plan, const std::vector<RunResult>& results, const std::string& out_dir,
                  const std::function<bool()>& stop_requested) {
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
  return report.sections.front().bullets;
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
