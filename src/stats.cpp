#include "normlab/stats.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

namespace normlab {

double median(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double x) { return !std::isfinite(x); }), values.end());
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double t_quantile_975(size_t df) {
  // t_{0.975, df} for df = 1..30 (any statistics table).
  static constexpr std::array<double, 30> table{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                                2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                                2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df == 0) return NAN;
  if (df <= table.size()) return table[df - 1];
  // Above 30 the quantile is close to linear in 1/df between t_30 and the normal quantile.
  constexpr double z = 1.959964;
  return z + (table.back() - z) * 30.0 / double(df);
}

Interval t_interval(const std::vector<double>& values) {
  Interval out;
  double sum = 0;
  for (double v : values)
    if (std::isfinite(v)) sum += v, ++out.n;
  if (out.n == 0) return {NAN, NAN, NAN, 0};
  out.mean = sum / double(out.n);
  if (out.n < 2) {
    out.low = out.high = NAN;
    return out;
  }
  // Equal values have no spread; rounding in the mean must not invent one.
  double lowest = INFINITY, highest = -INFINITY;
  for (double v : values)
    if (std::isfinite(v)) lowest = std::min(lowest, v), highest = std::max(highest, v);
  if (lowest == highest) out.mean = lowest;
  double squares = 0;
  for (double v : values)
    if (std::isfinite(v)) squares += (v - out.mean) * (v - out.mean);
  const double standard_error = std::sqrt(squares / double(out.n - 1) / double(out.n));
  out.standard_error = standard_error;
  out.df = double(out.n - 1);
  const double half_width = t_quantile_975(out.n - 1) * standard_error;
  out.low = out.mean - half_width;
  out.high = out.mean + half_width;
  return out;
}

Interval paired_difference(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> differences;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::isfinite(a[i]) && std::isfinite(b[i])) differences.push_back(a[i] - b[i]);
  return t_interval(differences);
}

Interval welch_difference(const std::vector<double>& a, const std::vector<double>& b) {
  const Interval ia = t_interval(a), ib = t_interval(b);
  Interval out;
  out.n = std::min(ia.n, ib.n);
  out.mean = ia.mean - ib.mean;
  out.low = out.high = NAN;
  if (!ia.has_interval() || !ib.has_interval()) return out;
  auto variance_of_mean = [](const std::vector<double>& v, const Interval& i) {
    double squares = 0;
    for (double x : v)
      if (std::isfinite(x)) squares += (x - i.mean) * (x - i.mean);
    return squares / double(i.n - 1) / double(i.n);
  };
  const double va = variance_of_mean(a, ia), vb = variance_of_mean(b, ib);
  const double se = std::sqrt(va + vb);
  out.standard_error = se;
  if (se == 0) {
    out.low = out.high = out.mean;
    out.df = double(ia.n + ib.n - 2);
    return out;
  }
  const double df = (va + vb) * (va + vb) / (va * va / double(ia.n - 1) + vb * vb / double(ib.n - 1));
  out.df = std::max(1.0, std::floor(df));
  const double t = t_quantile_975(size_t(out.df));
  out.low = out.mean - t * se;
  out.high = out.mean + t * se;
  return out;
}

namespace {

// The continued fraction of the regularized incomplete beta function I_x(a, b) (Numerical Recipes
// 6.4, modified Lentz), converging for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::abs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    const double m2 = 2.0 * m;
    for (const double coefficient :
         {m * (b - m) * x / ((a + m2 - 1) * (a + m2)), -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))}) {
      d = 1 + coefficient * d;
      if (std::abs(d) < tiny) d = tiny;
      c = 1 + coefficient / c;
      if (std::abs(c) < tiny) c = tiny;
      d = 1 / d;
      h *= d * c;
    }
    if (std::abs(d * c - 1) < 1e-15) break;
  }
  return h;
}

// I_x(a, b), given x and 1 - x apart so that x near 1 keeps its precision.
double incomplete_beta(double a, double b, double x, double one_minus_x) {
  if (x <= 0) return 0;
  if (one_minus_x <= 0) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log(one_minus_x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_continued_fraction(a, b, x) / a;
  return 1 - front * beta_continued_fraction(b, a, one_minus_x) / b;
}

// The smallest n >= 2 with n >= (t_{1-a,n-1} + t_{0.8,n-1})^2 sd^2 / effect^2 (0: no effect).
size_t seeds_from(double one_sided_alpha, double sd, double effect) {
  if (!(effect > 0) || !std::isfinite(sd) || !(one_sided_alpha > 0)) return 0;
  // t quantiles exceed the normal ones, so the normal-approximation answer is a lower bound to start from.
  const double z = student_t_quantile(1 - one_sided_alpha, 1e9) + student_t_quantile(0.8, 1e9);
  const double normal_n = std::min(1e5, std::ceil(z * z * sd * sd / (effect * effect)));
  for (size_t n = std::max<size_t>(2, size_t(normal_n)); n <= 100000; n = n < 1000 ? n + 1 : n + n / 100) {
    const double df = double(n - 1);
    const double t = student_t_quantile(1 - one_sided_alpha, df) + student_t_quantile(0.8, df);
    if (double(n) >= t * t * sd * sd / (effect * effect)) return n;
  }
  return 100000;
}

}  // namespace

double student_t_cdf(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return NAN;
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  // P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2).
  const double tail = 0.5 * incomplete_beta(0.5 * df, 0.5, df / (df + t * t), t * t / (df + t * t));
  return t > 0 ? 1 - tail : tail;
}

double p_difference(const Interval& d) {
  if (!d.has_interval() || !std::isfinite(d.mean) || !std::isfinite(d.standard_error)) return NAN;
  if (d.standard_error == 0) return d.mean == 0 ? 1.0 : 0.0;
  return 2 * student_t_cdf(-std::abs(d.mean) / d.standard_error, d.df);
}

double p_equivalence(const Interval& d, double margin) {
  if (!d.has_interval() || !std::isfinite(d.mean) || !std::isfinite(d.standard_error) || !(margin > 0)) return NAN;
  if (d.standard_error == 0) return std::abs(d.mean) < margin ? 0.0 : 1.0;
  const double p_lower = 1 - student_t_cdf((d.mean + margin) / d.standard_error, d.df);  // H0: mean <= -margin
  const double p_upper = student_t_cdf((d.mean - margin) / d.standard_error, d.df);      // H0: mean >= +margin
  return std::max(p_lower, p_upper);
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p.size(); ++i)
    if (!std::isnan(p[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adjusted(p.size(), NAN);
  const size_t m = order.size();
  double running = 0;  // step-down: an adjusted p-value is never below the one before it
  for (size_t k = 0; k < m; ++k) {
    running = std::max(running, std::min(1.0, double(m - k) * p[order[k]]));
    adjusted[order[k]] = running;
  }
  return adjusted;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0) || !(p < 1) || !(df > 0)) return NAN;
  double lo = -1e3, hi = 1e3;  // beyond any quantile the callers ask for (p within 1e-12 of 0 or 1)
  for (int i = 0; i < 100 && hi - lo > 1e-9; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

size_t seeds_for_equivalence(double sd, double mean, double margin, double alpha) {
  return seeds_from(alpha, sd, margin - std::abs(mean));
}

size_t seeds_for_difference(double sd, double mean, double alpha) { return seeds_from(alpha / 2, sd, std::abs(mean)); }

}  // namespace normlab
