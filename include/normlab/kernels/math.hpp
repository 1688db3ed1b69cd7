#pragma once
// normlab's own exp, expm1, tanh, erf and erfc for float.
//
// Why not libm: glibc picks a different implementation of exp/tanh/erfc per CPU (and libmvec's
// vector versions round differently from the scalar ones), so a kernel calling them would give
// different bits on the generic, avx2 and avx512 paths. These use only IEEE +, -, *, /, exact
// conversions and exponent-bit manipulation, never a fused multiply-add (the build sets
// -ffp-contract=off), so every path and every x86-64 CPU computes the same bits. They are
// branch-free inline functions, so a loop calling them vectorizes.
//
// Accuracy against glibc (tests/test_math.cpp checks it over wide ranges): exp, expm1, tanh within
// 3 ulp; erfc within 3 ulp wherever the result is a normal float; erf within 3 ulp.
// NaN propagates; exp(+inf) = inf, exp(-inf) = 0, tanh(+-inf) = +-1, erfc(-inf) = 2.
#include <bit>
#include <cstdint>

namespace normlab::math {

namespace detail {

// exp(r) - 1 for |r| <= ~0.35 (ln 2 / 2): the Taylor series to r^7, Horner in float. The first
// omitted term, r^8 / 8!, is below 0.2 ulp of the result.
inline float expm1_small(float r) {
  float q = 1.0f / 5040.0f;
  q = q * r + 1.0f / 720.0f;
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  return r + (r * r) * q;
}

// 2^n for n in [-126, 127], built from its exponent bits.
inline float pow2(int32_t n) { return std::bit_cast<float>(uint32_t(n + 127) << 23); }
inline double pow2(int64_t n) { return std::bit_cast<double>(uint64_t(n + 1023) << 52); }

// x = n ln2 + r with |r| <= ~ln2/2: n is x / ln2 rounded to nearest (adding and subtracting
// 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer), r is x - n ln2 with ln2 split in
// two (Cody & Waite): n * kLn2Hi is exact for |n| < 512, so r keeps the precision of x.
struct Reduced {
  float n;
  float r;
};
inline Reduced reduce_ln2(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;       // 15 significant bits
  constexpr float kLn2Lo = 1.42860682030941723e-6f;  // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;              // 1.5 * 2^23
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  return {n, r};
}

// exp(x) for double x in [-745, 0], accurate to ~1e-13 relative (far beyond the float results
// it feeds). Taylor to r^10 after the same reduction as reduce_ln2, in double.
inline double exp_double_nonpositive(double x) {
  x = x > -745.0 ? x : -745.0;
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 0.6931471803691238;  // 33 significant bits: n * kLn2Hi exact
  constexpr double kLn2Lo = 1.9082149292705877e-10;
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52
  const double n = (x * kLog2e + kRound) - kRound;
  const double r = (x - n * kLn2Hi) - n * kLn2Lo;
  double q = 1.0 / 3628800.0;
  q = q * r + 1.0 / 362880.0;
  q = q * r + 1.0 / 40320.0;
  q = q * r + 1.0 / 5040.0;
  q = q * r + 1.0 / 720.0;
  q = q * r + 1.0 / 120.0;
  q = q * r + 1.0 / 24.0;
  q = q * r + 1.0 / 6.0;
  q = q * r + 0.5;
  const double m = 1.0 + (r + (r * r) * q);
  // 2^n in two factors: n goes down to -1075, below the smallest normal exponent.
  const int64_t k = int64_t(int32_t(n));
  const int64_t k1 = k / 2;
  return (m * pow2(k1)) * pow2(k - k1);
}

inline float select_nan(float x, float result) { return x == x ? result : x; }

}  // namespace detail

// e^x. Overflows to inf above ~88.72, underflows through the subnormals to 0 below ~-103.97.
inline float exp(float x) {
  float xc = x > -104.0f ? x : -104.0f;  // NaN becomes -104 here and is put back at the end
  xc = xc < 89.0f ? xc : 89.0f;
  const detail::Reduced red = detail::reduce_ln2(xc);
  const float m = 1.0f + detail::expm1_small(red.r);
  // 2^n in two factors (n is in [-150, 129]): m * 2^n1 is exact, the second product rounds once,
  // into the subnormals or to inf when the result is there.
  const int32_t n = int32_t(red.n);
  const int32_t n1 = n / 2;
  return detail::select_nan(x, (m * detail::pow2(n1)) * detail::pow2(n - n1));
}

namespace detail {
// e^x - 1 for x <= 88 (not NaN): expm1 without its overflow branch, which tanh never needs.
inline float expm1_up_to_88(float x) {
  float xc = x > -25.0f ? x : -25.0f;  // expm1(-25) rounds to -1
  xc = xc < 88.0f ? xc : 88.0f;
  const Reduced red = reduce_ln2(xc);
  const float p = expm1_small(red.r);
  // e^x - 1 = (2^n - 1) + 2^n p: 2^n - 1 is exact for n <= 24 and 2^n p is exact, so the one
  // rounding is the sum (for n = 0 the result is p itself).
  const float scale = pow2(int32_t(red.n));
  return (scale - 1.0f) + scale * p;
}
}  // namespace detail

// e^x - 1, accurate near 0 where exp(x) - 1 would cancel.
inline float expm1(float x) { return detail::select_nan(x, x > 88.0f ? exp(x) : detail::expm1_up_to_88(x)); }

// tanh(x) = sign(x) * e / (e + 2) with e = expm1(2|x|): no cancellation for small |x|, and e / (e + 2)
// rounds to 1 before |x| reaches 10.
inline float tanh(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = bits & 0x80000000u;
  float a = std::bit_cast<float>(bits & 0x7fffffffu);
  a = a < 10.0f ? a : 10.0f;  // NaN becomes 10 here and is put back at the end
  // 2a <= 20: expm1 without the overflow branch (branch-free code computes both sides of a
  // select, so expm1 itself would cost an exp more)
  const float e = detail::expm1_up_to_88(2.0f * a);
  const float t = e / (e + 2.0f);
  return detail::select_nan(x, std::bit_cast<float>(std::bit_cast<uint32_t>(t) | sign));
}

namespace detail {
// erfc(z) for z >= 0 (z = inf and NaN excluded), in double: the Chebyshev fit of Numerical Recipes
// (erfcc, fractional error < 1.2e-7),  erfc(z) = t exp(-z^2 + P(t)),  t = 1 / (1 + z/2).
// z^2 is exact in double (a float squared has <= 48 bits).
inline double erfc_nonnegative(double z) {
  z = z < 12.0 ? z : 12.0;  // erfc(12) is 0 in float
  const double t = 1.0 / (1.0 + 0.5 * z);
  double p = 0.17087277;
  p = p * t - 0.82215223;
  p = p * t + 1.48851587;
  p = p * t - 1.13520398;
  p = p * t + 0.27886807;
  p = p * t - 0.18628806;
  p = p * t + 0.09678418;
  p = p * t + 0.37409196;
  p = p * t + 1.00002368;
  p = p * t - 1.26551223;
  return t * exp_double_nonpositive(p - z * z);
}
inline float abs_bits(float x) { return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0x7fffffffu); }
}  // namespace detail

