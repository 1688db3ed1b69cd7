#pragma once
// PowerNorm (Shen et al. 2020, "PowerNorm: Rethinking Batch Normalization in Transformers",
// Algorithm 1) over the tokens of a packed (N, C) matrix: BatchNorm's per-FEATURE statistics, but
// the quadratic mean (no mean subtraction) and, in the forward, the RUNNING statistic instead of the
// batch's, so a token's output never depends on its batch-mates (docs/layernorm.md, "PowerNorm").
//   forward:   y = gamma * x / sqrt(running_phi + eps) + beta        (running_phi of the steps before)
//              training: running_phi = (1 - momentum) * running_phi + momentum * mean_N(x^2)
//   backward:  g = gamma * dy, xhat = x / sqrt(running_phi + eps)     (the paper's approximate gradient)
//              dx = rstd * (g - grad_ema * xhat)
//              grad_ema = grad_ema * (1 - momentum * mean_N(xhat^2)) + momentum * mean_N(g * xhat)
// grad_ema (the paper's nu) stands in for the gradient through the batch statistic that the forward
// does not use. momentum is the paper's 1 - alpha. gamma/beta may be nullptr. Column sums use
// per-thread partial buffers combined in thread order: bit-identical at a fixed thread count.
#include <cstdint>

namespace normlab::kernels {

// Writes rstd = 1/sqrt(running_phi + eps) per feature (for the backward), from running_phi as it is
// on entry; then, if momentum > 0, moves running_phi towards this batch's mean square (momentum 0:
// evaluation, running_phi untouched).
void power_norm_forward(float* out, float* rstd, float* running_phi,              // (N, C), (C), (C)
                        const float* inp, const float* gamma, const float* beta,  // (N, C), (C), (C)
                        int64_t N, int64_t C, float eps, float momentum);

// ACCUMULATES (+=) into dinp, dgamma, dbeta (each may be nullptr). With grad_ema == nullptr the
// exact derivative of the forward (an affine map per feature); otherwise the paper's approximate
// input gradient with grad_ema as it is on entry, then grad_ema updated in place.
void power_norm_backward(float* dinp, float* dgamma, float* dbeta, float* grad_ema,  // (N, C), (C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,    // (N, C), (N, C), (C)
                         const float* rstd,                                          // (C)
                         int64_t N, int64_t C, float momentum);

}  // namespace normlab::kernels
