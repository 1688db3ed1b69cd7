#include "normlab/kernels/reference/cross_entropy.hpp"

#include <fmt/format.h>

#include <cmath>

#include "normlab/error.hpp"

namespace normlab::kernels::reference {

float cross_entropy_forward(float* losses, float* probs,                  // (N), (N,V)
                            const float* logits, const int32_t* targets,  // (N,V), (N)
                            int64_t N, int64_t V) {
  double total = 0.0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; n++) {
    const float* z = logits + n * V;  // (V)
    const int32_t t = targets[n];
    if (t != -1 && (t < 0 || t >= V))
      throw UsageError(fmt::format("cross_entropy: target {} out of range [0, {})", t, V));
    // logsumexp(z) = max + log(sum(exp(z - max))): no overflow for large logits
    double maxval = -INFINITY;
    for (int64_t v = 0; v < V; v++) maxval = std::fmax(maxval, z[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < V; v++) sum += std::exp(z[v] - maxval);
    // probs = softmax(z), kept for the backward
    for (int64_t v = 0; v < V; v++) probs[n * V + v] = float(std::exp(z[v] - maxval) / sum);
    // loss = logsumexp(z) - z[target]; ignored rows contribute nothing
    losses[n] = t == -1 ? 0.0f : float(maxval + std::log(sum) - z[t]);
    if (t == -1) continue;
    total += losses[n];
    count++;
  }
  return count == 0 ? 0.0f : float(total / double(count));
}

void cross_entropy_backward(float* dlogits,                              // (N,V)
                            const float* probs, const int32_t* targets,  // (N,V), (N)
                            int64_t N, int64_t V, float dloss) {
  int64_t count = 0;
  for (int64_t n = 0; n < N; n++) count += targets[n] != -1;
  if (count == 0) return;
  // the mean over count rows scales each row's gradient by 1 / count
  const double scale = double(dloss) / double(count);
  for (int64_t n = 0; n < N; n++) {
    if (targets[n] == -1) continue;
    // d loss / d z = softmax(z) - onehot(target)
    for (int64_t v = 0; v < V; v++)
      dlogits[n * V + v] += float(scale * (probs[n * V + v] - (v == targets[n] ? 1.0 : 0.0)));
  }
}

}  // namespace normlab::kernels::reference
