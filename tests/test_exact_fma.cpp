// The generic path's software fused multiply-add (include/normlab/kernels/exact_fma.hpp) against
// std::fma, bit for bit: fma_exact on any input, and the kernels' four-lane step sse2::fma_row
// with its fallbacks (midpoint steps and tiny operands go to fma_exact), on random values and on the cases
// that break a naive double emulation: sums rounded to a float midpoint, subnormals, overflow,
// signed zeros, NaN and inf, cancellation.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <limits>
#include <vector>

#include "normlab/kernels/exact_fma.hpp"
#include "normlab/rng.hpp"

using normlab::Rng;
namespace math = normlab::math;

namespace {

struct Triple {
  float a, b, c;
};

std::string hex(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%a", double(x));
  return buf;
}

bool same_bits(float x, float y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
}

// fma_row's four lanes must each give their own result: cases where two lanes disagree.
int lane_disagreements = 0;

// What a kernel computes for one multiply-add: sse2::fma_row when neither operand is tiny, else
// fma_exact. The case runs in each of fma_row's four lanes in turn (zeros in the others, 0 * a +
// 0), and the four results must agree.
float kernel_fma(float a, float b, float c) {
#if defined(__SSE2__)
  if (!math::has_tiny(&a, 1) && !math::has_tiny(&b, 1)) {
    float r[4];
    for (int lane = 0; lane < 4; lane++) {
      alignas(16) double bs[4] = {0, 0, 0, 0}, cs[4] = {0, 0, 0, 0};
      bs[lane] = double(b);
      cs[lane] = double(c);
      __m128d c0 = _mm_load_pd(cs), c1 = _mm_load_pd(cs + 2);
      math::sse2::fma_row(_mm_set1_pd(double(a)), _mm_load_pd(bs), _mm_load_pd(bs + 2), c0, c1);
      _mm_store_pd(cs, c0);
      _mm_store_pd(cs + 2, c1);
      r[lane] = float(cs[lane]);
    }
    for (int lane = 1; lane < 4; lane++)
      if (!same_bits(r[lane], r[0])) lane_disagreements++;
    return r[0];
  }
#endif
  return math::fma_exact(a, b, c);
}

// The naive emulation, one rounding to double and one to float: wrong on the midpoint cases.
float naive_fma(float a, float b, float c) { return float(double(a) * double(b) + double(c)); }

float random_bits_float(Rng& rng) {
  uint32_t u = uint32_t(rng.next_u64());
  return std::bit_cast<float>(u);
}

// A float with a random sign and significand and an exponent in [lo, hi].
float random_float(Rng& rng, int lo, int hi) {
  const uint64_t r = rng.next_u64();
  const int e = lo + int(r % uint64_t(hi - lo + 1));
  const uint32_t mant = uint32_t(r >> 20) & 0x7fffffu;
  const float m = std::bit_cast<float>(0x3f800000u | mant);  // [1, 2)
  const float x = std::ldexp(m, e);
  return (r >> 63) != 0 ? -x : x;
}

// c + a * b where a * b is within a hair of half an ulp of c (or of an odd number of halves), so
// that p + c rounds to a float midpoint in double although it is not one.
Triple midpoint_case(Rng& rng) {
  const uint64_t r = rng.next_u64();
  float c = random_float(rng, -60, 60);
  if (r & 1) c = std::nextafter(c, 2 * c);  // odd and even last bits both
  const int ec = std::ilogb(c);
  const int i = 1 + int((r >> 8) % 64);  // (1 + i 2^-23)(1 - i 2^-23) = 1 - i^2 2^-46
  const float m1 = 1.0f + float(i) * 0x1p-23f;
  const float m2 = 1.0f - float(i) * 0x1p-23f;
  const int odd = 1 + 2 * int((r >> 16) % 3);  // 1, 3 or 5 half-ulps
  const int split = int((r >> 24) % 20) - 10;
  // a * b = odd * 2^(ec - 24) * (1 - i^2 2^-46), the sign either way
  float a = std::ldexp(m1 * float(odd), split);
  float b = std::ldexp(m2, ec - 24 - split);
  if ((r >> 32) & 1) a = -a;
  if ((r >> 33) & 1) {  // or a hair above: (1 + i 2^-23)^2 = 1 + 2i 2^-23 + ..., too far; swap signs
    b = std::ldexp(m1, ec - 24 - split);
    a = std::ldexp(m2 * float(odd), split);
    if ((r >> 32) & 1) a = -a;
  }
  return {a, b, c};
}

// The same below the float normal range: c a subnormal, a * b a hair off half its ulp (2^-150),
// which only operands below 2^-50 can make.
Triple subnormal_midpoint_case(Rng& rng) {
  const uint64_t r = rng.next_u64();
  const float c = std::ldexp(float(1 + 2 * int((r >> 40) % (1u << 22))), -149) * ((r & 1) ? -1.0f : 1.0f);
  const int i = 1 + int((r >> 8) % 64);
  const int split = int((r >> 16) % 40) - 20;
  const float m1 = 1.0f + float(i) * 0x1p-23f, m2 = 1.0f - float(i) * 0x1p-23f;
  // a * b = 2^-150 (1 - i^2 2^-46): a hair below half an ulp of c in magnitude, or, with the signs
  // of a * b and c opposite, a hair above half an ulp below |c|.
  float a = std::ldexp(m1, -75 + split);
  const float b = std::ldexp(m2, -75 - split);
  if ((r >> 25) & 1) a = -a;
  return {a, b, c};
}

void check(const Triple& t, int& mismatches_fast, int& mismatches_exact) {
  const float want = std::fma(t.a, t.b, t.c);
  const float exact = math::fma_exact(t.a, t.b, t.c);
  const float fast = kernel_fma(t.a, t.b, t.c);
  if (!same_bits(exact, want)) {
    if (mismatches_exact++ < 5)
      FAIL_CHECK("fma_exact(" << hex(t.a) << ", " << hex(t.b) << ", " << hex(t.c) << ") = " << hex(exact)
                              << ", std::fma " << hex(want));
  }
  if (!same_bits(fast, want)) {
    if (mismatches_fast++ < 5)
      FAIL_CHECK("kernel fma(" << hex(t.a) << ", " << hex(t.b) << ", " << hex(t.c) << ") = " << hex(fast)
                               << ", std::fma " << hex(want));
  }
}

}  // namespace

