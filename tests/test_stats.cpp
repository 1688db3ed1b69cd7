// normlab::median, used by every benchmark and by the comparison report.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "normlab/stats.hpp"

TEST_CASE("median: odd and even counts, non-finite values skipped, NaN when nothing is finite") {
  using normlab::median;
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
  CHECK(median({5.0}) == 5.0);
  CHECK(median({NAN, 7.0, inf, 1.0, -inf}) == 4.0);  // a diverged run's loss does not count
  CHECK(std::isnan(median({})));
  CHECK(std::isnan(median({NAN, inf})));
}

TEST_CASE("t interval: known values, one value has no interval, non-finite values skipped") {
  using normlab::t_interval;
  // 1..5: mean 3, sd sqrt(2.5), se sqrt(0.5), t_{0.975,4} = 2.776.
  const normlab::Interval i = t_interval({1, 2, 3, 4, 5});
  CHECK(i.n == 5);
  CHECK(i.mean == doctest::Approx(3.0));
  CHECK(i.low == doctest::Approx(3.0 - 2.776 * std::sqrt(0.5)));
  CHECK(i.high == doctest::Approx(3.0 + 2.776 * std::sqrt(0.5)));
  CHECK_FALSE(i.contains_zero());
  const normlab::Interval one = t_interval({NAN, 0.7});
  CHECK(one.n == 1);
  CHECK(one.mean == 0.7);
  CHECK_FALSE(one.has_interval());
  CHECK(one.contains_zero());  // no interval: nothing shown
  CHECK(std::isnan(t_interval({}).mean));
  // Identical values: a zero-width interval.
  const normlab::Interval same = t_interval({0.5, 0.5, 0.5});
  CHECK(same.low == 0.5);
  CHECK(same.high == 0.5);
}

TEST_CASE("t quantile: the table, its tail, and the normal limit") {
  CHECK(normlab::t_quantile_975(1) == doctest::Approx(12.706));
  CHECK(normlab::t_quantile_975(4) == doctest::Approx(2.776));
  CHECK(normlab::t_quantile_975(30) == doctest::Approx(2.042));
  CHECK(normlab::t_quantile_975(60) == doctest::Approx(2.000).epsilon(1e-3));   // table: 2.000
  CHECK(normlab::t_quantile_975(120) == doctest::Approx(1.980).epsilon(1e-3));  // table: 1.980
  CHECK(normlab::t_quantile_975(1000000) == doctest::Approx(1.96).epsilon(1e-3));
  CHECK(std::isnan(normlab::t_quantile_975(0)));
}

TEST_CASE("paired difference: identical groups show no difference, a constant shift is exact") {
  const std::vector<double> a{0.9, 0.8, 0.95, 0.7, 0.85};
  const normlab::Interval same = normlab::paired_difference(a, a);
  CHECK(same.mean == 0);
  CHECK(same.contains_zero());
  std::vector<double> shifted = a;
  for (double& v : shifted) v -= 0.1;
  const normlab::Interval shift = normlab::paired_difference(a, shifted);
  CHECK(shift.mean == doctest::Approx(0.1));
  CHECK(shift.low == doctest::Approx(0.1));
  CHECK(shift.high == doctest::Approx(0.1));
  CHECK_FALSE(shift.contains_zero());
  // Unpaired noise larger than the shift but the same in both: pairing removes it.
  const std::vector<double> b{0.2, 0.9, 0.5, 0.1, 0.6};
  std::vector<double> b_plus = b;
  for (double& v : b_plus) v += 0.02;
  CHECK_FALSE(normlab::paired_difference(b_plus, b).contains_zero());
  // A pair with a non-finite member is left out.
  CHECK(normlab::paired_difference({1.0, NAN, 3.0}, {0.0, 1.0, 1.0}).n == 2);
}

TEST_CASE("welch difference: equal groups contain zero, separated groups do not, df from Welch-Satterthwaite") {
  const std::vector<double> a{1.0, 2.0, 3.0}, b{1.0, 2.0, 3.0};
  CHECK(normlab::welch_difference(a, b).contains_zero());
  // Equal variances and sizes: df = 2(n-1) = 4, se = sqrt(2/3).
  const std::vector<double> c{11.0, 12.0, 13.0};
  const normlab::Interval d = normlab::welch_difference(c, a);
  CHECK(d.mean == doctest::Approx(10.0));
  CHECK(d.low == doctest::Approx(10.0 - 2.776 * std::sqrt(2.0 / 3.0)));
  CHECK_FALSE(d.contains_zero());
  CHECK_FALSE(normlab::welch_difference({1.0}, c).has_interval());
}

TEST_CASE("student t cdf: table values, symmetry, the Cauchy case and the infinities") {
  using normlab::student_t_cdf;
  CHECK(student_t_cdf(0.0, 5) == doctest::Approx(0.5));
  CHECK(student_t_cdf(2.776, 4) == doctest::Approx(0.975).epsilon(1e-4));
  CHECK(student_t_cdf(12.706, 1) == doctest::Approx(0.975).epsilon(1e-4));
  CHECK(student_t_cdf(1.0, 1) == doctest::Approx(0.75).epsilon(1e-9));  // Cauchy: 1/2 + atan(1)/pi
  CHECK(student_t_cdf(-2.0, 10) == doctest::Approx(0.036694).epsilon(1e-4));
  CHECK(student_t_cdf(-2.0, 10) + student_t_cdf(2.0, 10) == doctest::Approx(1.0));
  CHECK(student_t_cdf(INFINITY, 3) == 1.0);
  CHECK(student_t_cdf(-INFINITY, 3) == 0.0);
  CHECK(std::isnan(student_t_cdf(1.0, 0)));
}

