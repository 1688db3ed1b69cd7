#pragma once
// LayerNorm, the plain version: one row at a time, one loop per step of the math. Read this before
// the fast kernel (kernels/layer_norm.hpp), which computes the same numbers. The derivation of the
// backward is in docs/layernorm.md.
//
// Each of the N rows (N = B*T tokens) is normalized over its own C features:
//   mean = sum(x) / C,  var = sum((x - mean)^2) / C  (biased),  rstd = 1 / sqrt(var + eps)
//   y = gamma * (x - mean) * rstd + beta
// gamma/beta may be nullptr (elementwise_affine=False).
#include <cstdint>

namespace normlab::kernels::reference {

// mean and rstd may be nullptr (inference: nothing is cached).
void layer_norm_forward(float* out, float* mean, float* rstd,                     // (N,C), (N), (N)
                        const float* inp, const float* gamma, const float* beta,  // (N,C), (C), (C)
                        int64_t N, int64_t C, float eps);

// ACCUMULATES (+=) into dinp, dgamma, dbeta; dinp may be nullptr, dgamma/dbeta are nullptr exactly
// when gamma is. mean and rstd are what layer_norm_forward wrote.
void layer_norm_backward(float* dinp, float* dgamma, float* dbeta,                 // (N,C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,  // (N,C), (N,C), (C)
                         const float* mean, const float* rstd,                     // (N), (N)
                         int64_t N, int64_t C);

}  // namespace normlab::kernels::reference
