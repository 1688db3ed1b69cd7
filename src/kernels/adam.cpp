// Adam's element loop (kernels/adam.hpp), compiled once per kernel path so that it runs in the
// path's vector width: sqrt and division are exactly rounded in every width, and nothing is fused.
#include "normlab/kernels/adam.hpp"
#include "isa_kernels.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {
// m, v and p of one element, the gradient already decayed.
inline void moments_and_step(float& p, float& m, float& v, float grad, const AdamScalars& s) {
  m = m * s.beta1 + s.one_minus_beta1 * grad;
  v = v * s.beta2 + s.one_minus_beta2 * grad * grad;
  const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  p = p + s.neg_step_size * m / denom;
}

// The three forms of the update: AdamW's parameter scale, Adam's gradient decay, neither.
enum class Decay { param_scale, grad_decay, none };

Decay decay_of(const AdamScalars& s) {
  if (s.decoupled && s.param_scale != 1.0f) return Decay::param_scale;
  if (!s.decoupled && s.grad_decay != 0.0f) return Decay::grad_decay;
  return Decay::none;
}

// One loop per form, so that each one vectorizes without a test inside.
template <Decay kDecay>
inline void adam_range(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g,
                       int64_t N, const AdamScalars& c) {
#pragma omp simd  // p, m, v, g do not overlap (the restrict is lost where this is inlined into a loop)
  for (int64_t i = 0; i < N; i++) {
    if constexpr (kDecay == Decay::param_scale) {
      p[i] = p[i] * c.param_scale;
      moments_and_step(p[i], m[i], v[i], g[i], c);
    } else if constexpr (kDecay == Decay::grad_decay) {
      moments_and_step(p[i], m[i], v[i], g[i] + c.grad_decay * p[i], c);
    } else {
      moments_and_step(p[i], m[i], v[i], g[i], c);
    }
  }
}
}  // namespace

void adam_update(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t N,
                 const AdamScalars& s) {
  const AdamScalars c = s;  // a local copy: the compiler need not reload it after each store
  switch (decay_of(c)) {
    case Decay::param_scale: return adam_range<Decay::param_scale>(p, m, v, g, N, c);
    case Decay::grad_decay: return adam_range<Decay::grad_decay>(p, m, v, g, N, c);
    case Decay::none: break;
  }
  adam_range<Decay::none>(p, m, v, g, N, c);
}

