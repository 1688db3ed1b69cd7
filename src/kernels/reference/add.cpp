#include "normlab/kernels/reference/add.hpp"

namespace normlab::kernels::reference {

void add_forward(float* out, const float* a, const float* b, int64_t N) {
  for (int64_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

void add_backward(GradOut dinp, const float* dout, int64_t N) {
  if (dinp.data == nullptr) return;
  for (int64_t i = 0; i < N; i++) {
    if (dinp.accumulate) dinp.data[i] += dout[i];
    else dinp.data[i] = dout[i];
  }
}

}  // namespace normlab::kernels::reference
