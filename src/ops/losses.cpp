// The losses: cross-entropy and z-loss over logits (N, V), rows with target -1 ignored.
#include "normlab/ops.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "common.hpp"
#include "normlab/autograd.hpp"
#include "normlab/kernels/cross_entropy.hpp"
#include "normlab/kernels/math.hpp"

namespace normlab::ops {

using namespace detail;  // the shared checks and gradient buffers (common.hpp)

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets) {
  require(logits.dim() == 2 && logits.size(0) == static_cast<int64_t>(targets.size()), [&] {
    return fmt::format("cross_entropy: logits {} and {} targets do not match", shape_str(logits.shape()),
                       targets.size());
  });
  const int64_t N = logits.size(0), V = logits.size(1);
  for (int32_t t : targets)
    require(t == -1 || (t >= 0 && t < V),
            [&] { return fmt::format("cross_entropy: target {} out of range [0, {})", t, V); });
  auto probs = std::make_shared<std::vector<float>>(static_cast<size_t>(N * V));
  std::vector<float> losses(static_cast<size_t>(N));
  auto saved_targets = std::make_shared<std::vector<int32_t>>(targets);
  const float loss =
      kernels::cross_entropy_forward(losses.data(), probs->data(), logits.data(), saved_targets->data(), N, V);
  Tensor out = Tensor::scalar(loss);
  if (!needs_grad({&logits})) return out;
  record(out, "cross_entropy", {logits}, [logits, probs, saved_targets, N, V](const float* g) {
    kernels::cross_entropy_backward(grad_ptr(logits), probs->data(), saved_targets->data(), N, V, g[0]);
  });
  return out;
}

Tensor z_loss(const Tensor& logits, const std::vector<int32_t>& targets) {
  require(logits.dim() == 2 && logits.size(0) == static_cast<int64_t>(targets.size()), [&] {
    return fmt::format("z_loss: logits {} and {} targets do not match", shape_str(logits.shape()), targets.size());
  });
  const int64_t N = logits.size(0), V = logits.size(1);
  // Per row: log Z as the cross-entropy kernel computes it (max + log of a double sum of our exp),
  // and softmax (N, V) for the backward. Plain loops: O(N V), a small part of a step.
  auto probs = std::make_shared<std::vector<float>>(static_cast<size_t>(N * V));
  auto log_z = std::make_shared<std::vector<double>>(static_cast<size_t>(N));
  const float* z = logits.data();
  int64_t count = 0;
  double sum_sq = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float* row = z + n * V;
    float* p = probs->data() + n * V;
    float maxval = -INFINITY;
    for (int64_t v = 0; v < V; ++v) maxval = std::max(maxval, row[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      p[v] = math::exp(row[v] - maxval);
      sum += p[v];
    }
    const float inv = float(1.0 / sum);
    for (int64_t v = 0; v < V; ++v) p[v] *= inv;
    (*log_z)[size_t(n)] = double(maxval) + std::log(sum);
    if (targets[size_t(n)] == -1) continue;
    ++count;
    sum_sq += (*log_z)[size_t(n)] * (*log_z)[size_t(n)];
  }
  Tensor out = Tensor::scalar(count ? float(sum_sq / double(count)) : 0.0f);
  if (!needs_grad({&logits}) || count == 0) return out;
  auto saved_targets = std::make_shared<std::vector<int32_t>>(targets);
  record(out, "z_loss", {logits}, [logits, probs, log_z, saved_targets, N, V, count](const float* g) {
    float* dz = grad_ptr(logits);
    for (int64_t n = 0; n < N; ++n) {
      if ((*saved_targets)[size_t(n)] == -1) continue;
      const float scale = float(2.0 * (*log_z)[size_t(n)] * double(g[0]) / double(count));
      const float* p = probs->data() + n * V;
      for (int64_t v = 0; v < V; ++v) dz[n * V + v] += scale * p[v];
    }
  });
  return out;
}

}  // namespace normlab::ops
