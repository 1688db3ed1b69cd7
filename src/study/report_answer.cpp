// The report's first screen: a verdict of at most three plain sentences, the headline figure (final
// held-out loss against learning rate, every variant in one panel per setting) and one compact table
// (variant x setting). Everything else follows under headings (render.cpp adds the contents).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "normlab/study/search.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

namespace {

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

std::string ratio_text(double r) { return format_ratio(r); }

std::string ratio_with_interval(const BoundaryRatio& r) {
  return fmt::format("{} [{}, {}]", ratio_text(r.ratio), r.low_open ? "<" + ratio_text(r.low) : ratio_text(r.low),
                     r.high_open ? ">" + ratio_text(r.high) : ratio_text(r.high));
}

// The seeds' capped losses at the row's best rate (LossCurve: min(loss, ln K), diverged = ln K).
std::vector<double> best_values(const StudyRow& r) {
  std::vector<double> out;
  if (!r.curve.empty())
    for (double v : r.curve.loss[r.curve.best])
      if (std::isfinite(v)) out.push_back(v);
  return out;
}

// The row's best loss, mean over seeds (the table's and the headline figure's).
double best_mean(const StudyRow& r) { return r.curve.best_loss(); }

// Why the gate failed for `r` (gate_sentences' reasons, in the first screen's words).
std::string why_not_converged(const Context& c, const StudyRow& r) {
  const ConvergenceCheck& g = r.convergence;
  const std::string where =
      fmt::format("{}lr {}", r.setting.empty() ? "" : short_setting(c, r.setting) + ", ", format_rate(g.best_lr));
  if (g.improving > 0)
    return fmt::format("{}'s best runs ({}) are still improving at step {}", r.variant, where, g.last_step);
  return fmt::format("{}'s best runs ({}) neither solved nor plateaued by step {}", r.variant, where, g.last_step);
}

// Rows of one kind that have a curve, in settings order.
std::vector<const StudyRow*> of_kind(const Context& c, const FirstScreenNumbers& numbers, const std::string& kind) {
  std::vector<const StudyRow*> out;
  for (const StudyRow& r : numbers.table.rows)
    if (variant_kind(c.plan, r.variant) == kind && !r.curve.empty()) out.push_back(&r);
  return out;
}

std::string boundary_text(const BoundaryFit& f) {
  return f.kind == BoundaryFit::Kind::boundary
             ? fmt::format("{} [{}{}, {}{}]", format_rate(f.lr50), f.low_open ? "<" : "", format_rate(f.low),
                           f.high_open ? ">" : "", format_rate(f.high))
         : f.kind == BoundaryFit::Kind::never_failed  ? "> " + format_rate(f.top_lr)
         : f.kind == BoundaryFit::Kind::never_learned ? "learned at no rate"
                                                      : "–";
}

}  // namespace