// erfc(x) = 1 - erf(x), with relative accuracy kept in the tail (erfc(9) = 4e-37);
// erfc(-z) = 2 - erfc(z).
inline float erfc(float x) {
  const float a = detail::abs_bits(x);
  const double tail = detail::erfc_nonnegative(double(a < 12.0f ? a : 12.0f));  // keeps inf, NaN out
  return detail::select_nan(x, float(x >= 0.0f ? tail : 2.0 - tail));
}

// erf(x): the Maclaurin series for |x| < 0.5 (where 1 - erfc would lose relative accuracy),
// 1 - erfc(|x|) beyond, in double; odd.
inline float erf(float x) {
  const uint32_t sign = std::bit_cast<uint32_t>(x) & 0x80000000u;
  const float a = detail::abs_bits(x);
  const double z = double(a < 0.5f ? a : 0.5f);
  const double z2 = z * z;
  // erf(z) = 2/sqrt(pi) * sum_n (-1)^n z^(2n+1) / (n! (2n+1)); at z = 0.5 the term n = 9 is
  // below 1e-13 of the sum.
  double s = -1.0 / (362880.0 * 19.0);
  s = s * z2 + 1.0 / (40320.0 * 17.0);
  s = s * z2 - 1.0 / (5040.0 * 15.0);
  s = s * z2 + 1.0 / (720.0 * 13.0);
  s = s * z2 - 1.0 / (120.0 * 11.0);
  s = s * z2 + 1.0 / (24.0 * 9.0);
  s = s * z2 - 1.0 / (6.0 * 7.0);
  s = s * z2 + 1.0 / (2.0 * 5.0);
  s = s * z2 - 1.0 / 3.0;
  s = s * z2 + 1.0;
  const double series = 1.1283791670955126 * z * s;  // 2 / sqrt(pi)
  const double tail = detail::erfc_nonnegative(double(a < 12.0f ? a : 12.0f));
  const float magnitude = float(a < 0.5f ? series : 1.0 - tail);
  return detail::select_nan(x, std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign));
}

}  // namespace normlab::math
