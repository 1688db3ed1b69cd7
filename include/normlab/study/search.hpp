#pragma once
// The learning-rate search of `normlab compare` (docs/compare.md, "Learning-rate search"): where
// each variant stops learning as the learning rate rises, with a 95% interval.
//
//   round 0     `points` log-spaced rates from..to, every seed of the grid
//   round r     per variant and setting, the geometric midpoint of each pair of neighbouring tested
//               rates, at or above the rate where most seeds learned, whose learned fractions differ
//               (an adaptive grid: a seed-to-seed transition several rates wide gets points across
//               its width, which the fit's slope needs; bisection would pile them on one spot)
//   fit         P(learned) = 1 / (1 + exp(s (ln lr - theta))), s > 0, on the rates at or above the
//               peak (below it runs may learn too slowly, another failure), by Firth's penalized
//               likelihood, which stays finite when the outcomes separate (all learned below a rate,
//               none above: usual with 5 seeds)
//   interval    profile penalized likelihood of theta (likelihood ratio below chi2(1, 0.95)); the ratio
//               of two variants' boundaries profiles theta_v - theta_ref over both fits. Not a
//               bootstrap over seeds: 5 seeds give 126 resamples, every one separated, and the
//               percentile interval shrinks to the gap between two tested rates.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/study/plan.hpp"
#include "normlab/study/statistics.hpp"

