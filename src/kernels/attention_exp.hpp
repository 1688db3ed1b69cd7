#pragma once
// math::exp on a whole vector, for attention's exponentials exp((s - max) * scale): the same bits as
// math::exp (include/normlab/kernels/math.hpp) for every x <= 0 and every NaN, the only arguments
// attention has (s <= max; inf - inf and NaN scores give NaN), in fewer instructions.
//
// math::exp ends with m * 2^n, here n in [-150, 0], as two products (m 2^n1) 2^(n - n1): the first
// is exact, the second rounds once, so the result is m 2^n correctly rounded (a subnormal where it
// lies there). These give that same number more cheaply:
//   avx512  vscalefps(m, n): m 2^n with one rounding;
//   avx2    n added to m's exponent bits, exact whenever the result is a normal float (n >= -125,
//           as m >= 0.7); a vector with a lane below that (exponentials under 2^-125, deep in a
//           row's tail) takes math::exp's two products for all its lanes.
// n = x / ln2 rounded to nearest is one rounding instruction instead of math::exp's add and
// subtract of 1.5 * 2^23 (the same integer; only the sign of a zero n can differ, and it changes
// neither r's value nor 2^n). Every other step is math::exp's own, operation for operation (no
// fused multiply-add: the build sets -ffp-contract=off); the clamp at -104 is a max instruction
// whose operand order gives math::exp's select exactly (x > c ? x : c, a NaN becoming c), and the
// clamp at 89 has nothing to do for x <= 0. The generic path calls math::exp itself. Checked bit
// for bit against math::exp by tests/test_attention_exp.cpp on each vector path: every 61st float
// with the sign bit set, every NaN and the edges in the suite; all 2^31 negative floats in its
// skipped case (--no-skip); and by the cross-path bit-identity tests.
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

#if defined(__AVX512F__)
inline __m512 exp16_nonpositive(__m512 x) {
  // (the all-lanes maskz forms: GCC 12 warns about the plain intrinsics' undefined passthrough)
  const __mmask16 all = 0xFFFF;
  const __m512 xc = _mm512_maskz_max_ps(all, x, _mm512_set1_ps(-104.0f));
  // reduce_ln2: x = n ln2 + r
  const __m512 n = _mm512_maskz_roundscale_ps(all, _mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f))),
                                 _mm512_mul_ps(n, _mm512_set1_ps(1.42860682030941723e-6f)));
  // expm1_small(r), Horner in float
  __m512 q = _mm512_set1_ps(1.0f / 5040.0f);
  q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f / 720.0f));
  q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f / 120.0f));
  q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f / 24.0f));
  q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.0f / 6.0f));
  q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(0.5f));
  const __m512 m = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(r, _mm512_mul_ps(_mm512_mul_ps(r, r), q)));
  const __m512 e = _mm512_maskz_scalef_ps(all, m, n);
  // select_nan: a NaN input is returned as it is
  return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
#endif

#if defined(__AVX2__)
// math::exp's reduction and polynomial on 8 lanes: n = round(x / ln 2) and m = e^(x - n ln 2), so
// that e^x = m 2^n; x at least -104 (the callers clamp or know it).
inline __m256 exp8_mantissa(__m256 xc, __m256& n) {
  n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(0.693145751953125f))),
                                 _mm256_mul_ps(n, _mm256_set1_ps(1.42860682030941723e-6f)));
  __m256 q = _mm256_set1_ps(1.0f / 5040.0f);
  q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f / 720.0f));
  q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f / 120.0f));
  q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f / 24.0f));
  q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(1.0f / 6.0f));
  q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(0.5f));
  const __m256 m = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(r, _mm256_mul_ps(_mm256_mul_ps(r, r), q)));
  return m;
}

inline __m256 exp8_nonpositive(__m256 x) {
  const __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(-104.0f));
  __m256 n;
  const __m256 m = exp8_mantissa(xc, n);
  const __m256i ni = _mm256_cvttps_epi32(n);
  __m256 e = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(m), _mm256_slli_epi32(ni, 23)));
  // n below -125: (m 2^n1) 2^(n - n1), n1 = n / 2 rounded toward zero, as math::exp
  const __m256i outside = _mm256_cmpgt_epi32(_mm256_set1_epi32(-125), ni);
  if (!_mm256_testz_si256(outside, outside)) {
    const __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, n1), bias), 23));
    e = _mm256_blendv_ps(e, _mm256_mul_ps(_mm256_mul_ps(m, p1), p2), _mm256_castsi256_ps(outside));
  }
  return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// exp8_nonpositive for arguments in [-86, 0] and quiet NaNs only (a softmax row whose smallest
// argument is at least -86; arithmetic gives only quiet NaNs): there the clamp at -104 changes
// nothing, n >= -125 so the exponent add is exact, and a quiet NaN comes out as itself (each
// operation returns its first NaN operand, the conversion of a NaN n gives INT_MIN, whose shift
// by 23 adds 0 to m's bits), so the clamp, the range check and the NaN blend go: 27 instructions
// for 8 lanes instead of 33, the same bits.
inline __m256 exp8_in_range(__m256 x) {
  __m256 n;
  const __m256 m = exp8_mantissa(x, n);
  const __m256i ni = _mm256_cvttps_epi32(n);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(m), _mm256_slli_epi32(ni, 23)));
}
#endif

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
