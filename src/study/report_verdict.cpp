// The first screen's verdict: at most three plain sentences, read from the study's table in a fixed
// order of rules. (1) A cell the convergence gate failed withholds the comparison. (2) Which
// LayerNorm placement tolerates more learning rates, or, with no placement in the study, the lowest
// best loss. (3) What that placement buys against no normalization. (4) How sure: seeds, the
// differences outside their 95% interval, and the gate's caveats.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "report_parts.hpp"

namespace normlab::study::report_parts {

namespace {

// The differences the verdict states, and those whose 95% interval excludes none (rule 4 says them).
struct Claims {
  int stated = 0;
  std::vector<std::string> clear;
};

std::string three_digits(double v) { return fmt::format("{:.3g}", v); }

double sensitivity_mean(const StudyRow& r) { return r.sensitivity.interval.mean; }

// " (no warmup)" after a figure when the study has more than one setting, else nothing.
std::string setting_note(const Context& c, const std::string& setting) {
  return c.plan.settings.size() > 1 ? " (" + short_setting(c, setting) + ")" : "";
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

// Rule 1: the rows the gate failed (StudyTable::not_converged), a LayerNorm placement's failure
// named first (it is what the reader came for); the comparison is withheld.
std::vector<std::string> not_converged_verdict(const Context& c, std::vector<const StudyRow*> unconverged,
                                               size_t judged) {
  const auto placement = [&](const StudyRow* r) {
    const std::string kind = variant_kind(c.plan, r->variant);
    return kind == "pre-ln" || kind == "post-ln";
  };
  std::stable_sort(unconverged.begin(), unconverged.end(),
                   [&](const StudyRow* a, const StudyRow* b) { return placement(a) > placement(b); });
  return {fmt::format("Not converged: {} — the boundaries and ratios below describe an unfinished "
                      "race, not stability.",
                      why_not_converged(c, *unconverged.front())),
          fmt::format("{} of {} variant–setting cells did not converge; run longer (or widen the learning "
                      "rates) before reading the comparison; the table shows how far each got.",
                      unconverged.size(), judged)};
}

// Rule 2, with both placements: the one that tolerates more learning rates (lower LR sensitivity,
// paired by seed), per setting; best losses near zero differ by noise far more often than by
// placement. The sentence is empty when no setting has both sensitivities.
struct PlacementVerdict {
  std::string winner, sentence;
};
PlacementVerdict which_placement(const Context& c, const std::vector<const StudyRow*>& pre,
                                 const std::vector<const StudyRow*>& post, Claims& claims) {
  std::string parts;
  int pre_wins = 0, settings = 0;
  for (const StudyRow* r : pre)
    for (const StudyRow* p : post) {
      const double sr = sensitivity_mean(*r), sp = sensitivity_mean(*p);
      if (p->setting != r->setting || !std::isfinite(sr) || !std::isfinite(sp)) continue;
      ++settings;
      const bool pre_better = sr <= sp;
      pre_wins += pre_better;
      const Interval d = sensitivity_difference(r->sensitivity, p->sensitivity).difference;
      ++claims.stated;
      if (d.has_interval() && !d.contains_zero())
        claims.clear.push_back(fmt::format("{} vs {} ({})", r->variant, p->variant, short_setting(c, r->setting)));
      if (c.plan.settings.size() <= 3)
        parts += fmt::format("{}{} vs {}{}", parts.empty() ? "" : ", ", three_digits(pre_better ? sr : sp),
                             three_digits(pre_better ? sp : sr), setting_note(c, r->setting));
    }
  if (settings == 0) return {pre.front()->variant, ""};
  const std::string winner = pre_wins * 2 >= settings ? pre.front()->variant : post.front()->variant;
  const std::string loser = winner == pre.front()->variant ? post.front()->variant : pre.front()->variant;
  const bool all = pre_wins == settings || pre_wins == 0;
  return {winner,
          fmt::format("{} tolerates a wider range of learning rates than {}{}: LR sensitivity{}.", winner, loser,
                      all ? (settings > 1 ? " in every setting" : "")
                          : fmt::format(" in {} of {} settings", std::max(pre_wins, settings - pre_wins), settings),
                      parts.empty() ? " lower" : " (" + winner + " vs " + loser + ", nats) " + parts)};
}

// Rule 2, with no LayerNorm placement: the variant with the lowest best loss, per setting.
std::string lowest_loss_sentence(const Context& c, const std::vector<const StudyRow*>& judged) {
  std::string parts;
  for (const std::string& setting : c.plan.settings) {
    const StudyRow* best = nullptr;
    for (const StudyRow* n : judged)
      if (n->setting == setting && (!best || best_mean(*n) < best_mean(*best))) best = n;
    if (best)
      parts +=
          fmt::format("{}{} {} at lr {}{}", parts.empty() ? "" : "; ", best->variant, three_digits(best_mean(*best)),
                      format_rate(best->curve.best_lr()), setting_note(c, setting));
  }
  return "Lowest best held-out loss: " + parts + ".";
}

// Rule 3's part for one setting: LR sensitivity, the boundary ratio where both rules agree, and the
// best loss only where it differs beyond noise.
std::string against_none_part(const Context& c, const FirstScreenNumbers& numbers, const std::string& winner,
                              const StudyRow& w, const StudyRow& n, Claims& claims) {
  std::string part =
      fmt::format("LR sensitivity {} vs {}", three_digits(sensitivity_mean(w)), three_digits(sensitivity_mean(n)));
  if (std::isfinite(sensitivity_mean(w)) && std::isfinite(sensitivity_mean(n))) {
    const Interval ds = sensitivity_difference(w.sensitivity, n.sensitivity).difference;
    ++claims.stated;
    if (ds.has_interval() && !ds.contains_zero())
      claims.clear.push_back(fmt::format("{} vs {} ({})", winner, n.variant, short_setting(c, n.setting)));
  }
  if (const BoundaryRatio to_none = numbers.ratio_to_none(w); std::isfinite(to_none.ratio) && w.rules_agree) {
    part += fmt::format(", boundary {} none's", ratio_with_interval(to_none));
    ++claims.stated;
    if (!to_none.low_open && !to_none.high_open && (to_none.low > 1 || to_none.high < 1))
      claims.clear.push_back(fmt::format("the boundary ratio ({})", short_setting(c, n.setting)));
  }
  const Interval diff = welch_difference(best_values(w), best_values(n));
  if (diff.has_interval() && !diff.contains_zero())
    part += fmt::format(", best loss {} {}", three_digits(std::abs(best_mean(w) - best_mean(n))),
                        best_mean(w) < best_mean(n) ? "lower" : "higher");
  return part;
}

// Rule 3: what the winning placement bought or cost against no normalization, per setting (every
// setting's part up to three settings, else the first).
std::string against_none_sentence(const Context& c, const FirstScreenNumbers& numbers, const std::string& winner,
                                  const std::vector<const StudyRow*>& none, Claims& claims) {
  std::string parts;
  for (const StudyRow* n : none) {
    const StudyRow* w = numbers.table.find(winner, n->setting);
    if (!w || w->curve.empty()) continue;
    const std::string part = against_none_part(c, numbers, winner, *w, *n, claims);
    if (c.plan.settings.size() <= 3 || parts.empty())
      parts += fmt::format("{}{}{}", parts.empty() ? "" : "; ", part, setting_note(c, n->setting));
  }
  return parts.empty() ? "" : fmt::format("Against no normalization ({} vs none): {}.", winner, parts);
}

// The gate's other two findings (gate_sentences): a best rate at an edge of the range, and a cell
// whose runs are too short to judge. Neither withholds a number; both are said: "; ..." or "".
std::string gate_caveats(const Context& c, const FirstScreenNumbers& numbers) {
  std::vector<std::string> caveats;
  for (const StudyRow* r : numbers.table.not_bracketed())
    caveats.push_back(fmt::format("{}'s best rate{} is the {} probed", r->variant, setting_note(c, r->setting),
                                  r->convergence.edge == ConvergenceCheck::Edge::low ? "lowest" : "highest"));
  for (const StudyRow* r : numbers.table.not_judged())
    caveats.push_back(fmt::format("convergence not judged for {}{}", r->variant, setting_note(c, r->setting)));
  return caveats.empty() ? "" : fmt::format("; {}", fmt::join(caveats, "; "));
}

// Rule 4: how sure the sentences above are.
std::string how_sure_sentence(size_t seeds, const Claims& claims, const std::string& caveat) {
  if (claims.stated == 0)
    return fmt::format("How sure: {} seeds per cell; the table gives each number's 95% interval{}.", seeds, caveat);
  if (claims.clear.empty())
    return fmt::format("How sure: {} seeds per cell, and no difference above is outside its 95% interval{}.", seeds,
                       caveat);
  return fmt::format("How sure: {} seeds per cell; outside the 95% interval: {}{}{}.", seeds,
                     fmt::join(claims.clear, ", "),
                     int(claims.clear.size()) < claims.stated ? "; the rest is within noise" : "", caveat);
}

}  // namespace

std::vector<std::string> verdict(const Context& c, const FirstScreenNumbers& numbers) {
  std::vector<const StudyRow*> judged;
  for (const StudyRow& r : numbers.table.rows)
    if (!r.curve.empty()) judged.push_back(&r);
  if (judged.empty()) return {"No run has a held-out loss yet: nothing to judge."};
  if (const std::vector<const StudyRow*> unconverged = numbers.table.not_converged(); !unconverged.empty())
    return not_converged_verdict(c, unconverged, judged.size());

  std::vector<std::string> out;
  Claims claims;
  const auto post = of_kind(c, numbers, "post-ln"), pre = of_kind(c, numbers, "pre-ln"),
             none = of_kind(c, numbers, "none");
  std::string winner;
  if (!post.empty() && !pre.empty()) {
    PlacementVerdict placement = which_placement(c, pre, post, claims);
    winner = placement.winner;
    if (!placement.sentence.empty()) out.push_back(std::move(placement.sentence));
  } else if (!post.empty() || !pre.empty()) {
    winner = (pre.empty() ? post : pre).front()->variant;
  } else {
    out.push_back(lowest_loss_sentence(c, judged));
  }
  if (!winner.empty() && !none.empty())
    if (std::string sentence = against_none_sentence(c, numbers, winner, none, claims); !sentence.empty())
      out.push_back(std::move(sentence));
  out.push_back(how_sure_sentence(c.fewest_seeds, claims, gate_caveats(c, numbers)));
  return out;
}

}  // namespace normlab::study::report_parts
