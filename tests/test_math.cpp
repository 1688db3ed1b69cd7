// normlab's own exp, expm1, tanh, erf, erfc (kernels/math.hpp) against glibc's double versions
// rounded to float, over wide ranges of inputs, plus the special values.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <utility>

#include "normlab/kernels/math.hpp"

namespace math = normlab::math;

namespace {

// Floats mapped to integers in their order, so the difference of two is their distance in ulps.
int64_t ordered(float f) {
  const int32_t bits = std::bit_cast<int32_t>(f);
  return bits < 0 ? -int64_t(bits & 0x7fffffff) : int64_t(bits);
}
float from_ordered(int64_t k) { return std::bit_cast<float>(k < 0 ? uint32_t(-k) | 0x80000000u : uint32_t(k)); }

struct Worst {
  int64_t ulps = 0;
  float at = 0.0f;
  int64_t points = 0;
};

// About 400k floats spread evenly (in ulp order, so every binade gets its share) over [lo, hi];
// points whose reference has magnitude below min_reference are skipped.
template <class Ours, class Reference>
Worst sweep(Ours ours, Reference reference, float lo, float hi, float min_reference = 0.0f) {
  Worst worst;
  const int64_t a = ordered(lo), b = ordered(hi), step = (b - a) / 400000 + 1;
  for (int64_t k = a; k <= b; k += step) {
    const float x = from_ordered(k);
    const float expected = float(reference(double(x)));
    if (std::fabs(expected) < min_reference) continue;
    const int64_t ulps = std::llabs(ordered(ours(x)) - ordered(expected));
    if (ulps > worst.ulps) worst = {ulps, x, worst.points};
    worst.points++;
  }
  return worst;
}

}  // namespace

TEST_CASE("math: exp expm1 tanh erf and erfc are within 3 ulp of glibc over wide ranges") {
  constexpr int64_t kMaxUlps = 3;
  const Worst exp = sweep([](float x) { return math::exp(x); }, [](double x) { return std::exp(x); }, -110.0f, 95.0f);
  const Worst expm1 =
      sweep([](float x) { return math::expm1(x); }, [](double x) { return std::expm1(x); }, -30.0f, 95.0f);
  const Worst tanh = sweep([](float x) { return math::tanh(x); }, [](double x) { return std::tanh(x); }, -30.0f, 30.0f);
  const Worst erf = sweep([](float x) { return math::erf(x); }, [](double x) { return std::erf(x); }, -15.0f, 15.0f);
  // erfc down to the smallest normal float (x ~ 9.2); below it the result is subnormal and the
  // relative accuracy of any float is gone anyway.
  const Worst erfc = sweep([](float x) { return math::erfc(x); }, [](double x) { return std::erfc(x); }, -15.0f, 15.0f,
                           std::numeric_limits<float>::min());
  for (auto [name, worst] : {std::pair{"exp", exp}, std::pair{"expm1", expm1}, std::pair{"tanh", tanh},
                             std::pair{"erf", erf}, std::pair{"erfc", erfc}}) {
    INFO(name << ": worst " << worst.ulps << " ulp at x = " << worst.at);
    CHECK(worst.ulps <= kMaxUlps);
  }
  // Each sweep must have looked at a lot of points, not an empty range.
  CHECK(exp.points > 100000);
  CHECK(erfc.points > 100000);
}

TEST_CASE("math: special values and overflow and underflow and subnormals") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  CHECK(math::exp(0.0f) == 1.0f);
  CHECK(math::exp(inf) == inf);
  CHECK(math::exp(-inf) == 0.0f);
  CHECK(math::exp(89.0f) == inf);                        // above log(FLT_MAX) ~ 88.72
  CHECK(math::exp(-104.0f) == 0.0f);                     // below half the smallest subnormal
  CHECK(math::exp(-103.0f) == float(std::exp(-103.0)));  // subnormal result, rounded once
  CHECK(std::isnan(math::exp(nan)));
  CHECK(math::expm1(tiny) == tiny);
  CHECK(math::expm1(-inf) == -1.0f);
  CHECK(std::isnan(math::expm1(nan)));
  CHECK(math::tanh(inf) == 1.0f);
  CHECK(math::tanh(-inf) == -1.0f);
  CHECK(math::tanh(tiny) == tiny);
  CHECK(std::signbit(math::tanh(-0.0f)));
  CHECK(std::isnan(math::tanh(nan)));
  CHECK(math::erfc(-inf) == 2.0f);
  CHECK(math::erfc(inf) == 0.0f);
  CHECK(math::erfc(0.0f) == 1.0f);
  CHECK(std::isnan(math::erfc(nan)));
  CHECK(math::erf(inf) == 1.0f);
  CHECK(math::erf(-inf) == -1.0f);
  CHECK(math::erf(-tiny) == -tiny);
  CHECK(std::isnan(math::erf(nan)));
}
