#pragma once
// LayerNorm on raw float arrays: the heart of normlab. The math, shapes and the derivation of the
// backward are in docs/layernorm.md; src/kernels/layer_norm.cpp holds the loops.
//
// Every row of `cols` numbers (the trailing normalized_shape flattened; rows = product of the
// leading dims, e.g. rows = batch * seq_len, cols = d_model) is normalized on its own:
//   y = gamma * (x - mean) / sqrt(var + eps) + beta,  var biased (divided by cols)
// gamma/beta may be nullptr (PyTorch's elementwise_affine=False): y = xhat.
#include <cstdint>

namespace normlab::kernels {

// Forward. Caches only what the backward needs: mean and rstd = 1/sqrt(var + eps) of each row.
// mean and rstd may be nullptr (inference). Threaded over rows; every row's result is the same
// whatever the thread count or the other rows.
void layer_norm_forward(float* out, float* mean, float* rstd,                 // (rows, cols), (rows), (rows)
                        const float* inp, const float* gamma, const float* beta,  // (rows, cols), (cols), (cols)
                        int64_t rows, int64_t cols, float eps);

// Backward. ACCUMULATES (+=) into dinp, dgamma and dbeta. dinp may be nullptr (input needs no
// gradient); dgamma/dbeta are nullptr exactly when gamma is nullptr (no affine). mean and rstd are
// the ones layer_norm_forward wrote for this inp. dgamma/dbeta are reduced over rows with one
// partial buffer per thread, combined in thread order: bit-identical run to run at a fixed thread
// count.
void layer_norm_backward(float* dinp, float* dgamma, float* dbeta,                // (rows, cols), (cols), (cols)
                         const float* dout, const float* inp, const float* gamma,  // (rows, cols), (rows, cols), (cols)
                         const float* mean, const float* rstd,                      // (rows), (rows)
                         int64_t rows, int64_t cols);

}  // namespace normlab::kernels
