#pragma once
// Softmax over the last dimension, the plain version:
//   out[r][c] = exp(inp[r][c] - max_r) / sum_k exp(inp[r][k] - max_r)
#include <cstdint>

namespace normlab::kernels::reference {

void softmax_forward(float* out,        // (R,C)
                     const float* inp,  // (R,C)
                     int64_t R, int64_t C);

// ACCUMULATES (+=): dinp = out * (dout - sum_k dout[k] out[k]), row by row.
void softmax_backward(float* dinp,                          // (R,C)
                      const float* dout, const float* out,  // (R,C), (R,C)
                      int64_t R, int64_t C);

}  // namespace normlab::kernels::reference
