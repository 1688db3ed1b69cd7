// The Answer paragraph and the Findings, computed from the runs (findings.hpp).
#include "normlab/study/findings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common.hpp"
#include "normlab/study/convergence.hpp"
#include "normlab/study/instability.hpp"
#include "normlab/study/search.hpp"

namespace normlab::study {

namespace {

std::string where(double lr, const std::string& setting, const ComparePlan& plan) {
  std::string out = plan.lrs.size() > 1 ? "lr " + detail::format_lr(lr) : "";
  if (plan.settings.size() > 1) out += (out.empty() ? "" : ", ") + setting;
  return out;
}

std::string lr_list(const std::vector<double>& lrs) {
  std::string out;
  for (double lr : lrs) out += (out.empty() ? "" : ", ") + detail::format_lr(lr);
  return out;
}

// "lengths 1–16" / "lengths 17–32" of the runs' task, when the config says; runs of a single-length
// regime (trained on max_len alone) are named apart: "lengths 1–16 (single-length runs: 16 only)".
std::string length_range(const ComparePlan& plan, bool unseen) {
  const train::TaskConfig& t = plan.base.task;
  const bool single = std::any_of(plan.runs.begin(), plan.runs.end(), [](const RunSpec& r) {
    return r.config.task.length_regime == data::LengthRegime::single;
  });
  const std::string shorter =
      single && t.max_len > t.min_len ? fmt::format(" (single-length runs: also {}–{})", t.min_len, t.max_len - 1) : "";
  if (!unseen)
    return fmt::format("lengths {}–{}{}", t.min_len, t.max_len,
                       single ? fmt::format(" (single-length runs: {} only)", t.max_len) : "");
  if (t.eval_max_len <= t.max_len) return "";
  return fmt::format("lengths {}–{}{}", t.max_len + 1, t.eval_max_len, shorter);
}

}  // namespace

namespace {

// The learning rates at which a variant was run at one setting, ascending: the grid's rates, or
// the rates a learning-rate search tried for this variant (each variant's own).
std::vector<double> tested_lrs(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                               const std::string& variant, const std::string& setting) {
  std::vector<double> out;
  for (double lr : plan.lrs)
    if (find_group(groups, variant, lr, setting)) out.push_back(lr);
  std::sort(out.begin(), out.end());
  return out;
}

// "0.001–0.03" for a contiguous run of the rates the variant was run at (`tested`), else the list.
std::string lr_range(const std::vector<double>& tested, const std::vector<double>& lrs) {
  if (lrs.empty()) return "no rate";
  const std::vector<double>& grid = tested;
  const auto first = std::find(grid.begin(), grid.end(), lrs.front());
  const bool contiguous = size_t(grid.end() - first) >= lrs.size() && std::equal(lrs.begin(), lrs.end(), first);
  if (lrs.size() == 1) return detail::format_lr(lrs.front());
  if (contiguous) return detail::format_lr(lrs.front()) + "–" + detail::format_lr(lrs.back());
  return lr_list(lrs) + " (not contiguous)";
}

// "collapsed in 5/5 — blocks 0–2 gradient norms ..." for a cell where most seeds did not learn.
std::string failure_counts(const GroupSummary& g) { return describe_failures(g.runs); }

int seeds_per_cell(const std::vector<GroupSummary>& groups) {
  int fewest = std::numeric_limits<int>::max();
  for (const GroupSummary& g : groups) fewest = std::min(fewest, int(g.runs.size()));
  return groups.empty() ? 0 : fewest;
}

}  // namespace

namespace {

// "pre-ln learned at 2 of 3 learning rates (0.001–0.003), solved at 0.001 — ...": what each variant
// did at one setting.
std::string variant_outcomes(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                             const std::string& setting) {
  std::string per_variant;
  for (const std::string& variant : plan.variants) {
    const std::vector<double> ok = learned_lrs(plan, groups, variant, setting);
    std::string solved;
    for (double lr : plan.lrs)
      if (const GroupSummary* g = find_group(groups, variant, lr, setting); g && 2 * g->solved > int(g->runs.size()))
        solved += (solved.empty() ? "" : ", ") + detail::format_lr(lr);
    std::string failures;
    for (double lr : plan.lrs)
      if (const GroupSummary* g = find_group(groups, variant, lr, setting);
          g && (!g->mostly_learned() || g->slow > 0)) {
        const std::string counts = failure_counts(*g);
        failures += fmt::format("{}{}{}", failures.empty() ? "" : "; ",
                                plan.lrs.size() > 1 ? "at " + detail::format_lr(lr) + " " : "",
                                counts.empty() ? "not most seeds" : counts);
      }
    if (plan.lrs.size() == 1) {  // one rate: say what happened there, no range
      const GroupSummary* g = find_group(groups, variant, plan.lrs.front(), setting);
      if (!g) continue;
      per_variant += fmt::format("{}{} {} ({}/{} seeds learned{})", per_variant.empty() ? "" : "; ", variant,
                                 !solved.empty() ? "solved the task"
                                 : ok.empty()    ? "did not learn"
                                                 : "learned",
                                 g->learned_or_solved(), g->runs.size(), failures.empty() ? "" : "; " + failures);
      continue;
    }
    const std::vector<double> tested = tested_lrs(plan, groups, variant, setting);
    per_variant += fmt::format("{}{} learned at {} of {} learning rates ({}){}{}", per_variant.empty() ? "" : "; ",
                               variant, ok.size(), tested.size(), lr_range(tested, ok),
                               solved.empty() ? ", solved at no rate" : ", solved at " + solved,
                               failures.empty() ? "" : " — " + failures);
  }
  return per_variant;
}

// The question itself, per variant against no normalization: the highest grid learning rate at
// which most seeds learned, higher / the same / lower. Each variant is named: post-LN and pre-LN
// are both LayerNorm and need not agree.
std::string headroom_verdict(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                             const std::string& setting, const std::string& none_label) {
  const std::vector<double> none = learned_lrs(plan, groups, none_label, setting);
  const double none_top = none.empty() ? 0 : none.back();
  std::string higher, same, lower;
  for (const std::string& variant : plan.variants) {
    if (variant == none_label) continue;
    const std::vector<double> ok = learned_lrs(plan, groups, variant, setting);
    const double top = ok.empty() ? 0 : ok.back();
    std::string& list = top > none_top ? higher : top == none_top ? same : lower;
    list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", variant,
                        ok.empty() ? "learned at no rate" : "up to " + detail::format_lr(top));
  }
  std::string out = fmt::format("Highest grid learning rate at which most seeds learned, against {} ({})", none_label,
                                none.empty() ? "learned at no rate" : "up to " + detail::format_lr(none_top));
  for (const auto& [word, list] :
       {std::pair{"higher", &higher}, std::pair{"the same", &same}, std::pair{"lower", &lower}})
    if (!list->empty()) out += fmt::format("; {}: {}", word, *list);
  return out + ". One grid step locates no boundary: the learning-rate search measures how far each range reaches.";
}

// "Tests: ..." — the family Holm's correction runs over and the margins, said once.
std::string tests_statement(const ComparePlan& plan, size_t comparisons) {
  const EquivalenceMargins& m = plan.equivalence;
  return fmt::format(
      "Tests: {} comparisons against {} × 3 endpoints on trained lengths (held-out loss, accuracy AUC, final "
      "accuracy), each with a difference test (paired t) and an equivalence test (two one-sided t tests) — {} "
      "p-values, Holm-adjusted together at alpha 0.05. Equivalence margins {}: loss ±{:g}, accuracy AUC ±{:g}, "
      "accuracy ±{:g}.",
      comparisons, reference_variant(plan), 6 * comparisons, m.from_config ? "(from the config)" : "(defaults)", m.loss,
      m.accuracy_auc, m.accuracy);
}

// Where both learned: each variant against the reference on the primary endpoints ("" if no cell).
std::string learned_differences(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                                const std::vector<Comparison>& comparisons,
                                const std::vector<std::vector<EndpointTest>>& tests, const std::string& setting,
                                const std::string& reference, const std::string& prefix) {
  std::string list;
  for (size_t i = 0; i < comparisons.size(); ++i) {
    const Comparison& c = comparisons[i];
    if (c.setting != setting) continue;
    const GroupSummary* a = find_group(groups, c.variant, c.lr, setting);
    const GroupSummary* b = find_group(groups, c.reference, c.lr, setting);
    if (!a || !b || !a->mostly_learned() || !b->mostly_learned()) continue;
    const std::string at = plan.lrs.size() > 1 ? " at " + detail::format_lr(c.lr) : "";
    list += fmt::format("{}{}{} (held-out loss: {}; accuracy AUC: {})", list.empty() ? "" : "; ", c.variant, at,
                        direction_text(tests[i][0], c.variant, c.reference),
                        direction_text(tests[i][1], c.variant, c.reference));
  }
  if (list.empty()) return "";
  return fmt::format("{}Where both learned, against {} on trained lengths (paired by seed, Holm-adjusted): {}.", prefix,
                     reference, list);
}

// Length extrapolation, apart from the trained lengths ("" when no cell was evaluated on unseen
// lengths): each cell's mean unseen-length accuracy against chance c and the "learned" level
// c + kLearnedShare (1 - c) that trained lengths are judged by, and the best cell.
std::string unseen_sentence(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  const GroupSummary* best_unseen = nullptr;
  double c = 0;
  int learned = 0, above_chance = 0, at_chance = 0, solved = 0;
  for (const GroupSummary& g : groups)
    for (const RunResult* r : g.runs) c = std::max(c, r->baseline.chance_accuracy());
  const double learned_level = c + kLearnedShare * (1 - c);
  for (const GroupSummary& g : groups) {
    const double a = g.unseen_accuracy.mean;
    if (!std::isfinite(a)) continue;
    if (!best_unseen || a > best_unseen->unseen_accuracy.mean) best_unseen = &g;
    if (a >= kSolvedAccuracy) ++solved;
    if (a >= learned_level) ++learned;
    else if (a >= c + kChanceShare * (1 - c)) ++above_chance;
    else ++at_chance;
  }
  if (!best_unseen) return "";
  const std::string range = length_range(plan, true);
  const std::string at = where(best_unseen->lr, best_unseen->setting, plan);
  const int cells = learned + above_chance + at_chance;
  return fmt::format(
      "On unseen {}, against chance {:.3f} and the 'learned' level {:.3f}, cells by mean accuracy: {} of {} at or "
      "above "
      "the learned level, {} above chance only, {} at chance; the best {:.3f} ({}{}), {} of {} at the solved level "
      "{:.2f}.",
      range.empty() ? "lengths" : range, c, learned_level, learned, cells, above_chance, at_chance,
      best_unseen->unseen_accuracy.mean, best_unseen->variant, at.empty() ? "" : " at " + at, solved, cells,
      kSolvedAccuracy);
}

}  // namespace

