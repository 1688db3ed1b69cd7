#pragma once
// The sum of two tensors and the gradient of either input, the plain version:
//   out = a + b,    d out / d a = d out / d b = 1
#include <cstdint>

#include "normlab/kernels/grad_out.hpp"

namespace normlab::kernels::reference {

void add_forward(float* out, const float* a, const float* b, int64_t N);  // (N) = (N) + (N)
void add_backward(GradOut dinp, const float* dout, int64_t N);           // (N) =, or +=, (N)

}  // namespace normlab::kernels::reference
