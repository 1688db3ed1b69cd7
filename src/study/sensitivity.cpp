// Final held-out loss against learning rate and the LR sensitivity over a common range of rates
// (sensitivity.hpp; definitions in docs/compare.md, "Learning-rate sensitivity").
#include "normlab/study/sensitivity.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "normlab/study/outcome.hpp"

namespace normlab::study {

double curve_cap(const RunResult& run) {
  return std::isfinite(run.baseline.uniform_loss) ? run.baseline.uniform_loss : run.first_train_loss();
}

double curve_loss(const RunResult& run) {
  const double cap = curve_cap(run);
  if (run.diverged) return cap;  // a broken model is worth the uniform guess
  if (!run.finished || run.evals.empty()) return NAN;
  const double loss = run.final_trained().loss;
  if (!std::isfinite(loss)) return cap;
  return std::isfinite(cap) ? std::min(loss, cap) : loss;
}

LossCurve loss_curve(const std::string& variant, const std::string& setting,
                     const std::vector<const RunResult*>& runs) {
  LossCurve curve;
  curve.variant = variant, curve.setting = setting;
  std::set<double> lrs;
  std::set<uint64_t> seeds;
  for (const RunResult* r : runs) {
    lrs.insert(r->spec.lr());
    seeds.insert(r->spec.seed());
    if (!std::isfinite(curve.cap)) curve.cap = curve_cap(*r);
  }
  curve.lrs.assign(lrs.begin(), lrs.end());
  curve.seeds.assign(seeds.begin(), seeds.end());
  curve.loss.assign(curve.lrs.size(), std::vector<double>(curve.seeds.size(), NAN));
  curve.capped.assign(curve.lrs.size(), 0);
  for (const RunResult* r : runs) {
    const size_t i = size_t(std::lower_bound(curve.lrs.begin(), curve.lrs.end(), r->spec.lr()) - curve.lrs.begin());
    const size_t j =
        size_t(std::lower_bound(curve.seeds.begin(), curve.seeds.end(), r->spec.seed()) - curve.seeds.begin());
    const double v = curve_loss(*r);
    curve.loss[i][j] = v;
    const double raw = r->final_trained().loss;
    if (std::isfinite(v) && (r->diverged || !std::isfinite(raw) || raw > v)) ++curve.capped[i];
  }
  for (size_t i = 0; i < curve.lrs.size(); ++i) {
    curve.mean.push_back(t_interval(curve.loss[i]));
    const double m = curve.mean.back().mean;
    if (std::isfinite(m) && !(curve.mean[curve.best].mean <= m)) curve.best = i;
  }
  return curve;
}

double sensitivity_of(const std::vector<double>& lrs, const std::vector<double>& loss, double from, double to) {
  if (lrs.size() != loss.size() || lrs.empty() || !(from < to) || !(lrs.front() <= from) || !(lrs.back() >= to))
    return NAN;
  // f(x) on x = ln lr, linear between the points; the knots inside [ln from, ln to] with the ends.
  const auto at = [&](double x) {
    for (size_t i = 0; i + 1 < lrs.size(); ++i) {
      const double x0 = std::log(lrs[i]), x1 = std::log(lrs[i + 1]);
      if (x >= x0 && x <= x1) return x1 == x0 ? loss[i] : loss[i] + (loss[i + 1] - loss[i]) * (x - x0) / (x1 - x0);
    }
    return lrs.size() == 1 ? loss[0] : NAN;
  };
  const double a = std::log(from), b = std::log(to);
  std::vector<std::pair<double, double>> knots{{a, at(a)}};
  for (size_t i = 0; i < lrs.size(); ++i)
    if (const double x = std::log(lrs[i]); x > a && x < b) knots.emplace_back(x, loss[i]);
  knots.emplace_back(b, at(b));
  double area = 0, lowest = INFINITY;
  for (size_t k = 0; k < knots.size(); ++k) {
    if (!std::isfinite(knots[k].second)) return NAN;
    lowest = std::min(lowest, knots[k].second);
    if (k > 0) area += 0.5 * (knots[k].second + knots[k - 1].second) * (knots[k].first - knots[k - 1].first);
  }
  return std::max(0.0, area / (b - a) - lowest);  // rounding can leave a flat curve at -1e-17
}

Sensitivity lr_sensitivity(const LossCurve& curve, double from, double to) {
  Sensitivity s;
  s.variant = curve.variant, s.setting = curve.setting, s.from = from, s.to = to;
  for (size_t j = 0; j < curve.seeds.size(); ++j) {
    std::vector<double> lrs, loss;  // this seed's finished rates
    for (size_t i = 0; i < curve.lrs.size(); ++i)
      if (std::isfinite(curve.loss[i][j])) lrs.push_back(curve.lrs[i]), loss.push_back(curve.loss[i][j]);
    const double v = sensitivity_of(lrs, loss, from, to);
    if (!std::isfinite(v)) continue;
    s.seeds.push_back(curve.seeds[j]);
    s.per_seed.push_back(v);
  }
  s.interval = t_interval(s.per_seed);
  return s;
}

SensitivityDifference sensitivity_difference(const Sensitivity& variant, const Sensitivity& reference) {
  SensitivityDifference d;
  d.variant = variant.variant, d.reference = reference.variant, d.setting = variant.setting;
  std::map<uint64_t, double> ref;
  for (size_t j = 0; j < reference.seeds.size(); ++j) ref[reference.seeds[j]] = reference.per_seed[j];
  std::vector<double> a, b;
  for (size_t j = 0; j < variant.seeds.size(); ++j)
    if (const auto it = ref.find(variant.seeds[j]); it != ref.end())
      a.push_back(variant.per_seed[j]), b.push_back(it->second);
  d.difference = paired_difference(a, b);
  return d;
}

std::pair<double, double> common_range(const std::vector<LossCurve>& curves) {
  double lo = -INFINITY, hi = INFINITY;
  bool any = false;
  for (const LossCurve& c : curves) {
    double first = NAN, last = NAN;  // the curve's rates with a finite mean
    for (size_t i = 0; i < c.lrs.size(); ++i)
      if (std::isfinite(c.mean[i].mean)) {
        if (!std::isfinite(first)) first = c.lrs[i];
        last = c.lrs[i];
      }
    if (!std::isfinite(first)) continue;
    any = true;
    lo = std::max(lo, first);
    hi = std::min(hi, last);
  }
  if (!any || !(lo < hi)) return {NAN, NAN};
  return {lo, hi};
}

}  // namespace normlab::study
