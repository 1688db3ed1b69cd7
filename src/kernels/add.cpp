// The residual sum and its gradient (kernels/add.hpp), compiled once per kernel path.
#include "normlab/kernels/add.hpp"
#include "isa_kernels.hpp"

#include <cstring>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

void add_forward(float* __restrict out, const float* __restrict a, const float* __restrict b, int64_t N) {
  for (int64_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

void add_backward(GradOut dinp, const float* __restrict dout, int64_t N) {
  float* __restrict d = dinp.data;
  if (d == nullptr || N <= 0) return;
  if (!dinp.accumulate) {
    std::memcpy(d, dout, sizeof(float) * size_t(N));
    return;
  }
  for (int64_t i = 0; i < N; i++) d[i] += dout[i];
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