TEST_CASE("difference and equivalence tests: p-values from the t distribution, zero spread exact") {
  // 1..5 shifted: mean 0.3 - 3 + ..., here mean 3, se sqrt(0.5), df 4.
  const normlab::Interval i = normlab::t_interval({1, 2, 3, 4, 5});
  CHECK(normlab::p_difference(i) == doctest::Approx(2 * normlab::student_t_cdf(-3.0 / std::sqrt(0.5), 4)));
  // The p-value at the 95% interval's edge is 0.05: an interval ending at 0.
  const normlab::Interval edge{2.776 * 0.1, 0, 2 * 2.776 * 0.1, 5, 0.1, 4};
  CHECK(normlab::p_difference(edge) == doctest::Approx(0.05).epsilon(1e-3));
  // TOST: mean 0, se 0.01, df 4: p = P(T > margin / se).
  const normlab::Interval small{0.0, -0.028, 0.028, 5, 0.01, 4};
  CHECK(normlab::p_equivalence(small, 0.05) == doctest::Approx(1 - normlab::student_t_cdf(5.0, 4)));
  CHECK(normlab::p_equivalence(small, 0.05) < 0.05);
  // Just inside / outside: the 90% interval (t_0.95,4 = 2.132) reaching the margin gives p = 0.05.
  const double t95_4 = 2.131847;
  CHECK(normlab::p_equivalence({0.0, 0, 0, 5, 0.01, 4}, t95_4 * 0.01) == doctest::Approx(0.05).epsilon(1e-4));
  CHECK(normlab::p_equivalence({0.0, 0, 0, 5, 0.01, 4}, 1.01 * t95_4 * 0.01) < 0.05);
  CHECK(normlab::p_equivalence({0.0, 0, 0, 5, 0.01, 4}, 0.99 * t95_4 * 0.01) > 0.05);
  // A mean at the margin is never equivalent.
  CHECK(normlab::p_equivalence({0.05, 0, 0, 5, 0.01, 4}, 0.05) == doctest::Approx(0.5));
  // Zero spread: every pair the same. No t statistic; the answer is exact.
  const normlab::Interval identical = normlab::paired_difference({1, 1, 1}, {1, 1, 1});
  CHECK(identical.standard_error == 0);
  CHECK(normlab::p_difference(identical) == 1.0);
  CHECK(normlab::p_equivalence(identical, 0.02) == 0.0);
  const normlab::Interval constant{0.1, 0.1, 0.1, 3, 0.0, 2};
  CHECK(normlab::p_difference(constant) == 0.0);
  CHECK(normlab::p_equivalence(constant, 0.2) == 0.0);
  CHECK(normlab::p_equivalence(constant, 0.1) == 1.0);
  // One value: no test.
  CHECK(std::isnan(normlab::p_difference(normlab::t_interval({0.3}))));
  CHECK(std::isnan(normlab::p_equivalence(normlab::t_interval({0.3}), 0.1)));
}

TEST_CASE("holm: step-down multipliers, monotone, capped at 1, NaN left out of the family") {
  const std::vector<double> adjusted = normlab::holm_adjust({0.01, 0.04, 0.03, NAN});
  REQUIRE(adjusted.size() == 4);
  CHECK(adjusted[0] == doctest::Approx(0.03));  // smallest of 3: x3
  CHECK(adjusted[2] == doctest::Approx(0.06));  // second: x2
  CHECK(adjusted[1] == doctest::Approx(0.06));  // third: x1 = 0.04, raised to the one before
  CHECK(std::isnan(adjusted[3]));
  CHECK(normlab::holm_adjust({0.5, 0.6})[0] == 1.0);
  CHECK(normlab::holm_adjust({0.0, 0.0}) == std::vector<double>{0.0, 0.0});
}

TEST_CASE("seeds needed: the smallest n whose t test has 80% power at the observed spread") {
  CHECK(normlab::student_t_quantile(0.975, 4) == doctest::Approx(2.776).epsilon(1e-3));
  CHECK(normlab::student_t_quantile(0.5, 7) == doctest::Approx(0.0).epsilon(1e-9));
  CHECK(normlab::student_t_quantile(0.95, 1e9) == doctest::Approx(1.644854).epsilon(1e-5));
  // The definition, just met at n and not at n - 1.
  auto meets = [](size_t n, double one_sided_alpha, double sd, double effect) {
    const double df = double(n - 1);
    const double t = normlab::student_t_quantile(1 - one_sided_alpha, df) + normlab::student_t_quantile(0.8, df);
    return double(n) >= t * t * sd * sd / (effect * effect);
  };
  const size_t equivalence = normlab::seeds_for_equivalence(0.1, 0.0, 0.05);
  CHECK(meets(equivalence, 0.05, 0.1, 0.05));
  CHECK_FALSE(meets(equivalence - 1, 0.05, 0.1, 0.05));
  CHECK(equivalence > 25);  // more than the normal approximation's 24.7
  // The observed difference eats into the margin; a stricter alpha needs more seeds.
  CHECK(normlab::seeds_for_equivalence(0.1, 0.02, 0.05) > equivalence);
  CHECK(normlab::seeds_for_equivalence(0.1, 0.0, 0.05, 0.001) > equivalence);
  CHECK(normlab::seeds_for_equivalence(0.1, 0.05, 0.05) == 0);  // at the margin: no number of seeds
  const size_t difference = normlab::seeds_for_difference(0.1, 0.05);
  CHECK(meets(difference, 0.025, 0.1, 0.05));
  CHECK_FALSE(meets(difference - 1, 0.025, 0.1, 0.05));
  CHECK(normlab::seeds_for_difference(0.1, 0.0) == 0);
  CHECK(normlab::seeds_for_difference(0.001, 1.0) == 2);  // never fewer than 2
}
