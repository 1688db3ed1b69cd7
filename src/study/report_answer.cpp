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

std::string ratio_text(double r) { return fmt::format("{:.2g}x", r); }

std::string ratio_with_interval(const BoundaryRatio& r) {
  return fmt::format("{} [{}, {}]", ratio_text(r.ratio), r.low_open ? "<" + ratio_text(r.low) : ratio_text(r.low),
                     r.high_open ? ">" + ratio_text(r.high) : ratio_text(r.high));
}

// The seeds' capped losses at the cell's best rate.
std::vector<double> best_values(const CellNumbers& n) {
  std::vector<double> out;
  for (size_t i = 0; i < n.rates.size(); ++i)
    if (n.rates[i] == n.best_lr)
      for (double v : n.capped[i])
        if (std::isfinite(v)) out.push_back(v);
  return out;
}

std::string why_not_converged(const Context& c, const CellNumbers& n) {
  if (n.best_at_edge)
    return fmt::format("{}'s best rate ({}) is the {} rate tried", n.variant, short_setting(c, n.setting),
                       n.best_lr == n.rates.front() ? "lowest" : "highest");
  int64_t step = 0;
  if (const GroupSummary* g = c.group(n.variant, n.best_lr, n.setting))
    for (const RunResult* r : g->runs)
      if (!r->evals.empty()) step = std::max(step, r->evals.back().step);
  return fmt::format("{}'s best runs ({}lr {}) are still improving at step {}", n.variant,
                     n.setting.empty() ? "" : short_setting(c, n.setting) + ", ", format_rate(n.best_lr), step);
}

// "pre-ln" cells of one kind, in settings order.
std::vector<const CellNumbers*> of_kind(const FirstScreenNumbers& numbers, const std::string& kind) {
  std::vector<const CellNumbers*> out;
  for (const CellNumbers& n : numbers.cells)
    if (n.kind == kind && std::isfinite(n.best_lr)) out.push_back(&n);
  return out;
}

}  // namespace

