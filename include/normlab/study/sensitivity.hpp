#pragma once
// Final held-out loss against learning rate, and the learning-rate sensitivity of Wortsman et al.
// 2023 ("Small-scale proxies for large-scale Transformer training instabilities"): how much loss a
// variant gives up across a range of rates, compared with its best rate (docs/compare.md,
// "Learning-rate sensitivity").
//
//   loss(lr, seed)  min(final held-out trained-length loss, ln K); a diverged run, or one whose
//                   loss is not finite, counts as ln K (the uniform guess: what a broken model is
//                   worth). K = the task's labels; when ln K is unknown, the run's first train loss.
//   curve           loss(lr, seed) at every probed rate; mean over seeds with a 95% t interval
//   sensitivity     per seed: the mean over the common range [from, to] of loss(lr) - min of loss
//                   over that range, with loss linear in ln lr between probed rates (so the mean
//                   is the trapezoid integral over ln lr divided by ln(to / from): the limit of
//                   infinitely many log-spaced rates). Then a 95% Student-t interval over the
//                   per-seed values (not a bootstrap: 5 seeds give 126 resamples; statistics.hpp).
//   common range    per setting, the rates every variant probed: from the highest of the variants'
//                   lowest rates to the lowest of their highest rates
//   difference      paired by seed: sensitivity(variant) - sensitivity(reference), 95% t interval
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "normlab/stats.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/results.hpp"

namespace normlab::study {

// The loss a run scores on the curve: min(final held-out trained-length loss, cap); cap for a
// diverged run or a non-finite loss; NaN for a run that has not finished or was never evaluated.
// cap = curve_cap(run).
double curve_loss(const RunResult& run);
// ln K (Baseline::uniform_loss), else the run's first train loss.
double curve_cap(const RunResult& run);

// One variant's final held-out loss at every probed rate of one setting: the headline figure's
// series (per-seed points and the mean), and the table's best loss and rate.
struct LossCurve {
  std::string variant, setting;
  double cap = NAN;             // ln K: diverged runs sit here, larger losses are cut to it
  std::vector<double> lrs;      // every probed rate, ascending
  std::vector<uint64_t> seeds;  // every seed that has a run, ascending
  // loss[i][j]: curve_loss() of the run at lrs[i], seeds[j]; NaN where that run is missing,
  // unfinished or never evaluated.
  std::vector<std::vector<double>> loss;
  std::vector<Interval> mean;  // [i]: mean over the finite loss[i][*] with its 95% t interval
  std::vector<int> capped;     // [i]: runs counted as the cap (diverged, non-finite, or above it)
  size_t best = 0;             // index of the lowest mean (the lowest rate on a tie); meaningless if lrs empty
  bool empty() const { return lrs.empty(); }
  double best_lr() const { return lrs.empty() ? NAN : lrs[best]; }
  double best_loss() const { return lrs.empty() ? NAN : mean[best].mean; }
  // The best rate is neither the lowest nor the highest probed rate (needs >= 3 rates).
  bool best_interior() const { return lrs.size() >= 3 && best > 0 && best + 1 < lrs.size(); }
};
// The curve of `runs` (one variant and setting, any rates and seeds; grouped here by spec.lr() and
// spec.seed()).
LossCurve loss_curve(const std::string& variant, const std::string& setting, const std::vector<const RunResult*>& runs);

// The LR sensitivity of one curve over [from, to] (from < to, inside the curve's rates).
struct Sensitivity {
  std::string variant, setting;
  double from = NAN, to = NAN;   // the common range it is averaged over
  std::vector<uint64_t> seeds;   // the seeds with a value (a run at every probed rate in range)
  std::vector<double> per_seed;  // [j] for seeds[j], in nats (>= 0)
  Interval interval;             // mean over seeds, 95% t interval (n = per_seed.size())
};
// Mean over [from, to] of f - min f, f linear between the points (x = ln lr) and the ends
// interpolated; the points must be ascending in lr, finite, and cover [from, to]. NaN otherwise.
double sensitivity_of(const std::vector<double>& lrs, const std::vector<double>& loss, double from, double to);
Sensitivity lr_sensitivity(const LossCurve& curve, double from, double to);

// sensitivity(a) - sensitivity(b), paired by seed (the seeds both have), 95% t interval.
struct SensitivityDifference {
  std::string variant, reference, setting;
  Interval difference;  // variant - reference, nats; n = pairs
};
SensitivityDifference sensitivity_difference(const Sensitivity& variant, const Sensitivity& reference);

// The common range of a setting's curves: [max of the lowest rates, min of the highest rates];
// {NaN, NaN} when the curves do not overlap in at least two rates' span.
std::pair<double, double> common_range(const std::vector<LossCurve>& curves);

}  // namespace normlab::study
