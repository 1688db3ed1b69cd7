#pragma once
// Whether a study's conclusions come from runs that converged (docs/compare.md,
// "The convergence gate"), and the numbers the report's first screen shows, one row per variant and setting.
//
//   (a) bracketed   the rate with the lowest mean final held-out loss (LossCurve::best) is an
//                   interior point of the probed rates. A search extends its range on that side,
//                   one round-0 step at a time, up to search.lr.min / search.lr.max (search.hpp:
//                   extension_rates); a grid cannot, and the Answer says so.
//   (b) converged   at that rate most finished seeds (strictly more than half) solved the task or
//                   plateaued: their held-out trained-length loss fell by less than kPlateauDrop
//                   (1%) of its value over the last kPlateauEvaluations (3) evaluations. A seed
//                   whose loss fell by more is *still improving*. Where (b) fails the Answer opens
//                   with "not converged: ..." and states no ratio for that variant.
//   judged          (b) needs kPlateauEvaluations evaluations: a cell whose runs have fewer (and did
//                   not solve) is "not judged", said as such, never passed.
//
// Boundaries come in two rules (search.hpp, LearnedRule): strict (learned = at the learned level
// c + 0.25 (1 - c) at the last evaluation, whatever the trend; a slow run below it is not learned)
// and slow-inclusive (learned, solved or slow). The Answer states a ratio to no normalization
// without a caveat only where the two rules agree: both ratios exist, lie within a factor
// kRulesAgreeFactor (1.1) of each other, and their 95% intervals say the same about 1 (both above,
// both below, or both holding it).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/study/plan.hpp"
#include "normlab/study/search.hpp"
#include "normlab/study/sensitivity.hpp"
#include "normlab/study/statistics.hpp"

