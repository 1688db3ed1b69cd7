// Adam's element loop (kernels/adam.hpp), compiled once per kernel path so that it runs in the
// path's vector width: sqrt and division are exactly rounded in every width, and nothing is fused.
#include "normlab/kernels/adam.hpp"
#include "isa_kernels.hpp"

#include <algorithm>
#include <cmath>
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
}  // namespace

// The three cases are three loops, so that each one vectorizes without a test inside.
void adam_update(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t N,
                 const AdamScalars& s) {
  const AdamScalars c = s;  // a local copy: the compiler need not reload it after each store
  if (c.decoupled && c.param_scale != 1.0f) {
    for (int64_t i = 0; i < N; i++) {
      p[i] = p[i] * c.param_scale;
      moments_and_step(p[i], m[i], v[i], g[i], c);
    }
  } else if (!c.decoupled && c.grad_decay != 0.0f) {
    for (int64_t i = 0; i < N; i++) moments_and_step(p[i], m[i], v[i], g[i] + c.grad_decay * p[i], c);
  } else {
    for (int64_t i = 0; i < N; i++) moments_and_step(p[i], m[i], v[i], g[i], c);
  }
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

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
