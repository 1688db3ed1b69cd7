#pragma once
// Softmax cross-entropy over the V classes of each of N rows, averaged over the rows whose target
// is not ignored (target -1, PyTorch's ignore_index): the classification loss of every task head.
#include <cstdint>

namespace normlab::kernels {

// Returns the mean loss over the non-ignored rows (0 if every row is ignored). losses[n] is row n's
// loss, -log softmax(logits[n])[targets[n]], computed as log-sum-exp so large logits cannot
// overflow; 0 for ignored rows. probs caches the softmax of every row (ignored rows too) for the
// backward. Throws normlab::UsageError if a target is outside [0, V) and not -1.
float cross_entropy_forward(float* losses, float* probs,                  // (N), (N, V)
                            const float* logits, const int32_t* targets,  // (N, V), (N)
                            int64_t N, int64_t V);

// ACCUMULATES (+=) the gradient of dloss * mean loss:
//   dlogits[n][v] += dloss / count * (probs[n][v] - [v == targets[n]])  for non-ignored rows,
// count = number of non-ignored rows. Ignored rows get nothing.
void cross_entropy_backward(float* dlogits,                              // (N, V)
                            const float* probs, const int32_t* targets,  // (N, V), (N)
                            int64_t N, int64_t V, float dloss);

}  // namespace normlab::kernels
