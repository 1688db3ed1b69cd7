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
