#pragma once
// The sum of two tensors of one shape, the residual connection x + f(x) (ops::add), and the
// gradient of either input: d(a + b)/da = d(a + b)/db = the output's gradient unchanged. Compiled
// per kernel path so the loop runs in the path's vector width (one IEEE addition per element: the
// same bits on every path). Both run on the calling thread (the op splits the work).
#include <cstdint>

#include "normlab/kernels/grad_out.hpp"

namespace normlab::kernels {

void add_forward(float* out, const float* a, const float* b, int64_t N);  // (N) = (N) + (N)
// dinp = dout, or dinp += dout when dinp.accumulate (grad_out.hpp); nothing when dinp is not wanted.
void add_backward(GradOut dinp, const float* dout, int64_t N);  // (N), (N)

}  // namespace normlab::kernels
