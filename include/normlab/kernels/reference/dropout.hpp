#pragma once
// Inverted dropout, the plain version: one element at a time, with the counter-based mask of
// kernels/dropout.hpp (an element is kept when its dropout_uniform is >= p, and then scaled by
// 1 / (1 - p)). Same contract as the fast kernel.
#include <cstdint>

namespace normlab::kernels::reference {

void dropout_forward(float* out, float* mask,            // (T,C), (T,C); T = offsets[B]
                     const float* inp,                   // (T,C)
                     const int64_t* offsets, int64_t B,  // (B+1)
                     int64_t C, float p, uint64_t key, int64_t first_sequence);

// ACCUMULATES (+=): dinp[i] += dout[i] * mask[i].
void dropout_backward(float* dinp, const float* dout, const float* mask, int64_t N);  // (N), (N), (N)

}  // namespace normlab::kernels::reference