namespace normlab::study {

// The "search" object of a compare config, checked: {"lr": {"from", "to", "points", "rounds",
// "max_new", "min", "max"}}. Every error is an InputError naming `path` and the key.
LrSearchSpec parse_lr_search(const nlohmann::json& search, const std::string& path);

// A learning rate rounded to 3 significant digits: how search rates are named and run.
double round_rate(double lr);
// Round 0's rates: `points` log-spaced from `from` to `to` (both included), rounded.
std::vector<double> initial_rates(const LrSearchSpec& spec);

// What counts as learned for a boundary. strict: at the learned level c + 0.25 (1 - c) at the last
// evaluation (solved, learned, or slow at that level: a slow run below it has not learned);
// slow_inclusive: has_learned() (learned, solved or slow: slow is short of budget, not unstable).
enum class LearnedRule { strict, slow_inclusive };
bool learned_by(const RunResult& run, LearnedRule rule);

// The finished runs at one tested rate of one variant and setting.
struct RateOutcome {
  double lr = 0;
  int learned = 0;  // learned by the rule
  int runs = 0;     // finished (diverged included; unfinished and never-evaluated runs left out)
  double fraction() const { return runs > 0 ? double(learned) / runs : 0.0; }
};
// Strictly more than half of the finished runs learned (the search's rounds and the boundary fit).
inline bool mostly_learned(const RateOutcome& r) { return 2 * r.learned > r.runs; }
// The outcome at `lr` of `runs` (classify()). The search's rounds refine where either rule's
// fractions change.
RateOutcome rate_outcome(double lr, const std::vector<const RunResult*>& runs,
                         LearnedRule rule = LearnedRule::slow_inclusive);

// The gate's extension (convergence.hpp): when the rate with the lowest mean final held-out loss
// (`best_lr`, sensitivity.hpp's LossCurve) is the lowest of `tested` (ascending), one rate a
// round-0 step (the ratio (to / from)^(1 / (points - 1))) below it, not below spec.min; when it is
// the highest, one step above, not above spec.max. Empty when the best rate is interior or the
// limit is reached. Rounded like every search rate; depends only on finished outcomes.
std::vector<double> extension_rates(const std::vector<double>& tested, double best_lr, const LrSearchSpec& spec);

// The index of the rate where the largest fraction of seeds learned (the lowest such rate);
// `tested` sorted by lr.
size_t peak_index(const std::vector<RateOutcome>& tested);
// The rates the next round adds, ascending: the rounded geometric midpoint of each neighbouring
// pair at or above the peak whose learned fractions differ, not already tested; when more than
// max_new, the pairs whose fractions differ most (the lower pair on a tie). Empty: settled.
// Depends only on `tested` (sorted by lr), so every shard computes the same rounds.
std::vector<double> refine_rates(const std::vector<RateOutcome>& tested, int max_new);

// The fitted upper boundary of one variant and setting.
struct BoundaryFit {
  enum class Kind { not_run, never_learned, never_failed, boundary };
  Kind kind = Kind::not_run;
  double peak_lr = NAN;                      // the rate where most seeds learned (the fit's lower end)
  double top_lr = NAN;                       // the highest rate tested
  double lr50 = NAN;                         // the rate where half the seeds learn (boundary)
  double low = NAN, high = NAN;              // its 95% profile-likelihood interval
  bool low_open = false, high_open = false;  // the interval runs past the searched range
  double slope = NAN;                        // s: the log-odds fall per unit of ln lr
  int fitted_runs = 0, fitted_rates = 0;
  // The profile penalized log-likelihood on theta_grid (ln lr), for ratios and charts.
  std::vector<double> theta_grid, profile;
  double p_learned(double lr) const;  // the fitted curve
};
// Fits the boundary on the rates at or above the peak; from/to: the searched range.
BoundaryFit fit_boundary(std::vector<RateOutcome> tested, double from, double to);

// One variant's boundary as a multiple of another's, with its 95% profile-likelihood interval.
struct BoundaryRatio {
  double ratio = NAN, low = NAN, high = NAN;
  bool low_open = false, high_open = false;
};
BoundaryRatio boundary_ratio(const BoundaryFit& variant, const BoundaryFit& reference);

// A variant's search at one setting: its tested rates, fit, and how its failing runs failed
// above the boundary (outcome name -> runs). `tested` and `fit` use the strict rule (the report's
// boundary); the slow-inclusive ones are beside them.
struct VariantBoundary {
  std::string variant, setting;
  std::vector<RateOutcome> tested;
  BoundaryFit fit;
  std::map<std::string, int> failures_above;  // not learned by the strict rule; adds up to failing_above
  int failing_above = 0;
  std::vector<const RunResult*> runs_above;  // every finished run above the boundary, for the evidence
  std::vector<RateOutcome> tested_slow_inclusive;
  BoundaryFit fit_slow_inclusive;
};
std::vector<VariantBoundary> lr_boundaries(const ComparePlan& plan, const std::vector<GroupSummary>& groups);

// The Answer's sentences: per setting and variant, the boundary with its interval (or "learned at
// every rate up to ..."), how the runs above it failed, and the ratio to no normalization's by the
// strict rule with the slow-inclusive one beside (a caveat where they disagree; no ratio where the
// convergence gate failed for either variant: convergence.hpp).
std::vector<std::string> boundary_sentences(const ComparePlan& plan, const std::vector<GroupSummary>& groups);
struct StudyTable;  // convergence.hpp
// The same from a table already computed (study_table(plan, groups): it holds the fits).
std::vector<std::string> boundary_sentences(const ComparePlan& plan, const StudyTable& table);

// summary.json's "lr_boundaries": per variant and setting, {variant, setting, rule ("strict"), kind
// ("boundary", "never failed", "never learned", "not run"), lr50, low, high, low_open, high_open,
// ratio_to_none {ratio, low, high, low_open, high_open} or null, tested [{lr, learned, runs}],
// failures_above, slow_inclusive {kind, lr50, low, high, low_open, high_open, tested}}.
nlohmann::json boundaries_json(const ComparePlan& plan, const std::vector<GroupSummary>& groups);

// "0.0213" / "> 0.3": a boundary or interval end.
std::string format_rate(double lr);
// A ratio of two rates, the one format of every report sentence and table: two significant digits
// with the trailing zero kept ("0.53x", "0.50x", "1.0x", "3.1x"), whole numbers from 10 ("14x");
// "?" when it is not finite.
std::string format_ratio(double r);

}  // namespace normlab::study
