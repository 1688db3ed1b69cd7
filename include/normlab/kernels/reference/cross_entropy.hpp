#pragma once
// Softmax cross-entropy, the plain version: N rows of V logits, mean loss over the rows whose
// target is not -1 (PyTorch's ignore_index).
//   loss_n = -log softmax(logits_n)[target_n] = logsumexp(logits_n) - logits_n[target_n]
#include <cstdint>

namespace normlab::kernels::reference {

// Returns the mean loss (0 if every row is ignored); losses[n] is row n's loss (0 if ignored) and
// probs the softmax of every row, kept for the backward. Throws normlab::UsageError for a target
// outside [0, V) that is not -1.
float cross_entropy_forward(float* losses, float* probs,                  // (N), (N,V)
                            const float* logits, const int32_t* targets,  // (N,V), (N)
                            int64_t N, int64_t V);

// ACCUMULATES (+=): dlogits[n] += dloss / count * (probs[n] - onehot(target_n)), non-ignored rows.
void cross_entropy_backward(float* dlogits,                              // (N,V)
                            const float* probs, const int32_t* targets,  // (N,V), (N)
                            int64_t N, int64_t V, float dloss);

}  // namespace normlab::kernels::reference