TEST_CASE("exact fma: random values of every magnitude equal std::fma bit for bit") {
  Rng rng(26);
  int bad_fast = 0, bad_exact = 0;
  for (int n = 0; n < 400000; n++) {
    // all bit patterns (NaN, inf, subnormals included), then magnitudes a training run has
    check({random_bits_float(rng), random_bits_float(rng), random_bits_float(rng)}, bad_fast, bad_exact);
    check({random_float(rng, -20, 20), random_float(rng, -20, 20), random_float(rng, -40, 40)}, bad_fast, bad_exact);
  }
  CHECK(bad_fast == 0);
  CHECK(lane_disagreements == 0);
  CHECK(bad_exact == 0);
}

TEST_CASE("exact fma: sums that round to a float midpoint in double, where the naive emulation fails") {
  Rng rng(2008);
  int bad_fast = 0, bad_exact = 0, naive_wrong = 0;
  for (int n = 0; n < 200000; n++) {
    const Triple t = midpoint_case(rng);
    check(t, bad_fast, bad_exact);
    if (!same_bits(naive_fma(t.a, t.b, t.c), std::fma(t.a, t.b, t.c))) naive_wrong++;
  }
  CHECK(bad_fast == 0);
  CHECK(lane_disagreements == 0);
  CHECK(bad_exact == 0);
  // the cases are hard ones: one rounding to double then one to float gets many of them wrong
  CHECK(naive_wrong > 10000);
  naive_wrong = 0;
  for (int n = 0; n < 100000; n++) {
    const Triple t = subnormal_midpoint_case(rng);
    check(t, bad_fast, bad_exact);
    if (!same_bits(naive_fma(t.a, t.b, t.c), std::fma(t.a, t.b, t.c))) naive_wrong++;
  }
  CHECK(bad_fast == 0);
  CHECK(lane_disagreements == 0);
  CHECK(bad_exact == 0);
  CHECK(naive_wrong > 5000);  // what has_tiny is for: the midpoint test alone misses these
}

