#pragma once
// RMSNorm (Zhang & Sennrich 2019): LayerNorm without the centering and without beta.
//   y = gamma * x / sqrt(mean(x^2) + eps)   over each row of `cols` numbers
// gamma may be nullptr (no affine). See docs/layernorm.md.
#include <cstdint>

namespace normlab::kernels {

// Forward. Caches rstd = 1/sqrt(mean(x^2) + eps) per row (may be nullptr in inference).
void rms_norm_forward(float* out, float* rstd,               // (rows, cols), (rows)
                      const float* inp, const float* gamma,  // (rows, cols), (cols)
                      int64_t rows, int64_t cols, float eps);

// Backward. ACCUMULATES (+=) into dinp and dgamma; either may be nullptr. dgamma is reduced over
// rows with per-thread partial buffers combined in thread order (bit-identical run to run at a
// fixed thread count).
void rms_norm_backward(float* dinp, float* dgamma,                               // (rows, cols), (cols)
                       const float* dout, const float* inp, const float* gamma,  // (rows, cols), (rows, cols), (cols)
                       const float* rstd,                                        // (rows)
                       int64_t rows, int64_t cols);

}  // namespace normlab::kernels
