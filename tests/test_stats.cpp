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
