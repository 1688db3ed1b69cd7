#pragma once
// PowerNorm (Shen et al. 2020, Algorithm 1), the plain version: per-feature quadratic mean,
// normalized with the RUNNING statistic; the backward's input gradient is the paper's approximation
// with a running average grad_ema (nu). Math and symbols: normlab/kernels/power_norm.hpp.
#include <cstdint>

namespace normlab::kernels::reference {

void power_norm_forward(float* out, float* rstd, float* running_phi,              // (N,C), (C), (C)
                        const float* inp, const float* gamma, const float* beta,  // (N,C), (C), (C)
                        int64_t N, int64_t C, float eps, float momentum);

void power_norm_backward(float* dinp, float* dgamma, float* dbeta, float* grad_ema,  // (N,C), (C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,    // (N,C), (N,C), (C)
                         const float* rstd,                                          // (C)
                         int64_t N, int64_t C, float momentum);

}  // namespace normlab::kernels::reference
