#include "normlab/stats.hpp"

#include <algorithm>
#include <array>
#include <cmath>

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
  static constexpr std::array<double, 30> table{
      12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
      2.120,  2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
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
  double squares = 0;
  for (double v : values)
    if (std::isfinite(v)) squares += (v - out.mean) * (v - out.mean);
  const double standard_error = std::sqrt(squares / double(out.n - 1) / double(out.n));
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
  if (se == 0) {
    out.low = out.high = out.mean;
    return out;
  }
  const double df = (va + vb) * (va + vb) /
                    (va * va / double(ia.n - 1) + vb * vb / double(ib.n - 1));
  const double t = t_quantile_975(std::max<size_t>(1, size_t(std::floor(df))));
  out.low = out.mean - t * se;
  out.high = out.mean + t * se;
  return out;
}

}  // namespace normlab
