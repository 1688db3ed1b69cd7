#pragma once
// Small statistics shared by the benchmarks and the comparison report.
//
// The report's intervals are Student-t intervals over seeds: with 3-10 seeds a bootstrap has too
// few distinct resamples to estimate a tail (5 seeds give 126 distinct resamples and the
// percentile interval under-covers), while the t interval is exact for normal values and the
// usual choice in ML papers at this sample size. Paired differences use the same interval on the
// per-seed differences.
#include <cstddef>
#include <vector>

namespace normlab {

// The median of the finite values (NaN and infinities are skipped: a diverged run's loss, say);
// the mean of the two middle ones for an even count; NaN when no value is finite.
double median(std::vector<double> values);

// The 0.975 quantile of Student's t distribution with `df` degrees of freedom (df >= 1): the
// multiplier of a two-sided 95% interval. Exact table values for df <= 30, interpolated in 1/df
// above (error < 1e-3), 1.959964 in the limit.
double t_quantile_975(size_t df);

// A mean with its two-sided 95% t interval over the finite values. n = number of finite values;
// with n < 2 low and high are NaN (no interval from one value); with n = 0 mean is NaN too.
struct Interval {
  double mean = 0, low = 0, high = 0;
  size_t n = 0;
  bool has_interval() const { return n >= 2; }
  bool contains_zero() const { return !(low > 0) && !(high < 0); }  // NaN bounds: no difference shown
};
Interval t_interval(const std::vector<double>& values);

// The interval of the mean difference a[i] - b[i] over the pairs where both are finite.
Interval paired_difference(const std::vector<double>& a, const std::vector<double>& b);
// The interval of mean(a) - mean(b) for independent samples (Welch: unequal variances, the
// Welch-Satterthwaite degrees of freedom rounded down). n = the smaller sample's size.
Interval welch_difference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace normlab
