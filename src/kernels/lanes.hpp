#pragma once
// Row sums in fixed lanes, shared by the fast kernels (layer_norm, rms_norm, attention).
//
// A sum over a row keeps kLanes independent partial sums: lane l adds x[l], x[l + 16], x[l + 32],
// ... in index order. The compiler can hold the lanes in vector registers, so the loop vectorizes
// without -ffast-math, and the lanes are then combined pairwise in one fixed order. The rounding of
// a row therefore depends only on the row's values: not on its address, the vector width (16
// lanes = two AVX-512 or four AVX2 registers of doubles), the thread that ran it or the path.
//
// Compiled into each path's namespace (NORMLAB_KERNEL_ISA): the three builds of an inline function
// must not be merged by the linker.
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

inline constexpr int kLanes = 16;

// (lane l + lane l+8), then the halves again, down to one number. The lanes are only read: reducing
// them in place makes GCC keep half of them in memory inside the summing loops.
inline double sum_lanes(const double* lanes) {  // lanes: (kLanes)
  double pairs[kLanes / 2];
  for (int l = 0; l < kLanes / 2; l++) pairs[l] = lanes[l] + lanes[l + kLanes / 2];
  for (int width = kLanes / 4; width >= 1; width /= 2) {
    for (int l = 0; l < width; l++) pairs[l] += pairs[l + width];
  }
  return pairs[0];
}

// The same additions in the same order for float lanes; on AVX2 they run on registers:
// (lo 8 + hi 8), then (lo 4 + hi 4), (lo 2 + hi 2), (lo 1 + hi 1).
#if defined(__AVX2__)
inline float sum_halves(__m256 y) {  // y = the 8 sums lane l + lane l+8
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}
#endif
inline float sum_lanes(const float* lanes) {  // lanes: (kLanes)
#if defined(__AVX2__)
  return sum_halves(_mm256_add_ps(_mm256_loadu_ps(lanes), _mm256_loadu_ps(lanes + 8)));
#else
  float pairs[kLanes / 2];
  for (int l = 0; l < kLanes / 2; l++) pairs[l] = lanes[l] + lanes[l + kLanes / 2];
  for (int width = kLanes / 4; width >= 1; width /= 2) {
    for (int l = 0; l < width; l++) pairs[l] += pairs[l + width];
  }
  return pairs[0];
#endif
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
