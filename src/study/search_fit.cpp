// The learning-rate search's stability boundary (search.hpp): the logistic fit of P(learned)
// against ln lr (Firth-penalized) with its profile-likelihood interval, and the ratio of two
// variants' boundaries.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "normlab/study/search.hpp"

namespace normlab::study {

namespace {

constexpr double kChi2Level95 = 3.841458820694124;  // chi2 with 1 degree of freedom, 0.95 quantile
constexpr double kThetaStep = 0.01;                 // the profile's grid in ln lr: 1% steps in lr
constexpr double kThetaMargin = 0.5;                // the grid reaches this far (ln) past the searched range

}  // namespace

namespace {

double sigmoid(double z) { return z < 0 ? std::exp(z) / (1 + std::exp(z)) : 1 / (1 + std::exp(-z)); }

// The rates a fit uses: ln lr (centered), learned, runs.
struct FitData {
  std::vector<double> x;
  std::vector<int> learned, runs;
  double center = 0;  // the mean of ln lr: the determinant below is computed on centered x
};

// ln sigmoid(z), ln sigmoid(-z) and sigmoid(z) from one exp and one log1p, e = exp(-|z|): the
// same calls on the same arguments as the stable one-at-a-time forms, ln sigmoid(z) =
// z < 0 ? z - log1p(exp(z)) : -log1p(exp(-z)), so the same values.
struct Sigmoids {
  double log_p, log_q, p;  // ln sigmoid(z), ln sigmoid(-z), sigmoid(z)
};
Sigmoids sigmoids(double z) {
  if (z < 0) {  // -z > 0
    const double e = std::exp(z), l = std::log1p(e);
    return {z - l, -l, e / (1 + e)};
  }
  // z >= 0 (a -0.0 included): -z <= 0, and log_sigmoid(-z) takes its first branch only when -z < 0
  const double e = std::exp(-z), l = std::log1p(e);
  return {-l, -z < 0 ? -z - l : -l, 1 / (1 + e)};
}

// Firth's penalized log-likelihood of P(learned) = sigmoid(-s (x - theta)): the binomial
// log-likelihood plus half the log-determinant of the Fisher information of (intercept, slope).
double penalized_loglik(const FitData& d, double theta, double s) {
  double ll = 0, w0 = 0, w1 = 0, w2 = 0;
  for (size_t i = 0; i < d.x.size(); ++i) {
    const double eta = -s * (d.x[i] - theta);
    const Sigmoids g = sigmoids(eta);
    ll += d.learned[i] * g.log_p + (d.runs[i] - d.learned[i]) * g.log_q;
    const double p = g.p, w = d.runs[i] * p * (1 - p);
    w0 += w;
    w1 += w * d.x[i];
    w2 += w * d.x[i] * d.x[i];
  }
  const double det = w0 * w2 - w1 * w1;
  if (!(det > 0)) return -std::numeric_limits<double>::infinity();
  return ll + 0.5 * std::log(det);
}

// The penalized log-likelihood maximized over the slope at a fixed theta: a grid over ln s, then
// golden-section search around its best point. Returns {value, s}.
std::pair<double, double> profile_at(const FitData& d, double theta) {
  constexpr double kLo = -6, kHi = 8, kStep = 0.5;
  double best_u = kLo, best = -std::numeric_limits<double>::infinity();
  for (double u = kLo; u <= kHi + 1e-9; u += kStep)
    if (const double v = penalized_loglik(d, theta, std::exp(u)); v > best) best = v, best_u = u;
  double a = best_u - kStep, b = best_u + kStep;
  const double ratio = 0.6180339887498949;
  double c = b - ratio * (b - a), e = a + ratio * (b - a);
  double fc = penalized_loglik(d, theta, std::exp(c)), fe = penalized_loglik(d, theta, std::exp(e));
  for (int it = 0; it < 30; ++it) {
    if (fc > fe) {
      b = e, e = c, fe = fc;
      c = b - ratio * (b - a);
      fc = penalized_loglik(d, theta, std::exp(c));
    } else {
      a = c, c = e, fc = fe;
      e = a + ratio * (b - a);
      fe = penalized_loglik(d, theta, std::exp(e));
    }
  }
  const double u = fc > fe ? c : e;
  const double v = std::max(fc, fe);
  return v >= best ? std::pair{v, std::exp(u)} : std::pair{best, std::exp(best_u)};
}

// Where the profile, falling from its maximum at `peak`, crosses max - chi2/2 (linear between grid
// points), walking by `dir`; nullopt-like NaN when it never does on the grid.
double crossing(const std::vector<double>& grid, const std::vector<double>& profile, size_t peak, int dir) {
  const double cutoff = profile[peak] - kChi2Level95 / 2;
  for (size_t i = peak;;) {
    const long next = long(i) + dir;
    if (next < 0 || next >= long(profile.size())) return NAN;
    const size_t j = size_t(next);
    if (profile[j] < cutoff) {
      const double t = (profile[i] - cutoff) / (profile[i] - profile[j]);
      return grid[i] + t * (grid[j] - grid[i]);
    }
    i = j;
  }
}

}  // namespace

double BoundaryFit::p_learned(double lr) const {
  if (kind != Kind::boundary) return NAN;
  return sigmoid(-slope * (std::log(lr) - std::log(lr50)));
}

namespace {

BoundaryFit fit_boundary_uncached(std::vector<RateOutcome> tested, double from, double to) {
  tested.erase(std::remove_if(tested.begin(), tested.end(), [](const RateOutcome& r) { return r.runs == 0; }),
               tested.end());
  std::sort(tested.begin(), tested.end(), [](const RateOutcome& a, const RateOutcome& b) { return a.lr < b.lr; });
  BoundaryFit fit;
  if (tested.empty()) return fit;
  const size_t peak = peak_index(tested);
  fit.peak_lr = tested[peak].lr;
  fit.top_lr = tested.back().lr;
  if (!mostly_learned(tested[peak])) {
    fit.kind = BoundaryFit::Kind::never_learned;
    return fit;
  }
  if (mostly_learned(tested.back())) {
    fit.kind = BoundaryFit::Kind::never_failed;
    return fit;
  }
  fit.kind = BoundaryFit::Kind::boundary;
  FitData d;
  for (size_t i = peak; i < tested.size(); ++i) {
    d.x.push_back(std::log(tested[i].lr));
    d.learned.push_back(tested[i].learned);
    d.runs.push_back(tested[i].runs);
    fit.fitted_runs += tested[i].runs;
  }
  fit.fitted_rates = int(d.x.size());
  for (double x : d.x) d.center += x / double(d.x.size());
  for (double& x : d.x) x -= d.center;

  const double lo = std::log(std::min(from, fit.peak_lr)) - kThetaMargin,
               hi = std::log(std::max(to, fit.top_lr)) + kThetaMargin;
  size_t best = 0;
  std::vector<double> slopes;
  for (double theta = lo; theta <= hi + 1e-12; theta += kThetaStep) {
    const auto [value, s] = profile_at(d, theta - d.center);
    fit.theta_grid.push_back(theta);
    fit.profile.push_back(value);
    slopes.push_back(s);
    if (value > fit.profile[best]) best = fit.profile.size() - 1;
  }
  fit.lr50 = std::exp(fit.theta_grid[best]);
  fit.slope = slopes[best];
  const double low = crossing(fit.theta_grid, fit.profile, best, -1);
  const double high = crossing(fit.theta_grid, fit.profile, best, +1);
  fit.low_open = !(low >= std::log(from));
  fit.high_open = !(high <= std::log(to));
  fit.low = fit.low_open ? from : std::exp(low);
  fit.high = fit.high_open ? to : std::exp(high);
  return fit;
}

}  // namespace

// A report asks for the same fits from several of its sections (and a compare's report after
// each read of the same runs): each is computed once per process. A pure function of its
// arguments, so a remembered fit is the one it would compute.
BoundaryFit fit_boundary(std::vector<RateOutcome> tested, double from, double to) {
  using Key = std::tuple<std::vector<std::tuple<double, int, int>>, double, double>;
  static std::mutex mutex;
  static std::map<Key, BoundaryFit> fits;
  Key key{{}, from, to};
  for (const RateOutcome& r : tested) std::get<0>(key).emplace_back(r.lr, r.learned, r.runs);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = fits.find(key); it != fits.end()) return it->second;
  }
  BoundaryFit fit = fit_boundary_uncached(std::move(tested), from, to);
  const std::lock_guard<std::mutex> lock(mutex);
  if (fits.size() >= 1024) fits.clear();  // bounded: a long-lived `normlab serve` redraws many reports
  fits.emplace(std::move(key), fit);
  return fit;
}