std::vector<std::string> verdict(const Context& c, const FirstScreenNumbers& numbers) {
  std::vector<const CellNumbers*> judged, unconverged;
  for (const CellNumbers& n : numbers.cells)
    if (std::isfinite(n.best_lr)) {
      judged.push_back(&n);
      if (!n.converged()) unconverged.push_back(&n);
    }
  if (judged.empty()) return {"No run has a held-out loss yet: nothing to judge."};
  if (!unconverged.empty()) {
    // A LayerNorm placement's failure first: it is what the reader came for.
    std::stable_sort(unconverged.begin(), unconverged.end(), [](const CellNumbers* a, const CellNumbers* b) {
      return (a->kind == "pre-ln" || a->kind == "post-ln") > (b->kind == "pre-ln" || b->kind == "post-ln");
    });
    std::vector<std::string> out{fmt::format("Not converged: {} — the boundaries and ratios below describe an unfinished "
                                             "race, not stability.",
                                             why_not_converged(c, *unconverged.front()))};
    out.push_back(fmt::format("{} of {} variant–setting cells did not converge; run longer (or widen the learning "
                              "rates) before reading the comparison; the table shows how far each got.",
                              unconverged.size(), judged.size()));
    return out;
  }
  const auto post = of_kind(numbers, "post-ln"), pre = of_kind(numbers, "pre-ln"), none = of_kind(numbers, "none");
  std::vector<std::string> out, clear;  // clear: the differences whose 95% interval excludes none
  int claims = 0;
  const auto loss = [](double v) { return fmt::format("{:.3g}", v); };
  std::string winner;
  if (!post.empty() && !pre.empty()) {
    // Which placement: the lower best held-out loss, per setting.
    std::string parts;
    int pre_wins = 0;
    for (const CellNumbers* r : pre)
      for (const CellNumbers* p : post) {
        if (p->setting != r->setting) continue;
        const bool pre_better = r->best_loss.mean <= p->best_loss.mean;
        pre_wins += pre_better;
        const Interval d = welch_difference(best_values(*r), best_values(*p));
        ++claims;
        if (d.has_interval() && !d.contains_zero())
          clear.push_back(fmt::format("{} vs {} ({})", r->variant, p->variant, short_setting(c, r->setting)));
        if (c.plan.settings.size() <= 3)
          parts += fmt::format("{}{} vs {} ({})", parts.empty() ? "" : ", ", loss(pre_better ? r->best_loss.mean : p->best_loss.mean),
                               loss(pre_better ? p->best_loss.mean : r->best_loss.mean), short_setting(c, r->setting));
      }
    const size_t settings = std::min(pre.size(), post.size());
    const bool all_pre = pre_wins == int(settings), all_post = pre_wins == 0;
    winner = pre_wins * 2 >= int(settings) ? pre.front()->variant : post.front()->variant;
    const std::string loser = winner == pre.front()->variant ? post.front()->variant : pre.front()->variant;
    if (all_pre || all_post)
      out.push_back(fmt::format("{} beats {}{}: best held-out loss {}.", winner, loser,
                                settings > 1 ? " in every setting" : "", parts.empty() ? "lower" : parts));
    else
      out.push_back(fmt::format("{} beats {} in {} of {} settings by best held-out loss{}.", winner, loser,
                                std::max(pre_wins, int(settings) - pre_wins), settings,
                                parts.empty() ? "" : " (winner vs loser: " + parts + ")"));
  } else if (!post.empty() || !pre.empty()) {
    winner = (pre.empty() ? post : pre).front()->variant;
  } else {
    // No LayerNorm placement: the variant with the lowest best loss, per setting.
    std::string parts;
    for (const std::string& setting : c.plan.settings) {
      const CellNumbers* best = nullptr;
      for (const CellNumbers* n : judged)
        if (n->setting == setting && (!best || n->best_loss.mean < best->best_loss.mean)) best = n;
      if (best)
        parts += fmt::format("{}{} {} at lr {}{}", parts.empty() ? "" : "; ", best->variant, loss(best->best_loss.mean),
                             format_rate(best->best_lr),
                             c.plan.settings.size() > 1 ? " (" + short_setting(c, setting) + ")" : "");
    }
    out.push_back("Lowest best held-out loss: " + parts + ".");
  }
  if (!winner.empty() && !none.empty()) {
    // What the placement bought or cost against no normalization, per setting.
    std::string parts;
    for (const CellNumbers* n : none) {
      const CellNumbers* w = numbers.cell(winner, n->setting);
      if (!w || !std::isfinite(w->best_lr)) continue;
      const double d = w->best_loss.mean - n->best_loss.mean;
      std::string part = fmt::format("best loss {} lower", loss(std::abs(d)));
      if (d > 0) part = fmt::format("best loss {} higher", loss(d));
      if (std::isfinite(w->to_none.ratio)) {
        part += fmt::format(", boundary {} none's", ratio_with_interval(w->to_none));
        ++claims;
        if (!w->to_none.low_open && !w->to_none.high_open && (w->to_none.low > 1 || w->to_none.high < 1))
          clear.push_back(fmt::format("the boundary ratio ({})", short_setting(c, n->setting)));
      }
      const Interval diff = welch_difference(best_values(*w), best_values(*n));
      ++claims;
      if (diff.has_interval() && !diff.contains_zero())
        clear.push_back(fmt::format("{} vs {} ({})", winner, n->variant, short_setting(c, n->setting)));
      if (c.plan.settings.size() <= 3 || parts.empty())
        parts += fmt::format("{}{}{}", parts.empty() ? "" : "; ", part,
                             c.plan.settings.size() > 1 ? " (" + short_setting(c, n->setting) + ")" : "");
    }
    if (!parts.empty()) out.push_back(fmt::format("Against no normalization, {}: {}.", winner, parts));
  }
  const size_t seeds = c.fewest_seeds;
  if (claims == 0)
    out.push_back(fmt::format("How sure: {} seeds per cell; the table gives each number's 95% interval.", seeds));
  else if (clear.empty())
    out.push_back(fmt::format("How sure: {} seeds per cell, and no difference above is outside its 95% interval.", seeds));
  else
    out.push_back(fmt::format("How sure: {} seeds per cell; outside the 95% interval: {}{}.", seeds, fmt::join(clear, ", "),
                              int(clear.size()) < claims ? "; the rest is within noise" : ""));
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
      chart.title = "final held-out loss against learning rate" + (setting.empty() ? "" : " — " + short_setting(c, setting));
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
      for (const CellNumbers& n : numbers.cells) {
        if (n.setting != setting) continue;
        Series s;
        s.label = n.variant;
        s.color = c.colors.at(n.variant);
        s.markers = true;
        for (size_t i = 0; i < n.rates.size(); ++i) {
          std::vector<double> values;
          for (double v : n.capped[i])
            if (std::isfinite(v)) values.push_back(v);
          if (values.empty()) continue;
          s.x.push_back(n.rates[i]);
          s.y.push_back(t_interval(values).mean);
        }
        for (double lr : n.rates)
          if (const GroupSummary* g = c.group(n.variant, lr, setting))
            for (const RunResult* r : g->runs)
              if (r->finished || r->diverged)
                s.point_x.push_back(lr), s.point_y.push_back(r->diverged ? INFINITY : r->final_trained().loss);
        chart.series.push_back(s);
      }
      chart.note = "line: mean over seeds of min(loss, ln K), diverged = ln K; circles: seeds; triangles: a seed "
                   "above 1.5 ln K or diverged";
      sec.charts.push_back({"headline" + c.setting_slug(setting), c.draw(chart)});
    }
  const bool boundaries = c.plan.search.enabled();
  std::vector<std::vector<std::string>> rows;
  for (const CellNumbers& n : numbers.cells) {
    std::vector<std::string> row{n.variant};
    if (c.plan.settings.size() > 1) row.push_back(short_setting(c, n.setting));
    row.push_back(std::isfinite(n.best_lr) ? fmt_interval(n.best_loss, 0) : "–");
    row.push_back(format_rate(n.best_lr));
    row.push_back(!std::isfinite(n.best_lr) ? "–"
                  : n.converged()          ? "yes"
                  : n.best_at_edge         ? "no: best rate at the edge"
                                           : fmt::format("no: {}/{} still improving", n.best_still_falling, n.best_runs));
    if (rates) row.push_back(std::isfinite(n.sensitivity.mean) ? fmt_interval(n.sensitivity, 0) : "–");
    if (boundaries) {
      const BoundaryFit* f = n.boundary ? &n.boundary->fit : nullptr;
      row.push_back(!f ? "–"
                    : f->kind == BoundaryFit::Kind::boundary
                        ? fmt::format("{} [{}{}, {}{}]", format_rate(f->lr50), f->low_open ? "<" : "", format_rate(f->low),
                                      f->high_open ? ">" : "", format_rate(f->high))
                    : f->kind == BoundaryFit::Kind::never_failed ? "> " + format_rate(f->top_lr)
                    : f->kind == BoundaryFit::Kind::never_learned ? "never learned"
                                                                   : "–");
      row.push_back(std::isfinite(n.to_none.ratio) ? ratio_with_interval(n.to_none) : "–");
      std::string failed;
      if (n.boundary)
        for (const auto& [how, count] : n.boundary->failures_above)
          failed += fmt::format("{}{} {}", failed.empty() ? "" : ", ", how, count);
      row.push_back(failed.empty() ? "–" : failed);
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