namespace {
constexpr int kNormLanes = 8;

// Lanes l, l + 8, ... of `lines` whole lines of 8 of kSlots tensors side by side (line[s] is slot
// s's next line): each tensor's lanes are one chain of additions, and kSlots chains overlap in the
// core. The lanes are held in locals for the loop.
template <int kSlots>
void add_squares(double (*lanes)[kNormLanes], const float* const* line, int64_t lines) {
  double acc[kSlots][kNormLanes];
  for (int s = 0; s < kSlots; s++)
    for (int l = 0; l < kNormLanes; l++) acc[s][l] = lanes[s][l];
  for (int64_t b = 0; b < lines; b++) {
    for (int s = 0; s < kSlots; s++) {
      const float* x = line[s] + b * kNormLanes;
#pragma omp simd
      for (int l = 0; l < kNormLanes; l++) acc[s][l] += double(x[l]) * double(x[l]);
    }
  }
  for (int s = 0; s < kSlots; s++)
    for (int l = 0; l < kNormLanes; l++) lanes[s][l] = acc[s][l];
}

template <int kMaxSlots>
void add_squares_of(int slots, double (*lanes)[kNormLanes], const float* const* line, int64_t lines) {
  if constexpr (kMaxSlots >= 1) {
    if (slots == kMaxSlots) return add_squares<kMaxSlots>(lanes, line, lines);
    add_squares_of<kMaxSlots - 1>(slots, lanes, line, lines);
  }
}

// The last numel % 8 elements into lanes 0.., then the pairwise fold.
double finish_lanes(double* lanes, const float* g, int64_t numel) {
  for (int64_t i = numel / kNormLanes * kNormLanes; i < numel; i++) lanes[i % kNormLanes] += double(g[i]) * double(g[i]);
  for (int width = kNormLanes / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
  return lanes[0];
}
}  // namespace

// Up to kSlots tensors' chains at once (8 on avx512, whose 32 registers hold 8 tensors' lanes; 4 on
// avx2; 2 on the generic path's 16 SSE registers), each slot refilled with the next tensor as soon
// as its tensor ends, so that the core always has kSlots chains to overlap however the sizes
// differ. Only the interleaving differs from one tensor at a time; every lane gets the same
// additions in the same order.
void sums_of_squares(double* sums, const float* const* g, const int64_t* numel, int64_t count) {
#if defined(__AVX512F__)
  constexpr int kSlots = 8;
#elif defined(__AVX2__)
  constexpr int kSlots = 4;
#else
  constexpr int kSlots = 2;
#endif
  double lanes[kSlots][kNormLanes];
  const float* line[kSlots];  // each slot's next line
  int64_t lines_left[kSlots], tensor[kSlots];
  int active = 0;
  int64_t next = 0;
  while (true) {
    // Fill the free slots; tensors of fewer than 8 elements are finished on the spot.
    while (active < kSlots && next < count) {
      const int64_t t = next++;
      double* l = lanes[active];
      std::fill(l, l + kNormLanes, 0.0);
      if (numel[t] < kNormLanes) {
        sums[t] = numel[t] > 0 ? finish_lanes(l, g[t], numel[t]) : 0.0;
        continue;
      }
      line[active] = g[t];
      lines_left[active] = numel[t] / kNormLanes;
      tensor[active] = t;
      active++;
    }
    if (active == 0) break;
    int64_t lines = lines_left[0];
    for (int s = 1; s < active; s++) lines = std::min(lines, lines_left[s]);
    add_squares_of<kSlots>(active, lanes, line, lines);
    // Finish the tensors that ended; the last active slot (not yet advanced) moves into a finished
    // one's place and is advanced there.
    for (int s = 0; s < active;) {
      line[s] += lines * kNormLanes;
      lines_left[s] -= lines;
      if (lines_left[s] > 0) {
        s++;
        continue;
      }
      const int64_t t = tensor[s];
      sums[t] = finish_lanes(lanes[s], g[t], numel[t]);
      active--;
      if (s != active) {
        std::copy(lanes[active], lanes[active] + kNormLanes, lanes[s]);
        line[s] = line[active];
        lines_left[s] = lines_left[active];
        tensor[s] = tensor[active];
      }
    }
  }
}

namespace {
#if defined(__AVX2__)
// One vector of the update with the scalars broadcast: the operations of moments_and_step, in its
// order, none fused.
template <class Ops>
struct AdamVector {
  using V = typename Ops::V;
  V param_scale, grad_decay, beta1, beta2, one_minus_beta1, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
  explicit AdamVector(const AdamScalars& c)
      : param_scale(Ops::set1(c.param_scale)), grad_decay(Ops::set1(c.grad_decay)), beta1(Ops::set1(c.beta1)),
        beta2(Ops::set1(c.beta2)), one_minus_beta1(Ops::set1(c.one_minus_beta1)),
        one_minus_beta2(Ops::set1(c.one_minus_beta2)), bias_correction2_sqrt(Ops::set1(c.bias_correction2_sqrt)),
        eps(Ops::set1(c.eps)), neg_step_size(Ops::set1(c.neg_step_size)) {}
  // The update of elements [i, i + Ops::kWidth); returns their gradient (undecayed) for the squares.
  template <Decay kDecay>
  V step(float* p, float* m, float* v, const float* g, int64_t i) const {
    const V grad_in = Ops::load(g + i);
    V param = Ops::load(p + i), grad = grad_in;
    if constexpr (kDecay == Decay::param_scale) param = Ops::mul(param, param_scale);
    if constexpr (kDecay == Decay::grad_decay) grad = Ops::add(grad, Ops::mul(grad_decay, param));
    const V m1 = Ops::add(Ops::mul(Ops::load(m + i), beta1), Ops::mul(one_minus_beta1, grad));
    const V v1 = Ops::add(Ops::mul(Ops::load(v + i), beta2), Ops::mul(Ops::mul(one_minus_beta2, grad), grad));
    Ops::store(m + i, m1);
    Ops::store(v + i, v1);
    const V denom = Ops::add(Ops::div(Ops::sqrt(v1), bias_correction2_sqrt), eps);
    Ops::store(p + i, Ops::add(param, Ops::div(Ops::mul(neg_step_size, m1), denom)));
    return grad_in;
  }
};
#endif

#if defined(__AVX512F__)
struct Ops512 {
  using V = __m512;
  static constexpr int64_t kWidth = 16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* x) { return _mm512_loadu_ps(x); }
  static void store(float* x, V y) { _mm512_storeu_ps(x, y); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V sqrt(V a) { return _mm512_sqrt_ps(a); }
};
#elif defined(__AVX2__)
struct Ops256 {
  using V = __m256;
  static constexpr int64_t kWidth = 8;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* x) { return _mm256_loadu_ps(x); }
  static void store(float* x, V y) { _mm256_storeu_ps(x, y); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V sqrt(V a) { return _mm256_sqrt_ps(a); }
};
#endif

// The update vector by vector, each vector's squares added to the 8 lanes right after (lane l
// takes elements l, l + 8, ... in order). The lanes are a chain of additions, one per 8 elements:
// shorter than a vector's divisions and square root, so it runs beside them, and the gradient
// norm costs almost nothing on top of the update. (Written with intrinsics: GCC's vectorized loop
// of the same update and sums was a third slower.)
template <Decay kDecay>
double adam_and_squares(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t N,
                        const AdamScalars& c) {
  double acc[kNormLanes] = {};
  int64_t i = 0;
#if defined(__AVX512F__)
  const AdamVector<Ops512> adam(c);
  __m512d lanes = _mm512_setzero_pd();  // lanes 0..7
  for (; i + 16 <= N; i += 16) {
    const __m512 grad = adam.step<kDecay>(p, m, v, g, i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(grad));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(grad), 1)));
    lanes = _mm512_add_pd(lanes, _mm512_mul_pd(lo, lo));
    lanes = _mm512_add_pd(lanes, _mm512_mul_pd(hi, hi));
  }
  _mm512_storeu_pd(acc, lanes);
