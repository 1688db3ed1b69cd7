#pragma once
// Softmax over the last dimension of a (rows, cols) matrix:
//   out[r][c] = exp(inp[r][c] - max_r) / sum_k exp(inp[r][k] - max_r)
// Subtracting the row max keeps exp from overflowing; it does not change the result.
#include <cstdint>

namespace normlab::kernels {

// Threaded over rows; every row is computed on its own.
void softmax_forward(float* out,        // (rows, cols)
                     const float* inp,  // (rows, cols)
                     int64_t rows, int64_t cols);

// ACCUMULATES (+=): dinp[r][c] += out[r][c] * (dout[r][c] - sum_k dout[r][k] out[r][k]).
// out is what softmax_forward wrote.
void softmax_backward(float* dinp,                          // (rows, cols)
                      const float* dout, const float* out,  // (rows, cols), (rows, cols)
                      int64_t rows, int64_t cols);

}  // namespace normlab::kernels
