#pragma once
// BatchNorm, the plain version: statistics per FEATURE over the N tokens of the batch (LayerNorm's
// are per token). PyTorch's BatchNorm1d semantics:
//   training:  y = gamma * (x - mean_batch) / sqrt(var_batch + eps) + beta   (biased var_batch)
//              running = (1 - momentum) * running + momentum * batch_stat   (unbiased var: N/(N-1))
//   inference: y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta
// gamma/beta may be nullptr. The statistics are this process's tokens' only: `ranks` (sync
// BatchNorm, kernels/batch_norm.hpp) is accepted for the dispatch's sake and not used, so a
// data-parallel run with synced statistics needs a fast path.
#include <cstdint>

#include "normlab/kernels/batch_norm.hpp"

namespace normlab::kernels::reference {

// Writes the batch mean and rstd per feature and updates running_mean / running_var in place (each
// skipped if nullptr; running_var also when N == 1, where the unbiased variance is undefined).
void batch_norm_forward_train(float* out, float* mean, float* rstd,                     // (N,C), (C), (C)
                              float* running_mean, float* running_var,                  // (C), (C)
                              const float* inp, const float* gamma, const float* beta,  // (N,C), (C), (C)
                              int64_t N, int64_t C, float eps, float momentum, RankSum* ranks);

void batch_norm_forward_eval(float* out, const float* inp,                         // (N,C), (N,C)
                             const float* running_mean, const float* running_var,  // (C), (C)
                             const float* gamma, const float* beta,                // (C), (C)
                             int64_t N, int64_t C, float eps);

// Backward of the training forward. ACCUMULATES (+=) into dinp, dgamma, dbeta; each may be nullptr.
void batch_norm_backward(float* dinp, float* dgamma, float* dbeta,                 // (N,C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,  // (N,C), (N,C), (C)
                         const float* mean, const float* rstd,                     // (C), (C)
                         int64_t N, int64_t C, RankSum* ranks);

}  // namespace normlab::kernels::reference
