#pragma once
// LayerNorm on raw float arrays: the heart of normlab. The math, shapes and the derivation of the
// backward are in docs/layernorm.md; src/kernels/layer_norm.cpp holds the loops.
//
// The tricks of the fast version, one line each (what, and why):
//  - two passes per row, mean then squared deviations, in double: no E[x^2] - E[x]^2 cancellation;
//  - row sums in 16 fixed double lanes, combined pairwise in a fixed order: vectorizes without
//    -ffast-math, and rounds the same on every path, thread and address;
//  - prefetch of the next row (and of this row's output) during the first pass: the memory bus
//    keeps streaming while the later passes compute on a row already in L1;
//  - x - mean as (x - mean_hi) - mean_lo: a row with a large mean keeps its deviations' precision;
//  - forward caches only mean and rstd per row, the backward recomputes xhat from x;
//  - backward subtracts mean(xhat0) from xhat0 (computed with the float mean): the gradient does
//    not depend on how well a float holds the mean;
//  - backward's pass 2 uses g = dout * gamma rounded as pass 1 rounded it (kept from pass 1, or the
//    same product formed again, never fused into an FMA): g - mean(g) is exactly 0 when it must be;
//  - dgamma/dbeta in per-thread double buffers, each allocated by its thread, summed in thread
//    order: no false sharing, bit-identical at a fixed thread count;
//  - small inputs stay on one thread: a team costs more than it saves.
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
void layer_norm_forward(float* out, float* mean, float* rstd,                     // (rows, cols), (rows), (rows)
                        const float* inp, const float* gamma, const float* beta,  // (rows, cols), (cols), (cols)
                        int64_t rows, int64_t cols, float eps);

// Backward. ACCUMULATES (+=) into dinp, dgamma and dbeta. dinp may be nullptr (input needs no
// gradient); dgamma/dbeta are nullptr exactly when gamma is nullptr (no affine). mean and rstd are
// the ones layer_norm_forward wrote for this inp. dgamma/dbeta are reduced over rows with one
// partial buffer per thread, combined in thread order: bit-identical run to run at a fixed thread
// count.
void layer_norm_backward(float* dinp, float* dgamma, float* dbeta,                 // (rows, cols), (cols), (cols)
                         const float* dout, const float* inp, const float* gamma,  // (rows, cols), (rows, cols), (cols)
                         const float* mean, const float* rstd,                     // (rows), (rows)
                         int64_t rows, int64_t cols);

}  // namespace normlab::kernels