namespace normlab::study {

inline constexpr size_t kPlateauEvaluations = 3;
inline constexpr double kPlateauDrop = 0.01;
inline constexpr double kRulesAgreeFactor = 1.1;

// Held-out trained-length loss fell by at least kPlateauDrop of its value over the last
// kPlateauEvaluations evaluations (false with fewer evaluations, or for a diverged run).
bool still_improving(const RunResult& run);
// At least kPlateauEvaluations evaluations, finite loss, and not still improving.
bool plateaued(const RunResult& run);

// The gate for one variant and setting.
struct ConvergenceCheck {
  std::string variant, setting;
  double best_lr = NAN;                      // LossCurve::best_lr()
  double lowest_lr = NAN, highest_lr = NAN;  // the probed range
  enum class Edge { interior, low, high, too_few_rates };
  Edge edge = Edge::too_few_rates;               // (a): where the best rate sits
  bool at_limit = false;                         // (a) fails and the search may not extend further that way
  int runs = 0;                                  // finished seeds at the best rate
  int solved = 0, plateaued = 0, improving = 0;  // of them (solved ones are not counted again)
  int64_t last_step = 0;                         // the last evaluation's step of the best rate's runs (the budget)
  bool judged = false;     // some run at the best rate solved or has kPlateauEvaluations evaluations
  bool converged = false;  // (b): judged and 2 * (solved + plateaued) > runs
  bool bracketed() const { return edge == Edge::interior; }
};
ConvergenceCheck check_convergence(const LossCurve& curve, const std::vector<const RunResult*>& runs);

// One row of the report's compact table (variant x setting), with everything behind it. Rendered
// by the report's first screen: best held-out loss and its rate, boundary [95% CI] and ratio to
// none (strict rule, slow-inclusive beside), LR sensitivity [95% CI], how runs above the boundary
// failed. Every number is NaN / empty where it does not exist (a grid has no boundary; a variant
// without `none` beside it has no ratio).
struct StudyRow {
  std::string variant, setting;
  LossCurve curve;          // final held-out loss at every probed rate (the headline figure)
  Sensitivity sensitivity;  // over the setting's common range
  ConvergenceCheck convergence;
  // Learning-rate boundary by both rules (search only; kind not_run otherwise).
  BoundaryFit strict, slow_inclusive;
  BoundaryRatio strict_ratio, slow_inclusive_ratio;  // to none's boundary by the same rule (NaN: none)
  bool rules_agree = false;  // the two ratios agree (see the top of this file); false when either is missing
  // Above the strict boundary (or at every rate, for a variant that never learned): every finished
  // run, and those not learned by the strict rule counted by outcome word. The counts add up:
  // sum(failures_above) == failing_above <= runs_above.
  int runs_above = 0, failing_above = 0;
  std::map<std::string, int> failures_above;  // outcome word -> runs ("slow" = slow below the learned level)
  std::string failures_text;   // describe_failures' words with the evidence, e.g. "collapsed in 5/5 — ..."
  std::string failures_short;  // for a table cell: "14 of 15: 6 at chance, 5 exploded, 2 diverged, 1 slow"
};
// Rendering a row (the first screen's compact table, one row per variant and setting):
//   best held-out loss   curve.best_loss() [curve.mean[curve.best].low, .high] at curve.best_lr();
//                        convergence.bracketed() false: the best rate is an edge (mark it)
//   boundary             strict.kind == boundary: strict.lr50 [strict.low, strict.high] (low_open:
//                        "< low", high_open: "> high"); never_failed: "> strict.top_lr";
//                        never_learned: "learned at no rate"; slow_inclusive beside where it differs
//   ratio to none        strict_ratio.ratio [low, high] (open ends: no limit); omit where
//                        convergence.converged is false for this row or none's (judged ones), and
//                        mark it unsettled where !rules_agree
//   LR sensitivity       sensitivity.interval.mean [low, high] nats over sensitivity.from..to
//   failed above         failures_short (failures_text with the evidence)
// and the headline figure from curve: x = lrs, y = loss[i][j] per seed (points), mean[i] (line),
// cap = ln K (a diverged run sits there), one panel per setting, every variant in it.

// The table and the comparisons beside it, for a whole plan.
struct StudyTable {
  std::vector<StudyRow> rows;                      // settings in plan order, variants in plan order
  std::vector<SensitivityDifference> differences;  // per setting, each variant against `none` (else the reference)
  std::string none_label;                          // the series that is no normalization ("" if none)
  std::vector<VariantBoundary> boundaries;         // lr_boundaries(plan, groups): a search's fits, both rules
  bool gated = false;                              // the gate applies: a search, or a grid of >= 3 learning rates
  // The rows whose (b) failed / was not judged / whose (a) failed: the Answer's opening lines.
  std::vector<const StudyRow*> not_converged() const;
  std::vector<const StudyRow*> not_judged() const;
  std::vector<const StudyRow*> not_bracketed() const;
  const StudyRow* find(const std::string& variant, const std::string& setting) const;
};
StudyTable study_table(const ComparePlan& plan, const std::vector<GroupSummary>& groups);

// The Answer's opening lines from the gate ("not converged: pre-ln's best runs at 0.003 are still
// improving at step 250 — the boundaries below describe an unfinished race, not stability";
// "not bracketed: ..."; "convergence not judged: ..."); empty when every row passed.
std::vector<std::string> gate_sentences(const ComparePlan& plan, const StudyTable& table);
// One line per setting: each variant's LR sensitivity with its interval and the paired difference
// to `none` in words ("pre-ln 0.12 nats [0.08, 0.16]; none 0.61 [0.40, 0.82]; pre-ln lower by 0.49
// nats [0.30, 0.68] over 5 pairs").
std::vector<std::string> sensitivity_sentences(const ComparePlan& plan, const StudyTable& table);
// summary.json's "study": the table as numbers (rows with curve, sensitivity, gate, both boundaries).
nlohmann::json study_json(const StudyTable& table);

}  // namespace normlab::study
