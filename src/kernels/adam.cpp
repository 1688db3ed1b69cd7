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

// Lanes l, l + 8, ... of g's whole lines of 8, from line `from` to line `to`, `kSlots` tensors side
// by side: each tensor's lanes are one chain of additions, and kSlots chains overlap in the core.
template <int kSlots>
void add_squares(double (*lanes)[kNormLanes], const float* const* g, int64_t from, int64_t to) {
  for (int64_t b = from; b < to; b++) {
    for (int s = 0; s < kSlots; s++) {
      const float* line = g[s] + b * kNormLanes;
#pragma omp simd
      for (int l = 0; l < kNormLanes; l++) lanes[s][l] += double(line[l]) * double(line[l]);
    }
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

// Tensors taken largest first, kSlots at a time (4; 2 on the generic path, whose 16 SSE registers
// hold 2 tensors' lanes with room to spare): the group's lines side by side while every tensor of
// it has lines left, then each tensor's remaining lines alone. Only the grouping differs from one
// tensor at a time; every lane gets the same additions in the same order.
void sums_of_squares(double* sums, const float* const* g, const int64_t* numel, int64_t count) {
#if defined(__AVX2__)
  constexpr int kSlots = 4;
#else
  constexpr int kSlots = 2;
#endif
  std::vector<int64_t> order(static_cast<size_t>(count));  // tensor indices, by numel, largest first
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return numel[a] > numel[b]; });
  int64_t k = 0;
  for (; k + kSlots <= count; k += kSlots) {
    double lanes[kSlots][kNormLanes] = {};
    const float* group[kSlots];
    int64_t lines = INT64_MAX;
    for (int s = 0; s < kSlots; s++) {
      group[s] = g[order[size_t(k + s)]];
      lines = std::min(lines, numel[order[size_t(k + s)]] / kNormLanes);
    }
    add_squares<kSlots>(lanes, group, 0, lines);
    for (int s = 0; s < kSlots; s++) {
      const int64_t t = order[size_t(k + s)];
      add_squares<1>(&lanes[s], &group[s], lines, numel[t] / kNormLanes);
      sums[t] = numel[t] > 0 ? finish_lanes(lanes[s], g[t], numel[t]) : 0.0;
    }
  }
  for (; k < count; k++) {
    const int64_t t = order[size_t(k)];
    double lanes[1][kNormLanes] = {};
    const float* one[1] = {g[t]};
    if (numel[t] > 0) add_squares<1>(lanes, one, 0, numel[t] / kNormLanes);
    sums[t] = numel[t] > 0 ? finish_lanes(lanes[0], g[t], numel[t]) : 0.0;
  }
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