BoundaryRatio boundary_ratio(const BoundaryFit& variant, const BoundaryFit& reference) {
  BoundaryRatio out;
  if (variant.kind != BoundaryFit::Kind::boundary || reference.kind != BoundaryFit::Kind::boundary) return out;
  // Profile of delta = theta_v - theta_ref: for each shift j of the grid, the best sum of the two
  // profiles with theta_v = theta_ref + delta. Both grids have the same step; their starts may differ.
  const long nv = long(variant.profile.size()), nr = long(reference.profile.size());
  const long offset = std::lround((variant.theta_grid.front() - reference.theta_grid.front()) / kThetaStep);
  std::vector<double> deltas, joint;
  size_t best = 0;
  for (long j = -(nr - 1); j <= nv - 1; ++j) {
    double m = -std::numeric_limits<double>::infinity();
    for (long i = std::max(0L, -j); i < nr && i + j < nv; ++i)
      m = std::max(m, variant.profile[i + j] + reference.profile[i]);
    deltas.push_back(double(j + offset) * kThetaStep);
    joint.push_back(m);
    if (m > joint[best]) best = joint.size() - 1;
  }
  const double low = crossing(deltas, joint, best, -1), high = crossing(deltas, joint, best, +1);
  out.ratio = std::exp(deltas[best]);
  out.low_open = variant.low_open || reference.high_open || !std::isfinite(low);
  out.high_open = variant.high_open || reference.low_open || !std::isfinite(high);
  out.low = std::exp(std::isfinite(low) ? low : deltas.front());
  out.high = std::exp(std::isfinite(high) ? high : deltas.back());
  return out;
}

}  // namespace normlab::study