std::vector<std::string> answer(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  std::vector<std::string> out;
  if (groups.empty()) return out;
  const std::string reference = reference_variant(plan);
  std::string none_label;
  for (const std::string& label : plan.variants)
    if (variant_kind(plan, label) == "none" && none_label.empty()) none_label = label;
  const std::vector<Comparison> comparisons = compare_variants(plan, groups);
  const std::vector<std::vector<EndpointTest>> tests = test_comparisons(comparisons, plan.equivalence);
  // The convergence gate first: a study whose best runs were still improving answers nothing about
  // stability. A search then answers with boundaries; its per-rate outcomes (each variant at its
  // own rates) are in the Findings and the boundary table, not repeated here.
  const StudyTable table = study_table(plan, groups);
  for (std::string& sentence : gate_sentences(plan, table)) out.push_back(std::move(sentence));
  const bool search = plan.search.enabled();
  for (std::string& sentence : boundary_sentences(plan, table)) out.push_back(std::move(sentence));
  for (const std::string& setting : plan.settings) {
    const std::string prefix = plan.settings.size() > 1 ? (setting.empty() ? "" : setting + ": ") : "";
    if (!search) out.push_back(prefix + variant_outcomes(plan, groups, setting) + ".");
    if (!search && !none_label.empty() && plan.variants.size() > 1 && plan.lrs.size() > 1)
      out.push_back(prefix + headroom_verdict(plan, groups, setting, none_label));
    if (std::string d = learned_differences(plan, groups, comparisons, tests, setting, reference, prefix); !d.empty())
      out.push_back(d);
  }
  if (std::string u = unseen_sentence(plan, groups); !u.empty()) out.push_back(u);
  const int seeds = seeds_per_cell(groups);
  if (seeds > 0 && size_t(seeds) < kMinSeeds)
    out.push_back(
        fmt::format("Caution: as few as {} seed{} per cell (fewer than {}); intervals are wide and most "
                    "comparisons stay undecided.",
                    seeds, seeds == 1 ? "" : "s", kMinSeeds));
  return out;
}