#elif defined(__AVX2__)
  const AdamVector<Ops256> adam(c);
  __m256d lanes_lo = _mm256_setzero_pd(), lanes_hi = _mm256_setzero_pd();  // lanes 0..3, 4..7
  for (; i + 8 <= N; i += 8) {
    const __m256 grad = adam.step<kDecay>(p, m, v, g, i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(grad));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(grad, 1));
    lanes_lo = _mm256_add_pd(lanes_lo, _mm256_mul_pd(lo, lo));
    lanes_hi = _mm256_add_pd(lanes_hi, _mm256_mul_pd(hi, hi));
  }
  _mm256_storeu_pd(acc, lanes_lo);
  _mm256_storeu_pd(acc + 4, lanes_hi);
#else
  for (; i + 2 * kNormLanes <= N; i += 2 * kNormLanes) {
    adam_range<kDecay>(p + i, m + i, v + i, g + i, 2 * kNormLanes, c);
    for (int64_t line = i; line < i + 2 * kNormLanes; line += kNormLanes) {
#pragma omp simd
      for (int l = 0; l < kNormLanes; l++) acc[l] += double(g[line + l]) * double(g[line + l]);
    }
  }
#endif
  // The rest (fewer than one vector): the update element by element, a last whole line of 8 into
  // the lanes, and finish_lanes the elements after it.
  adam_range<kDecay>(p + i, m + i, v + i, g + i, N - i, c);
  for (; i + kNormLanes <= N; i += kNormLanes)
    for (int l = 0; l < kNormLanes; l++) acc[l] += double(g[i + l]) * double(g[i + l]);
  return finish_lanes(acc, g, N);
}
}  // namespace

double adam_update_sum_squares(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s) {
  const AdamScalars c = s;
  switch (decay_of(c)) {
    case Decay::param_scale: return adam_and_squares<Decay::param_scale>(p, m, v, g, N, c);
    case Decay::grad_decay: return adam_and_squares<Decay::grad_decay>(p, m, v, g, N, c);
    case Decay::none: break;
  }
  return adam_and_squares<Decay::none>(p, m, v, g, N, c);
}

// The largest |x| as bits (the sign cleared): infinity is 0x7f800000, NaNs are above, every finite
// float below. No early exit, so the loop is a few vector operations a line, with four running
// maxima so that it is not one chain (on avx512 about twice the rate of one compare a line in L1).
// SSE2 has no unsigned 32-bit max: the generic path compares each exponent with all ones instead.
bool all_finite(const float* x, int64_t N) {
  constexpr uint32_t kInfinity = 0x7f800000u, kAbs = 0x7fffffffu;
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i abs_mask = _mm512_set1_epi32(int(kAbs));
  __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
  for (; i + 64 <= N; i += 64) {
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), abs_mask));
    m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), abs_mask));
    m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), abs_mask));
    m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), abs_mask));
  }
  uint32_t largest = _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3)));
#elif defined(__AVX2__)
  const __m256i abs_mask = _mm256_set1_epi32(int(kAbs));
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  const auto line = [&](int64_t at) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + at)), abs_mask);
  };
  for (; i + 32 <= N; i += 32) {
    m0 = _mm256_max_epu32(m0, line(i));
    m1 = _mm256_max_epu32(m1, line(i + 8));
    m2 = _mm256_max_epu32(m2, line(i + 16));
    m3 = _mm256_max_epu32(m3, line(i + 24));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3)));
  uint32_t largest = *std::max_element(lanes, lanes + 8);
#else
  uint32_t special = 0;  // an OR of "exponent all ones"
#pragma omp simd reduction(| : special)
  for (int64_t k = 0; k < N; k++) {
    uint32_t bits;
    std::memcpy(&bits, x + k, sizeof(bits));
    special |= (bits & kInfinity) == kInfinity ? 1u : 0u;
  }
  i = N;
  uint32_t largest = special != 0 ? kInfinity : 0u;
#endif
  for (; i < N; i++) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    largest = std::max(largest, bits & kAbs);
  }
  return largest < kInfinity;
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
