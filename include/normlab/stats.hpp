#pragma once
// Small statistics shared by the benchmarks and the comparison report.
//
// The report's intervals are Student-t intervals over seeds: with 3-10 seeds a bootstrap has too
// few distinct resamples to estimate a tail (5 seeds give 126 distinct resamples and the
// percentile interval under-covers), while the t interval is exact for normal values and the
// usual choice in ML papers at this sample size. Paired differences use the same interval on the
// per-seed differences.
#include <cmath>
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
  double standard_error = NAN;  // of the mean (0: every value the same); NaN with n < 2
  double df = NAN;              // degrees of freedom of its t distribution
  bool has_interval() const { return n >= 2; }
  bool contains_zero() const { return !(low > 0) && !(high < 0); }  // NaN bounds: nothing shown
};
Interval t_interval(const std::vector<double>& values);

// The interval of the mean difference a[i] - b[i] over the pairs where both are finite.
Interval paired_difference(const std::vector<double>& a, const std::vector<double>& b);
// The interval of mean(a) - mean(b) for independent samples (Welch: unequal variances, the
// Welch-Satterthwaite degrees of freedom rounded down). n = the smaller sample's size.
Interval welch_difference(const std::vector<double>& a, const std::vector<double>& b);

// P(T <= t) for Student's t with df > 0 degrees of freedom (regularized incomplete beta, error
// < 1e-10); t = +-infinity gives 1 / 0.
double student_t_cdf(double t, double df);

// Tests on a difference interval (t_interval, paired_difference, welch_difference). With zero
// spread (standard_error 0) the t statistic is undefined and the answer is exact instead: every
// pair differs by the same amount, so "mean = 0" holds (p = 1) or not (p = 0), and equivalence
// within the margin holds (p = 0) or not (p = 1). NaN with n < 2.
// Two-sided p-value of "the mean difference is 0".
double p_difference(const Interval& d);
// Two one-sided tests (Schuirmann 1987) for |mean difference| < margin: the larger of the p-values
// of "mean <= -margin" and "mean >= +margin". p < alpha: equivalent within +-margin at level alpha
// (the 1 - 2 alpha interval lies inside the margin).
double p_equivalence(const Interval& d, double margin);
// Holm's step-down adjustment (1979) of a family of p-values, in the input's order: the k-th
// smallest is multiplied by (m - k + 1), made monotone, capped at 1; NaN entries are left out of m
// and stay NaN. Controls the family-wise error rate under any dependence.
std::vector<double> holm_adjust(const std::vector<double>& p);

// The p-quantile of Student's t with df > 0 degrees of freedom (bisection on student_t_cdf).
double student_t_quantile(double p, double df);

// Seeds (pairs) a paired comparison would need for power 0.8 at level alpha, with the per-seed
// standard deviation sd of the differences and a true difference equal to `mean`: the smallest n
// with n >= (t_{1-a,n-1} + t_{0.8,n-1})^2 sd^2 / effect^2, where for equivalence within +-margin
// a = alpha (each one-sided test) and effect = margin - |mean| (0 when |mean| >= margin: no number
// of seeds shows it), and for a difference a = alpha / 2 and effect = |mean| (0 when mean = 0).
// At least 2; capped at 100000. Pass the multiplicity-adjusted alpha (alpha / m for a family of m).
size_t seeds_for_equivalence(double sd, double mean, double margin, double alpha = 0.05);
size_t seeds_for_difference(double sd, double mean, double alpha = 0.05);

}  // namespace normlab