TEST_CASE("exact fma: subnormals and tiny products and overflow and cancellation") {
  Rng rng(7);
  int bad_fast = 0, bad_exact = 0;
  for (int n = 0; n < 200000; n++) {
    // products and sums in and around the subnormal range
    check({random_float(rng, -80, -40), random_float(rng, -100, -60), random_float(rng, -149, -120)}, bad_fast,
          bad_exact);
    check({random_float(rng, -149, -126), random_float(rng, -10, 10), random_float(rng, -149, -120)}, bad_fast,
          bad_exact);
    // near overflow: products past FLT_MAX, sums that bring them back
    check({random_float(rng, 60, 127), random_float(rng, 60, 70), random_float(rng, 120, 127)}, bad_fast, bad_exact);
    // cancellation: c = -(a * b rounded), so the result is the product's rounding error
    const float a = random_float(rng, -30, 30), b = random_float(rng, -30, 30);
    check({a, b, -(a * b)}, bad_fast, bad_exact);
    check({a, b, -std::nextafter(a * b, 0.0f)}, bad_fast, bad_exact);
  }
  CHECK(bad_fast == 0);
  CHECK(lane_disagreements == 0);
  CHECK(bad_exact == 0);
}

TEST_CASE("exact fma: signed zeros and NaN and inf and the extremes") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  const float mn = std::numeric_limits<float>::min();
  const std::vector<float> values = {0.0f,
                                     -0.0f,
                                     1.0f,
                                     -1.0f,
                                     0.5f,
                                     3.0f,
                                     inf,
                                     -inf,
                                     nan,
                                     big,
                                     -big,
                                     tiny,
                                     -tiny,
                                     mn,
                                     -mn,
                                     0x1p-50f,
                                     0x1.fffffep-51f,
                                     0x1p-75f,
                                     0x1p64f,
                                     0x1p-64f,
                                     1.0f + 0x1p-23f,
                                     1.0f - 0x1p-24f,
                                     0x1.8p-149f};
  int bad_fast = 0, bad_exact = 0;
  for (float a : values)
    for (float b : values)
      for (float c : values) check({a, b, c}, bad_fast, bad_exact);
  CHECK(bad_fast == 0);
  CHECK(lane_disagreements == 0);
  CHECK(bad_exact == 0);
  // the sign of an exact zero: +0 from x - x, -0 only from -0 + -0
  CHECK(std::signbit(math::fma_exact(1.0f, 1.0f, -1.0f)) == false);
  CHECK(std::signbit(math::fma_exact(-0.0f, 1.0f, -0.0f)) == true);
  CHECK(std::signbit(math::fma_exact(0.0f, -1.0f, 0.0f)) == false);
  CHECK(std::isinf(math::fma_exact(big, 2.0f, 0.0f)));
  CHECK(std::isnan(math::fma_exact(inf, 0.0f, 1.0f)));
  CHECK(std::isnan(math::fma_exact(inf, 1.0f, -inf)));
}

TEST_CASE("exact fma: has_tiny finds values below 2^-50 and only those") {
  const std::vector<float> clean = {0.0f,
                                    -0.0f,
                                    0x1p-50f,
                                    -0x1p-50f,
                                    1.0f,
                                    std::numeric_limits<float>::infinity(),
                                    std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::max()};
  CHECK_FALSE(math::has_tiny(clean.data(), int64_t(clean.size())));
  for (float t :
       {0x1.fffffep-51f, -0x1p-60f, std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::min()}) {
    std::vector<float> v = clean;
    v[3] = t;
    INFO(t);
    CHECK(math::has_tiny(v.data(), int64_t(v.size())));
    CHECK(math::has_tiny(v.data(), 2, 4, 4));        // rows of 4: the tiny value is in row 0
    CHECK_FALSE(math::has_tiny(v.data(), 2, 3, 4));  // rows of 3 skip index 3
  }
}
