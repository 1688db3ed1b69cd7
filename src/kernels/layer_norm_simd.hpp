#pragma once
// The vector steps of src/kernels/layer_norm.cpp on AVX2 and AVX-512: the same operations on the
// same values in the same order as its portable loops (so the same bits), written with intrinsics
// for two reasons the compiler does not see:
//  - a line of 16 floats is converted to doubles straight from memory (`vcvtps2pd mem`), the
//    cheapest form of the conversion on Zen 5 (half the cost of converting a register);
//  - a subtraction that is not on a sum's chain is issued as a fused multiply-add a * 1 - b:
//    a * 1 is exact, so it rounds once, as a - b does, to the same bits (signed zeros, infinities
//    and NaN included). The float -> double conversions and the lane sums occupy the adder ports;
//    the multiply-add ports are otherwise idle, and moving the other subtractions there is what
//    lets a row's arithmetic keep up with memory.
// Compiled into each path's namespace (NORMLAB_KERNEL_ISA), used only where __AVX2__ is defined.
#if defined(__AVX2__)
#include <immintrin.h>

#include "lanes.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA::simd {

#if defined(__AVX512F__)
using VD = __m512d;  // 8 doubles
using VF = __m512;   // 16 floats
inline constexpr int kDoubles = 8;
inline constexpr int kFloats = 16;
inline VD vd_zero() { return _mm512_setzero_pd(); }
inline VD vd_set1(double v) { return _mm512_set1_pd(v); }
inline VD vd_add(VD a, VD b) { return _mm512_add_pd(a, b); }
inline VD vd_mul(VD a, VD b) { return _mm512_mul_pd(a, b); }
inline VD vd_sub_on_fma(VD a, VD b) { return _mm512_fmsub_pd(a, _mm512_set1_pd(1.0), b); }
inline VD vd_add_on_fma(VD a, VD b) { return _mm512_fmadd_pd(a, _mm512_set1_pd(1.0), b); }
// (The all-lanes maskz forms: GCC 12 warns about the undefined passthrough of the plain
// conversions, extracts and casts.)
inline VD vd_from_floats(const float* p) { return _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(p)); }  // p: (8)
inline VD vd_load(const double* p) { return _mm512_loadu_pd(p); }
inline void vd_store(double* p, VD v) { _mm512_storeu_pd(p, v); }
inline VF vf_set1(float v) { return _mm512_set1_ps(v); }
inline VF vf_load(const float* p) { return _mm512_loadu_ps(p); }
inline void vf_store(float* p, VF v) { _mm512_storeu_ps(p, v); }
inline void vf_stream(float* p, VF v) { _mm512_stream_ps(p, v); }
inline VF vf_add(VF a, VF b) { return _mm512_add_ps(a, b); }
inline VF vf_sub(VF a, VF b) { return _mm512_sub_ps(a, b); }
inline VF vf_mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
inline VF vf_sub_on_fma(VF a, VF b) { return _mm512_fmsub_ps(a, _mm512_set1_ps(1.0f), b); }
inline VF vf_add_on_fma(VF a, VF b) { return _mm512_fmadd_ps(a, _mm512_set1_ps(1.0f), b); }
// The doubles of floats 0-7 and 8-15 of v.
inline VD vd_low(VF v) {
  return _mm512_maskz_cvtps_pd(0xFF, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 0)));
}
inline VD vd_high(VF v) {
  return _mm512_maskz_cvtps_pd(0xFF, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 1)));
}
// The 8 sums lane l + lane l+8 (sum_lanes' first step) as one 256-bit vector of each half.
inline __m256d vd_pairs_halves(const VD (&v)[2]) {
  const VD pairs = _mm512_add_pd(v[0], v[1]);
  return _mm256_add_pd(_mm512_maskz_extractf64x4_pd(0xF, pairs, 0), _mm512_maskz_extractf64x4_pd(0xF, pairs, 1));
}
#else
using VD = __m256d;  // 4 doubles
using VF = __m256;   // 8 floats
inline constexpr int kDoubles = 4;
inline constexpr int kFloats = 8;
inline VD vd_zero() { return _mm256_setzero_pd(); }
inline VD vd_set1(double v) { return _mm256_set1_pd(v); }
inline VD vd_add(VD a, VD b) { return _mm256_add_pd(a, b); }
inline VD vd_mul(VD a, VD b) { return _mm256_mul_pd(a, b); }
inline VD vd_sub_on_fma(VD a, VD b) { return _mm256_fmsub_pd(a, _mm256_set1_pd(1.0), b); }
inline VD vd_add_on_fma(VD a, VD b) { return _mm256_fmadd_pd(a, _mm256_set1_pd(1.0), b); }
inline VD vd_from_floats(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }  // p: (4)
inline VD vd_load(const double* p) { return _mm256_loadu_pd(p); }
inline void vd_store(double* p, VD v) { _mm256_storeu_pd(p, v); }
inline VF vf_set1(float v) { return _mm256_set1_ps(v); }
inline VF vf_load(const float* p) { return _mm256_loadu_ps(p); }
inline void vf_store(float* p, VF v) { _mm256_storeu_ps(p, v); }
inline void vf_stream(float* p, VF v) { _mm256_stream_ps(p, v); }
inline VF vf_add(VF a, VF b) { return _mm256_add_ps(a, b); }
inline VF vf_sub(VF a, VF b) { return _mm256_sub_ps(a, b); }
inline VF vf_mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
inline VF vf_sub_on_fma(VF a, VF b) { return _mm256_fmsub_ps(a, _mm256_set1_ps(1.0f), b); }
inline VF vf_add_on_fma(VF a, VF b) { return _mm256_fmadd_ps(a, _mm256_set1_ps(1.0f), b); }
inline VD vd_low(VF v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
inline VD vd_high(VF v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
// sum_lanes' first two steps: (lane l + lane l+8), then (pair l + pair l+4).
inline __m256d vd_pairs_halves(const VD (&v)[4]) {
  return _mm256_add_pd(_mm256_add_pd(v[0], v[2]), _mm256_add_pd(v[1], v[3]));
}
#endif

// Vectors per line of kLanes (16) elements.
inline constexpr int kLineDoubles = kLanes / kDoubles;  // 2 (AVX-512) or 4 (AVX2)
inline constexpr int kLineFloats = kLanes / kFloats;    // 1 or 2

// The 16 double lanes of lanes.hpp in registers: vector k holds lanes k * kDoubles ... .
struct Lanes {
  VD v[kLineDoubles];

  static Lanes zero() {
    Lanes out;
    for (int k = 0; k < kLineDoubles; k++) out.v[k] = vd_zero();
    return out;
  }
  // The doubles of the line x[0 .. 16).
  static Lanes load(const float* x) {
    Lanes out;
    for (int k = 0; k < kLineDoubles; k++) out.v[k] = vd_from_floats(x + k * kDoubles);
    return out;
  }
  // The doubles of the floats of a line held in registers.
  static Lanes of(const VF (&f)[kLineFloats]) {
    Lanes out;
    for (int k = 0; k < kLineFloats; k++) {
      out.v[2 * k] = vd_low(f[k]);
      out.v[2 * k + 1] = vd_high(f[k]);
    }
    return out;
  }
  // lane += term, lane by lane (on the adders: the chains of a sum want their short latency).
  void add(const Lanes& term) {
    for (int k = 0; k < kLineDoubles; k++) v[k] = vd_add(v[k], term.v[k]);
  }
  // The same additions on the multiply-add ports, for a caller with more chains than adders.
  void add_on_fma(const Lanes& term) {
    for (int k = 0; k < kLineDoubles; k++) v[k] = vd_add_on_fma(term.v[k], v[k]);
  }
  // lane += (x - center)^2, the deviation rounded once, then the square, then the sum.
  void add_squared_deviation(const Lanes& x, double center) {
    const VD c = vd_set1(center);
    for (int k = 0; k < kLineDoubles; k++) {
      const VD deviation = vd_sub_on_fma(x.v[k], c);
      v[k] = vd_add(v[k], vd_mul(deviation, deviation));
    }
  }
  // sum_lanes of lanes.hpp: the same pairwise combination, on registers (not through a stack
  // array: see attention.cpp on GCC 12's AddressSanitizer and stored vectors).
  double sum() const {
    const __m256d quads = vd_pairs_halves(v);  // pairs l + l+4, l < 4
    const __m128d twos = _mm_add_pd(_mm256_castpd256_pd128(quads), _mm256_extractf128_pd(quads, 1));
    return _mm_cvtsd_f64(_mm_add_sd(twos, _mm_unpackhi_pd(twos, twos)));
  }
};

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA::simd
#endif
