#pragma once
// Runs summarized over seeds, and the variants compared with the reference: paired differences with
// intervals, equivalence tests against stated margins, Holm's correction (docs/compare.md).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "normlab/stats.hpp"
#include "normlab/study/outcome.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/results.hpp"

namespace normlab::study {

inline constexpr size_t kMinSeeds = 5;  // fewer seeds in a cell: the report warns
// The runs that differ only by seed, and what they have in common.
struct GroupSummary {
  std::string variant, setting;
  double lr = 0;
  std::vector<const RunResult*> runs;
  int finished = 0, diverged = 0, exploded = 0, logit_divergence = 0, entropy_collapse = 0, collapsed = 0,
      at_chance = 0, weak = 0, slow = 0, learned = 0, solved = 0;
  int learned_or_solved() const { return learned + solved + slow; }  // has_learned()
  // "Most seeds learned": strictly more than half of the cell's seeds (half is not most).
  bool mostly_learned() const { return 2 * learned_or_solved() > int(runs.size()); }
  // Mean and 95% t interval over seeds; accuracies count a diverged seed as the uniform guess,
  // losses leave it out.
  Interval trained_accuracy, trained_loss, unseen_accuracy, unseen_loss;
  Interval accuracy_auc;  // RunResult::accuracy_auc over seeds (a diverged seed included)
  // Over the seeds that did not diverge (NaN if none):
  double train_loss = NAN, train_loss_min = NAN, train_loss_max = NAN;
  double steps_to_solve = NAN;  // median over the seeds that reached it
  int reached_solve = 0;
  double loss_spikes = NAN;                                       // mean per seed
  double peak_grad_norm = NAN;                                    // median over seeds
  std::map<std::pair<int64_t, int64_t>, double> bucket_accuracy;  // median per length bucket
  std::map<std::pair<int64_t, int64_t>, bool> bucket_beyond_train;
};
std::vector<GroupSummary> summarize(const std::vector<RunResult>& results);
// The group of (variant, lr, setting); nullptr if none.
const GroupSummary* find_group(const std::vector<GroupSummary>& groups, const std::string& variant, double lr,
                               const std::string& setting);

// What a series is: its name when it is a known variant, else the one variant all its runs are
// (a `report` label such as "model.norm=none"), else "".
std::string variant_kind(const ComparePlan& plan, const std::string& label);
// The variant the others are compared with: pre-ln, else post-ln, else the first one.
std::string reference_variant(const ComparePlan& plan);

// A paired comparison of one variant with the reference at one (learning rate, setting): the
// per-seed differences variant - reference. Paired when both runs of a seed saw the same data
// (same task section, seed and batch size), else Welch's unpaired interval.
struct Comparison {
  std::string variant, reference, setting;
  double lr = 0;
  bool paired = true;
  Interval trained_accuracy, unseen_accuracy;
  Interval trained_loss;          // held-out loss on trained lengths (seeds that did not diverge)
  Interval accuracy_auc;          // RunResult::accuracy_auc
  bool accuracy_ceiling = false;  // every seed of both at accuracy 1: accuracy cannot tell them apart
};
std::vector<Comparison> compare_variants(const ComparePlan& plan, const std::vector<GroupSummary>& groups);
// "higher by 0.12 (95% CI +0.05 to +0.19, 5 pairs)", "identical in all 5 pairs (+0.000)", "the same
// +0.010 in all 5 pairs", or "+0.004 (95% CI -0.010 to +0.018, 5 pairs)" when the interval holds 0.
std::string describe_difference(const Interval& d, bool paired);

// The three words of a comparison on one endpoint, after Holm's correction over the report's
// family of tests (docs/compare.md): differs (the difference test rejects "no difference" and the
// difference is not within the margin), equivalent within +-margin (two one-sided tests reject
// "|difference| >= margin"), undecided (neither; with the seeds a decision would need).
enum class Verdict { differs, equivalent, undecided, no_data };
struct EndpointTest {
  std::string endpoint;  // "held-out loss", "accuracy AUC", "accuracy"
  double margin = 0;
  Interval difference;
  bool paired = true;
  double p_difference = NAN, p_equivalence = NAN;        // unadjusted
  double holm_difference = NAN, holm_equivalence = NAN;  // Holm-adjusted over the family
  Verdict verdict = Verdict::no_data;
  size_t seeds_needed = 0;            // undecided: pairs to decide (0: no number would, or not undecided)
  bool seeds_for_equivalence = true;  // what seeds_needed would show: equivalence, else a difference
};
// Every comparison's tests on the trained-length endpoints held-out loss, accuracy AUC and final
// accuracy, one family Holm-adjusted at alpha 0.05; [i][k] belongs to comparisons[i], endpoint k.
std::vector<std::vector<EndpointTest>> test_comparisons(const std::vector<Comparison>& comparisons,
                                                        const EquivalenceMargins& margins);
// The largest number of pairs (or seeds) a sentence states as "about N": beyond it the estimate is
// so close to zero (or, for equivalence, to the margin) that the normal approximation's N says only
// that no practical rerun would decide, and the words are "more than 1000 pairs would decide".
inline constexpr size_t kMaxSeedsStated = 1000;
// "about 23 pairs" up to kMaxSeedsStated, "more than 1000 pairs" beyond ("seeds per variant" unpaired).
std::string seeds_needed_words(size_t seeds_needed, bool paired);
// "equivalent within ±0.05 (−0.012, 90% CI −0.030 to +0.006, Holm p 0.004)" and the like.
std::string describe_test(const EndpointTest& test);
// The same naming the better of the two (docs/compare.md, "How sure"): for a loss the lower is
// better, for accuracy and accuracy AUC the higher. The interval is that of the named variant
// minus the other, so its sign matches the words:
//   "pre-ln lower by 0.486 nats [-0.520, -0.452]; differs (Holm p 0.003)"
//   "none lower by 0.180 nats [-0.490, +0.050]; undecided (about 23 pairs would decide)"
//   "pre-ln higher by 0.018 [-0.056, +0.093]; undecided (more than 1000 pairs would decide)"
//   "pre-ln higher by 0.010 [-0.004, +0.024]; equivalent within ±0.02 (Holm p 0.01)"
//   "identical in all 5 pairs; equivalent within ±0.05 (Holm p 0)"
// `variant` and `reference` are the comparison's (difference = variant - reference).
std::string direction_text(const EndpointTest& test, const std::string& variant, const std::string& reference);

// The grid learning rates at which most seeds of a variant learned, per setting (ascending).
std::vector<double> learned_lrs(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                                const std::string& variant, const std::string& setting);

}  // namespace normlab::study
