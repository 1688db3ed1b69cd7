#include "normlab/kernels/cross_entropy.hpp"
#include "isa_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "normlab/error.hpp"
#include "normlab/kernels/math.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {
constexpr int32_t kIgnore = -1;

int64_t count_targets(const char* where, const int32_t* targets, int64_t N, int64_t V) {
  int64_t count = 0;
  for (int64_t n = 0; n < N; n++) {
    if (targets[n] == kIgnore) continue;
    if (targets[n] < 0 || targets[n] >= V) {
      throw UsageError(std::string(where) + ": target " + std::to_string(targets[n]) + " at row " + std::to_string(n) +
                       " is outside [0, " + std::to_string(V) + ") and not -1");
    }
    count++;
  }
  return count;
}
// Rows side by side in the forward: each row's max and its double sum are chains of V dependent
// steps (32 at the small models' vocabulary), and R rows' chains overlap in the core.
constexpr int kRowGroup = 4;

// The forward of rows n0 .. n0 + R: per row, the max, exp(z - max) into p (its own loop, so it
// vectorizes), the sum of p in double in index order, p scaled by 1 / sum, the loss. Every row gets
// the operations of one row alone, in the same order; only rows are interleaved.
template <int R>
void forward_rows(float* __restrict losses, float* __restrict probs,                 // (N), (N, V)
                  const float* __restrict logits, const int32_t* __restrict targets,  // (N, V), (N)
                  int64_t n0, int64_t V) {
  float maxval[R];
  double sum[R];
  for (int r = 0; r < R; r++) maxval[r] = -INFINITY;
  for (int64_t v = 0; v < V; v++)
    for (int r = 0; r < R; r++) maxval[r] = std::max(maxval[r], logits[(n0 + r) * V + v]);
  for (int r = 0; r < R; r++) {
    const float* z = logits + (n0 + r) * V;
    float* p = probs + (n0 + r) * V;
    const float m = maxval[r];
    for (int64_t v = 0; v < V; v++) p[v] = math::exp(z[v] - m);
  }
  // sum in double: log(sum) is the loss itself, not just a normalizer
  for (int r = 0; r < R; r++) sum[r] = 0.0;
  for (int64_t v = 0; v < V; v++)
    for (int r = 0; r < R; r++) sum[r] += double(probs[(n0 + r) * V + v]);
  for (int r = 0; r < R; r++) {
    const float* z = logits + (n0 + r) * V;
    float* p = probs + (n0 + r) * V;
    const float inv_sum = float(1.0 / sum[r]);
    for (int64_t v = 0; v < V; v++) p[v] *= inv_sum;
    const int32_t target = targets[n0 + r];
    // -log softmax(z)[t] = log sum_v exp(z_v - max) - (z_t - max)
    losses[n0 + r] = target == kIgnore ? 0.0f : float(std::log(sum[r]) - double(z[target] - maxval[r]));
  }
}
}  // namespace

float cross_entropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int64_t N,
                            int64_t V) {
  const int64_t count = count_targets("cross_entropy_forward", targets, N, V);
  parallel_for(N, N * V >= kMinParallelElements / 8, [&](int64_t begin, int64_t end) {
    int64_t n = begin;
    for (; n + kRowGroup <= end; n += kRowGroup) forward_rows<kRowGroup>(losses, probs, logits, targets, n, V);
    for (; n < end; n++) forward_rows<1>(losses, probs, logits, targets, n, V);
  });
  if (count == 0) return 0.0f;
  double total = 0.0;
  for (int64_t n = 0; n < N; n++) total += double(losses[n]);
  return float(total / double(count));
}

void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N, int64_t V,
                            float dloss) {
  const int64_t count = count_targets("cross_entropy_backward", targets, N, V);
  if (count == 0) return;
  const float scale = dloss / float(count);
  parallel_for(N, N * V >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n++) {
      const int32_t target = targets[n];
      if (target == kIgnore) continue;
      const float* p = probs + n * V;
      float* dz = dlogits + n * V;
      for (int64_t v = 0; v < V; v++) {
        const float indicator = v == target ? 1.0f : 0.0f;
        dz[v] += scale * (p[v] - indicator);
      }
    }
  });
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