std::vector<std::string> verdict(const Context& c, const FirstScreenNumbers& numbers) {
  std::vector<const StudyRow*> judged;
  for (const StudyRow& r : numbers.table.rows)
    if (!r.curve.empty()) judged.push_back(&r);
  if (judged.empty()) return {"No run has a held-out loss yet: nothing to judge."};
  // The gate's verdicts (StudyTable::not_converged): the rows the Answer opens "not converged:" on.
  std::vector<const StudyRow*> unconverged = numbers.table.not_converged();
  if (!unconverged.empty()) {
    // A LayerNorm placement's failure first: it is what the reader came for.
    const auto placement = [&](const StudyRow* r) {
      const std::string kind = variant_kind(c.plan, r->variant);
      return kind == "pre-ln" || kind == "post-ln";
    };
    std::stable_sort(unconverged.begin(), unconverged.end(),
                     [&](const StudyRow* a, const StudyRow* b) { return placement(a) > placement(b); });
    std::vector<std::string> out{
        fmt::format("Not converged: {} — the boundaries and ratios below describe an unfinished "
                    "race, not stability.",
                    why_not_converged(c, *unconverged.front()))};
    out.push_back(
        fmt::format("{} of {} variant–setting cells did not converge; run longer (or widen the learning "
                    "rates) before reading the comparison; the table shows how far each got.",
                    unconverged.size(), judged.size()));
    return out;
  }
  const auto post = of_kind(c, numbers, "post-ln"), pre = of_kind(c, numbers, "pre-ln"),
             none = of_kind(c, numbers, "none");
  std::vector<std::string> out, clear;  // clear: the differences whose 95% interval excludes none
  int claims = 0;
  const auto loss = [](double v) { return fmt::format("{:.3g}", v); };
  std::string winner;
  const auto sens = [](const StudyRow& r) { return r.sensitivity.interval.mean; };
  if (!post.empty() && !pre.empty()) {
    // Which placement: the one that tolerates more learning rates (lower LR sensitivity, paired by
    // seed), per setting; best losses near zero differ by noise far more often than by placement.
    std::string parts;
    int pre_wins = 0, settings = 0;
    for (const StudyRow* r : pre)
      for (const StudyRow* p : post) {
        if (p->setting != r->setting || !std::isfinite(sens(*r)) || !std::isfinite(sens(*p))) continue;
        ++settings;
        const bool pre_better = sens(*r) <= sens(*p);
        pre_wins += pre_better;
        const Interval d = sensitivity_difference(r->sensitivity, p->sensitivity).difference;
        ++claims;
        if (d.has_interval() && !d.contains_zero())
          clear.push_back(fmt::format("{} vs {} ({})", r->variant, p->variant, short_setting(c, r->setting)));
        if (c.plan.settings.size() <= 3)
          parts += fmt::format("{}{} vs {}{}", parts.empty() ? "" : ", ", loss(pre_better ? sens(*r) : sens(*p)),
                               loss(pre_better ? sens(*p) : sens(*r)),
                               c.plan.settings.size() > 1 ? " (" + short_setting(c, r->setting) + ")" : "");
      }
    if (settings > 0) {
      winner = pre_wins * 2 >= settings ? pre.front()->variant : post.front()->variant;
      const std::string loser = winner == pre.front()->variant ? post.front()->variant : pre.front()->variant;
      const bool all = pre_wins == settings || pre_wins == 0;
      out.push_back(
          fmt::format("{} tolerates a wider range of learning rates than {}{}: LR sensitivity{}.", winner, loser,
                      all ? (settings > 1 ? " in every setting" : "")
                          : fmt::format(" in {} of {} settings", std::max(pre_wins, settings - pre_wins), settings),
                      parts.empty() ? " lower" : " (" + winner + " vs " + loser + ", nats) " + parts));
    } else {
      winner = pre.front()->variant;
    }
  } else if (!post.empty() || !pre.empty()) {
    winner = (pre.empty() ? post : pre).front()->variant;
  } else {
    // No LayerNorm placement: the variant with the lowest best loss, per setting.
    std::string parts;
    for (const std::string& setting : c.plan.settings) {
      const StudyRow* best = nullptr;
      for (const StudyRow* n : judged)
        if (n->setting == setting && (!best || best_mean(*n) < best_mean(*best))) best = n;
      if (best)
        parts += fmt::format("{}{} {} at lr {}{}", parts.empty() ? "" : "; ", best->variant, loss(best_mean(*best)),
                             format_rate(best->curve.best_lr()),
                             c.plan.settings.size() > 1 ? " (" + short_setting(c, setting) + ")" : "");
    }
    out.push_back("Lowest best held-out loss: " + parts + ".");
  }
  if (!winner.empty() && !none.empty()) {
    // What the placement bought or cost against no normalization, per setting.
    std::string parts;
    for (const StudyRow* n : none) {
      const StudyRow* w = numbers.table.find(winner, n->setting);
      if (!w || w->curve.empty()) continue;
      std::string part = fmt::format("LR sensitivity {} vs {}", loss(sens(*w)), loss(sens(*n)));
      if (std::isfinite(sens(*w)) && std::isfinite(sens(*n))) {
        const Interval ds = sensitivity_difference(w->sensitivity, n->sensitivity).difference;
        ++claims;
        if (ds.has_interval() && !ds.contains_zero())
          clear.push_back(fmt::format("{} vs {} ({})", winner, n->variant, short_setting(c, n->setting)));
      }
      // The boundary ratio where the Answer states one without a caveat: both rules agree.
      if (const BoundaryRatio to_none = numbers.ratio_to_none(*w); std::isfinite(to_none.ratio) && w->rules_agree) {
        part += fmt::format(", boundary {} none's", ratio_with_interval(to_none));
        ++claims;
        if (!to_none.low_open && !to_none.high_open && (to_none.low > 1 || to_none.high < 1))
          clear.push_back(fmt::format("the boundary ratio ({})", short_setting(c, n->setting)));
      }
      // The best loss is said only where it differs beyond noise.
      const Interval diff = welch_difference(best_values(*w), best_values(*n));
      if (diff.has_interval() && !diff.contains_zero())
        part += fmt::format(", best loss {} {}", loss(std::abs(best_mean(*w) - best_mean(*n))),
                            best_mean(*w) < best_mean(*n) ? "lower" : "higher");
      if (c.plan.settings.size() <= 3 || parts.empty())
        parts += fmt::format("{}{}{}", parts.empty() ? "" : "; ", part,
                             c.plan.settings.size() > 1 ? " (" + short_setting(c, n->setting) + ")" : "");
    }
    if (!parts.empty()) out.push_back(fmt::format("Against no normalization ({} vs none): {}.", winner, parts));
  }
  // The gate's other two findings (gate_sentences): a best rate at an edge of the range, and a cell
  // whose runs are too short to judge. Neither withholds a number; both are said.
  std::vector<std::string> caveats;
  for (const StudyRow* r : numbers.table.not_bracketed())
    caveats.push_back(fmt::format("{}'s best rate{} is the {} probed", r->variant,
                                  c.plan.settings.size() > 1 ? " (" + short_setting(c, r->setting) + ")" : "",
                                  r->convergence.edge == ConvergenceCheck::Edge::low ? "lowest" : "highest"));
  for (const StudyRow* r : numbers.table.not_judged())
    caveats.push_back(fmt::format("convergence not judged for {}{}", r->variant,
                                  c.plan.settings.size() > 1 ? " (" + short_setting(c, r->setting) + ")" : ""));
  const std::string caveat = caveats.empty() ? "" : fmt::format("; {}", fmt::join(caveats, "; "));
  const size_t seeds = c.fewest_seeds;
  if (claims == 0)
    out.push_back(
        fmt::format("How sure: {} seeds per cell; the table gives each number's 95% interval{}.", seeds, caveat));
  else if (clear.empty())
    out.push_back(fmt::format("How sure: {} seeds per cell, and no difference above is outside its 95% interval{}.",
                              seeds, caveat));
  else
    out.push_back(fmt::format("How sure: {} seeds per cell; outside the 95% interval: {}{}{}.", seeds,
                              fmt::join(clear, ", "), int(clear.size()) < claims ? "; the rest is within noise" : "",
                              caveat));
  return out;
}

