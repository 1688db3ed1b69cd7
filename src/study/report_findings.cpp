// The report's text sections: the Answer, how each run is judged (Findings), and the summary table
// of held-out metrics per cell.
#include <fmt/format.h>

#include <utility>

#include "common.hpp"
#include "normlab/study/instability.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

using detail::format_lr;

Section details_section(const Context& c) {
  Section sec;
  sec.title = kDetailsTitle;
  sec.text =
      "Computed from the runs: held-out data in evaluation mode, trained and unseen lengths apart, "
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
      "value; logit divergence = short of learned with the output's |log Z| beyond {:g} at the last diagnostics step; "
      "attention entropy collapse = short of learned with a layer's attention entropy below {:g}x its step-1 value "
      "(the initial weights) and its max attention logit at least {:g}x its step-1 value there; collapsed = at chance "
      "or one label for >= {:.0f}% of predictions, with the first half of the blocks' "
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
      c_example + kLearnedShare * (1 - c_example), kExplodeRmsFactor, kLogZBound, kEntropyCollapseFraction,
      kLogitGrowthFactor, 100 * kConstantPredictionShare, kCollapseGradRatio, kChanceShare, reference_variant(c.plan));
  sec.bullets = findings(c.plan, c.groups);
  return sec;
}

namespace {

// "3 solved, 2 slow": a cell's outcome counts, most successful first.
std::string outcome_counts(const GroupSummary& g) {
  std::string out;
  for (const auto& [count, word] :
       {std::pair{g.solved, "solved"}, std::pair{g.learned, "learned"}, std::pair{g.slow, "slow"},
        std::pair{g.weak, "weak"}, std::pair{g.at_chance, "at chance"}, std::pair{g.collapsed, "collapsed"},
        std::pair{g.entropy_collapse, "attention entropy collapse"}, std::pair{g.logit_divergence, "logit divergence"},
        std::pair{g.exploded, "exploded"}, std::pair{g.diverged, "diverged"}})
    if (count > 0) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", count, word);
  return out.empty() ? "–" : out;
}

}  // namespace

Section summary_section(const Context& c) {
  Section sec;
  sec.title = "Summary: held-out metrics per cell, mean [95% interval] over seeds";
  sec.text = fmt::format(
      "n = seeds in the cell; intervals are cut to the possible range (accuracy 0–1, loss >= 0). Outcomes count seeds. "
      "Accuracy AUC: area under the held-out trained-length accuracy curve over steps, normalised to [0, 1]. "
      "Trained and unseen accuracy and loss are from the last evaluation (eval mode{}); loss leaves diverged seeds "
      "out. Final train loss (median over seeds, training mode, mean of the last 10% of steps) is a column, not a "
      "judge. Steps to solve: median first evaluation step at trained accuracy >= {:.2f} (k/n seeds that reached "
      "it). Spikes: steps whose train loss exceeds {:g}x the median of the previous {} and that median by more "
      "than {:g}x the first step's loss (a run of such steps counts once), mean per seed. Peak grad norm: largest "
      "global gradient norm before clipping, median over seeds.{}",
      c.has_batchnorm ? ": BatchNorm uses its running averages; every other variant computes exactly what it computed "
                        "in training"
                      : ": dropout off",
      kSolvedAccuracy, kSpikeFactor, kSpikeWindow, kSpikeMinRise,
      c.fewest_seeds < kMinSeeds
          ? fmt::format(" Warning: cells with fewer than {} seeds have wide intervals.", kMinSeeds)
          : "");
  std::vector<std::vector<std::string>> rows;
  for (const GroupSummary& g : c.groups) {
    std::vector<std::string> row{g.variant, format_lr(g.lr)};
    if (c.plan.settings.size() > 1) row.push_back(g.setting);
    const size_t n = g.runs.size();
    const std::string solve = g.reached_solve > 0 ? fmt::format("{:.0f} ({}/{})", g.steps_to_solve, g.reached_solve, n)
                                                  : fmt::format("– (0/{})", n);
    for (const std::string& cell :
         {fmt::format("{}{}", n, n < kMinSeeds ? " (!)" : ""), outcome_counts(g),
          fmt_interval(g.trained_accuracy, 0, 1), fmt_interval(g.trained_loss, 0), fmt_interval(g.accuracy_auc, 0, 1),
          fmt_interval(g.unseen_accuracy, 0, 1), fmt_interval(g.unseen_loss, 0), fmt_num(g.train_loss), solve,
          fmt_num(g.loss_spikes, "{:.1f}"), fmt_num(g.peak_grad_norm, "{:.3g}")})
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

}  // namespace normlab::study::report_parts