namespace {

// Every comparison against the reference, each endpoint's verdict and the unseen-length difference:
// one line per cell of the grid, after one line stating the tests.
void paired_difference_lines(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                             std::vector<std::string>& out) {
  const std::vector<Comparison> comparisons = compare_variants(plan, groups);
  if (comparisons.empty()) return;
  const std::vector<std::vector<EndpointTest>> tests = test_comparisons(comparisons, plan.equivalence);
  out.push_back(tests_statement(plan, comparisons.size()));
  for (const std::string& setting : plan.settings)
    for (double lr : plan.lrs) {
      std::string line, reference;
      for (size_t i = 0; i < comparisons.size(); ++i) {
        const Comparison& c = comparisons[i];
        if (c.setting != setting || c.lr != lr) continue;
        reference = c.reference;
        line += fmt::format("{}{} (held-out loss: {}; accuracy AUC: {}; accuracy: {}{}{})", line.empty() ? "" : "; ",
                            c.variant, direction_text(tests[i][0], c.variant, c.reference),
                            direction_text(tests[i][1], c.variant, c.reference),
                            direction_text(tests[i][2], c.variant, c.reference),
                            c.accuracy_ceiling ? " (both at accuracy 1 in every seed: the ceiling, see loss)" : "",
                            c.unseen_accuracy.n == 0
                                ? ""
                                : "; unseen-length accuracy " + describe_difference(c.unseen_accuracy, c.paired));
      }
      if (line.empty()) continue;
      const std::string at = where(lr, setting, plan);
      out.push_back(fmt::format("{}against {}, trained lengths — {}.", at.empty() ? "" : at + ": ", reference, line));
    }
}

// The first line: how many runs finished, and how many ended in each outcome.
std::string outcome_counts_line(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  int total = 0, finished = 0;
  std::map<std::string, int> counts;
  for (const GroupSummary& g : groups) {
    total += int(g.runs.size());
    finished += g.finished;
    counts["solved"] += g.solved, counts["learned"] += g.learned, counts["slow"] += g.slow, counts["weak"] += g.weak;
    counts["at chance"] += g.at_chance, counts["collapsed"] += g.collapsed, counts["exploded"] += g.exploded;
    counts["diverged"] += g.diverged, counts["entropy"] += g.entropy_collapse, counts["log z"] += g.logit_divergence;
  }
  const std::string trained_range = length_range(plan, false);
  // The words from the attention and output diagnostics are named only when some run has them.
  std::string diagnostic_words;
  if (counts["entropy"] > 0) diagnostic_words += fmt::format(", {} attention entropy collapse", counts["entropy"]);
  if (counts["log z"] > 0) diagnostic_words += fmt::format(", {} logit divergence", counts["log z"]);
  return fmt::format(
      "{} of {} runs finished ({} seeds per cell): {} solved, {} learned, {} slow, {} weak, {} at "
      "chance, {} collapsed{}, {} exploded, {} diverged — judged on held-out data of trained {}.",
      finished, total, seeds_per_cell(groups), counts["solved"], counts["learned"], counts["slow"], counts["weak"],
      counts["at chance"], counts["collapsed"], diagnostic_words, counts["exploded"], counts["diverged"],
      trained_range.empty() ? "lengths" : trained_range);
}

// Where runs did not learn (or learned slowly): one line per outcome some run has, with the evidence.
void outcome_lines(const ComparePlan& plan, const std::vector<GroupSummary>& groups, std::vector<std::string>& out) {
  const std::string entropy_words = fmt::format(
      "Attention entropy collapse (short of learned; a layer's attention entropy below {:g}x its step-1 value, its max "
      "attention logit grown {:g}x)",
      kEntropyCollapseFraction, kLogitGrowthFactor);
  const std::string log_z_words =
      fmt::format("Logit divergence (short of learned; the output's |log Z| beyond {:g})", kLogZBound);
  for (const auto& [what, outcome] :
       {std::pair{
            "Slow (above chance, held-out loss still falling at the end; learned for the slow-inclusive rule, for "
            "the strict rule only at the learned level)",
            Outcome::slow},
        std::pair{"Weak (above chance, short of learned)", Outcome::weak}, std::pair{"At chance", Outcome::at_chance},
        std::pair{"Collapsed (at chance or constant output, early blocks' gradients vanished)", Outcome::collapsed},
        std::pair{entropy_words.c_str(), Outcome::entropy_collapse},
        std::pair{log_z_words.c_str(), Outcome::logit_divergence},
        std::pair{"Exploded (held-out loss above 2x the uniform guess's, or residual RMS grown 100x)",
                  Outcome::exploded},
        std::pair{"Diverged (non-finite loss, stopped)", Outcome::diverged}}) {
    std::string list;
    for (const GroupSummary& g : groups) {
      std::vector<const RunResult*> runs;
      for (const RunResult* r : g.runs)
        if (classify(*r) == outcome) runs.push_back(r);
      if (runs.empty()) continue;
      const std::string at = where(g.lr, g.setting, plan);
      list += fmt::format("{}{}{} ({}/{}: {})", list.empty() ? "" : "; ", g.variant, at.empty() ? "" : " at " + at,
                          runs.size(), g.runs.size(), outcome_evidence(outcome, runs));
    }
    if (!list.empty()) out.push_back(fmt::format("{}: {}.", what, list));
  }
}

// The stable learning-rate range per setting: LayerNorm's headline effect is headroom in the
// learning rate.
void stable_range_lines(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                        std::vector<std::string>& out) {
  if (plan.lrs.size() <= 1) return;
  for (const std::string& setting : plan.settings) {
    std::string list;
    for (const std::string& variant : plan.variants) {
      const std::vector<double> ok = learned_lrs(plan, groups, variant, setting);
      const std::vector<double> tested = tested_lrs(plan, groups, variant, setting);
      list += fmt::format("{}{} {} ({} of {})", list.empty() ? "" : "; ", variant, lr_range(tested, ok), ok.size(),
                          tested.size());
    }
    out.push_back(fmt::format("Stable learning-rate range (tested rates at which most seeds learned){}: {}.",
                              plan.settings.size() > 1 ? ", " + setting : "", list));
  }
}

// Speed: steps to solve, at each rate and setting where some variant solved.
void steps_to_solve_lines(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                          std::vector<std::string>& out) {
  for (const std::string& setting : plan.settings)
    for (double lr : plan.lrs) {
      std::string list;
      for (const std::string& variant : plan.variants)
        if (const GroupSummary* g = find_group(groups, variant, lr, setting); g && g->reached_solve > 0)
          list += fmt::format("{}{} {:.0f} ({}/{})", list.empty() ? "" : ", ", variant, g->steps_to_solve,
                              g->reached_solve, g->runs.size());
      if (list.empty()) continue;
      const std::string at = where(lr, setting, plan);
      out.push_back(
          fmt::format("Steps to solve{} (first evaluation at trained-length accuracy >= {}; median over "
                      "the seeds that reached it): {}.",
                      at.empty() ? "" : " at " + at, kSolvedAccuracy, list));
    }
}

}  // namespace

