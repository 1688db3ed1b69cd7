#pragma once
// BatchNorm over the tokens of a packed (N, C) matrix (N = all real tokens of the batch, C
// features): statistics per FEATURE over the whole batch, the contrast with LayerNorm's per-token
// statistics (docs/layernorm.md). PyTorch's BatchNorm1d semantics:
//   training:  y = gamma * (x - mean_batch) / sqrt(var_batch + eps) + beta   (biased var_batch)
//              running = (1 - momentum) * running + momentum * batch_stat   (UNBIASED var: N/(N-1))
//   inference: y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta
// gamma/beta may be nullptr. All reductions over tokens use per-thread partial buffers combined in
// thread order: bit-identical run to run at a fixed thread count.
#include <cstdint>

namespace normlab::kernels {

// data-parallel: sync BatchNorm (dist/data_parallel.hpp). Given a RankSum, the training forward
// and backward hand it their per-feature sums over this process's tokens, with the token count
// last, and it replaces them in place by the sums over all ranks; every rank then normalizes with
// the global batch statistics (parameter gradients stay local: the gradient reduction sums them).
// nullptr, the default: this process's tokens only.
class RankSum {
 public:
  // values[i] <- the sum over all ranks of values[i], the same bits on every rank.
  virtual void sum(double* values, int64_t count) = 0;

 protected:
  ~RankSum() = default;
};

// Training forward. Writes the batch mean and rstd = 1/sqrt(var + eps) per feature (for the
// backward) and updates running_mean / running_var in place (each skipped if nullptr). With N == 1
// the unbiased variance is undefined: running_var is then left unchanged (PyTorch refuses N == 1).
void batch_norm_forward_train(float* out, float* mean, float* rstd,                     // (N, C), (C), (C)
                              float* running_mean, float* running_var,                  // (C), (C)
                              const float* inp, const float* gamma, const float* beta,  // (N, C), (C), (C)
                              int64_t N, int64_t C, float eps, float momentum, RankSum* ranks = nullptr);

// Inference forward: the running statistics replace the batch's.
void batch_norm_forward_eval(float* out, const float* inp,                         // (N, C), (N, C)
                             const float* running_mean, const float* running_var,  // (C), (C)
                             const float* gamma, const float* beta,                // (C), (C)
                             int64_t N, int64_t C, float eps);

// Backward of the training forward (mean and rstd are the batch statistics it wrote). ACCUMULATES
// (+=) into dinp, dgamma, dbeta; each may be nullptr.
void batch_norm_backward(float* dinp, float* dgamma, float* dbeta,                 // (N, C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,  // (N, C), (N, C), (C)
                         const float* mean, const float* rstd,                     // (C), (C)
                         int64_t N, int64_t C, RankSum* ranks = nullptr);

}  // namespace normlab::kernels