Section answer_section(const Context& c, const FirstScreenNumbers& numbers) {
  Section sec;
  sec.title = "Answer";
  sec.bullets = verdict(c, numbers);
  const bool rates = c.plan.lrs.size() > 1;
  const double ln_k = c.chance;
  if (rates)
    for (const std::string& setting : c.plan.settings) {
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
        // The line is the study's curve (LossCurve::mean); the circles are the runs' own losses, so
        // that a seed above the chart's top is marked there.
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
      sec.charts.push_back({"headline" + c.setting_slug(setting), c.draw(chart)});
    }
  const bool boundaries = c.plan.search.enabled();
  std::vector<std::vector<std::string>> rows;
  for (const StudyRow& n : numbers.table.rows) {
    std::vector<std::string> row{n.variant};
    if (c.plan.settings.size() > 1) row.push_back(short_setting(c, n.setting));
    const ConvergenceCheck& g = n.convergence;
    row.push_back(n.curve.empty() ? "–" : fmt_interval(n.curve.mean[n.curve.best], 0));
    // The gate's (a): a best rate at an edge of the range is marked where it is given.
    const bool edge =
        numbers.table.gated && (g.edge == ConvergenceCheck::Edge::low || g.edge == ConvergenceCheck::Edge::high);
    row.push_back(format_rate(n.curve.best_lr()) +
                  (edge ? g.edge == ConvergenceCheck::Edge::low ? " (lowest probed)" : " (highest probed)" : ""));
    // The gate's (b), as the Answer's convergence lines say it.
    row.push_back(n.curve.empty() || !numbers.table.gated || g.runs == 0 ? "–"
                  : !g.judged                                            ? "not judged"
                  : g.converged                                          ? "yes"
                  : g.improving > 0 ? fmt::format("no: {}/{} still improving", g.improving, g.runs)
                                    : fmt::format("no: {}/{} solved or plateaued", g.solved + g.plateaued, g.runs));
    if (rates) row.push_back(n.sensitivity.interval.n > 0 ? fmt_interval(n.sensitivity.interval, 0) : "–");
    if (boundaries) {
      // Strict rule, the slow-inclusive one beside it where it differs.
      std::string boundary = boundary_text(n.strict);
      if (const std::string slow = boundary_text(n.slow_inclusive); slow != boundary && slow != "–")
        boundary += " (slow-inclusive " + slow + ")";
      row.push_back(boundary);
      // No ratio where either row failed the gate; a ratio the two rules disagree on is marked.
      const BoundaryRatio ratio = numbers.ratio_to_none(n);
      row.push_back(!std::isfinite(ratio.ratio) ? "–"
                    : n.rules_agree             ? ratio_with_interval(ratio)
                                                : ratio_with_interval(ratio) + " (rules disagree)");
      row.push_back(n.failures_short.empty() ? "–" : n.failures_short);
    }
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
  return sec;
}

}  // namespace normlab::study::report_parts