std::vector<std::string> findings(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  std::vector<std::string> out{outcome_counts_line(plan, groups)};
  outcome_lines(plan, groups, out);
  stable_range_lines(plan, groups, out);
  steps_to_solve_lines(plan, groups, out);
  paired_difference_lines(plan, groups, out);
  // How much loss each variant gives up across the rates (LR sensitivity), with paired differences.
  if (plan.search.enabled() || plan.lrs.size() >= 3)
    for (std::string& line : sensitivity_sentences(plan, study_table(plan, groups))) out.push_back(std::move(line));
  const int seeds = seeds_per_cell(groups);
  if (seeds > 0 && size_t(seeds) < kMinSeeds)
    out.push_back(fmt::format("Warning: some cells have only {} seed{} (fewer than {}).", seeds, seeds == 1 ? "" : "s",
                              kMinSeeds));
  return out;
}

double most_different_lr(const ComparePlan& plan, const std::vector<GroupSummary>& groups, const std::string& setting) {
  double best_lr = plan.lrs.empty() ? 0 : plan.lrs.front(), best_spread = -1;
  for (double lr : plan.lrs) {
    double lo = INFINITY, hi = -INFINITY;
    for (const std::string& variant : plan.variants) {
      const GroupSummary* g = find_group(groups, variant, lr, setting);
      if (!g) continue;
      const double v = std::isfinite(g->trained_accuracy.mean) ? g->trained_accuracy.mean : 0.0;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (hi - lo > best_spread) best_spread = hi - lo, best_lr = lr;
  }
  return best_lr;
}

}  // namespace normlab::study
