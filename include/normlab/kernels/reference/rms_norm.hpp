#pragma once
// RMSNorm, the plain version: LayerNorm without the centering and without beta.
//   rstd = 1 / sqrt(sum(x^2) / C + eps),  y = gamma * x * rstd   over each row of C features
// gamma may be nullptr (no affine).
#include <cstdint>

namespace normlab::kernels::reference {

// rstd may be nullptr (inference).
void rms_norm_forward(float* out, float* rstd,               // (N,C), (N)
                      const float* inp, const float* gamma,  // (N,C), (C)
                      int64_t N, int64_t C, float eps);

// ACCUMULATES (+=) into dinp and dgamma; either may be nullptr.
void rms_norm_backward(float* dinp, float* dgamma,                               // (N,C), (C)
                       const float* dout, const float* inp, const float* gamma,  // (N,C), (N,C), (C)
                       const float* rstd,                                        // (N)
                       int64_t N, int64_t C);

}  // namespace normlab::kernels::reference
