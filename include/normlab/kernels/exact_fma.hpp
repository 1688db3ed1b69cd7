#pragma once
// A float fused multiply-add, fma(a, b, c) = a * b + c rounded once, from double arithmetic: what
// the generic kernel path uses so that it computes the bits of the avx2/avx512 paths' vfmadd
// without FMA instructions (and without glibc's fmaf, a library call per multiply-add).
//
// Why double works: a * b of two floats has at most 48 significant bits, so p = double(a) *
// double(b) is exact. The sum p + c is not, and rounding it to double and then to float can round
// twice the wrong way. Two ways around that:
//
//   fma_exact (any input): the sum rounded to odd (Boldo & Melquiond, "Emulation of FMA and
//   correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 2008): the double
//   nearest the exact sum, moved one unit to the odd neighbour when it is even and inexact. A
//   precision of 53 >= 24 + 2 bits then makes the second rounding, to float, the correct one.
//   The error of the sum comes from TwoSum (Knuth), six additions.
//
//   sse2::fma_row (the kernels' common case, four lanes at a time): s = p + c rounded to nearest,
//   then to float. This is wrong only if s is exactly halfway between two floats while p + c is
//   not (the first rounding made a tie). The float midpoints of a normal-range s are the doubles
//   whose low 29 mantissa bits are 1000...0, so fma_row tests for such s and redoes that step
//   with fma_exact. Below the float normal range a midpoint has a different pattern; there the sum
//   is exact as long as no operand is "tiny" (0 < |x| < 2^-50): both are then multiples of 2^-73,
//   p of 2^-146 and c of 2^-149, so any p + c below 2^-126 has at most 23 significant bits and
//   both roundings are exact. The kernels check their operands with has_tiny and use fma_exact
//   when it says so.
//
// tests/test_exact_fma.cpp compares both with std::fma (hardware FMA here) bit for bit.
#include <bit>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace normlab::math {

// fma(a, b, c) with one rounding, for any float input (NaN payloads aside: a NaN result is a
// quiet NaN, as from vfmadd, though not necessarily with the same payload).
inline float fma_exact(float a, float b, float c) {
  const double p = double(a) * double(b);  // exact: 24 + 24 bits
  const double dc = double(c);
  const double s = p + dc;
  // TwoSum: s + e == p + c exactly (when s is finite).
  const double pp = s - dc;
  const double cc = s - pp;
  const double e = (p - pp) + (dc - cc);
  uint64_t bits = std::bit_cast<uint64_t>(s);
  const bool finite = (bits & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
  // Round to odd: an inexact s with an even last bit becomes its neighbour toward p + c, which is
  // odd. s != 0 here (a rounded sum is 0 only when the exact sum is), so the neighbour away from
  // zero is bits + 1 and toward zero bits - 1, across binades too.
  if (finite && e != 0.0 && (bits & 1) == 0) bits += ((e > 0.0) == (s > 0.0)) ? 1 : uint64_t(-1);
  return float(std::bit_cast<double>(bits));
}

// Whether some x[i] is tiny: 0 < |x[i]| < 2^-50 (subnormals included; zeros, NaN and inf are not).
// A kernel whose operands have none may use sse2::fma_row.
inline bool has_tiny(const float* x, int64_t n) {
  uint32_t found = 0;
  for (int64_t i = 0; i < n; i++) {
    const uint32_t m = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    found |= uint32_t(m - 1u < 0x26800000u - 1u);  // 0x26800000 = 2^-50
  }
  return found != 0;
}
// The same over rows: rows of n floats, `stride` apart.
inline bool has_tiny(const float* x, int64_t rows, int64_t n, int64_t stride) {
  for (int64_t r = 0; r < rows; r++)
    if (has_tiny(x + r * stride, n)) return true;
  return false;
}

#if defined(__SSE2__)
namespace sse2 {

// Two doubles that hold floats, stored as floats (exact).
inline void store2(float* p, __m128d x) { _mm_store_sd(reinterpret_cast<double*>(p), _mm_castps_pd(_mm_cvtpd_ps(x))); }
inline __m128d broadcast(float a) { return _mm_set1_pd(double(a)); }

// fma(a, b, c) in two lanes, each a float held as a double, with fma_exact: the slow step of
// fma_row below, out of line so that its calls and spills stay off the kernels' loops.
[[gnu::noinline, gnu::cold]] inline __m128d fma2_exact(__m128d a, __m128d b, __m128d c) {
  alignas(16) double x[2], y[2], z[2];
  _mm_store_pd(x, a);
  _mm_store_pd(y, b);
  _mm_store_pd(z, c);
  return _mm_set_pd(double(fma_exact(float(x[1]), float(y[1]), float(z[1]))),
                    double(fma_exact(float(x[0]), float(y[0]), float(z[0]))));
}

// One step of a row of four chains, each a float held as a double: c0 = fma(a, b0, c0) and
// c1 = fma(a, b1, c1), std::fma's bits whenever no operand is tiny (has_tiny).
// The sums are rounded to double and then to float; that is wrong only when a sum lands on a
// float midpoint (see above): the four sums' low 32 bits are tested together, in one register
// (the low 29 mantissa bits 1 followed by 28 zeros), and such a step, rare, is redone for its four
// lanes with fma_exact. A midpoint that the double sum reached exactly (a float plus a product
// with few significant bits, e.g. attention's exponential 1 of a row's largest score times V)
// is redone too: it costs the slow step, not a wrong result. The test is a branch, not a flag
// or-ed over the chain: the compare's result goes to a general register, off the vector pipes
// that the conversions and additions fill (a 4 x 4 step on doubles: 12.6 cycles with the branch,
// 12.3 with no test, 18.6 with the flag), and no chain is ever run twice.
inline void fma_row(__m128d a, __m128d b0, __m128d b1, __m128d& c0, __m128d& c1) {
  const __m128d s0 = _mm_add_pd(_mm_mul_pd(a, b0), c0);
  const __m128d s1 = _mm_add_pd(_mm_mul_pd(a, b1), c1);
  const __m128i low = _mm_castps_si128(_mm_shuffle_ps(_mm_castpd_ps(s0), _mm_castpd_ps(s1), 0x88));
  const __m128i midpoint = _mm_cmpeq_epi32(_mm_and_si128(low, _mm_set1_epi32(0x1fffffff)), _mm_set1_epi32(0x10000000));
  if (__builtin_expect(_mm_movemask_epi8(midpoint) != 0, 0)) {
    c0 = fma2_exact(a, b0, c0);
    c1 = fma2_exact(a, b1, c1);
    return;
  }
  c0 = _mm_cvtps_pd(_mm_cvtpd_ps(s0));
  c1 = _mm_cvtps_pd(_mm_cvtpd_ps(s1));
}

}  // namespace sse2
#endif

}  // namespace normlab::math
