#include "normlab/kernels/softmax.hpp"
#include "isa_kernels.hpp"

#include <algorithm>
#include <cmath>

#include "normlab/kernels/math.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

void softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols) {
  parallel_for(rows, rows * cols >= kMinParallelElements / 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
      const float* x = inp + r * cols;
      float* y = out + r * cols;
      float maxval = -INFINITY;
      for (int64_t c = 0; c < cols; c++) maxval = std::max(maxval, x[c]);
      float sum = 0.0f;
      for (int64_t c = 0; c < cols; c++) {
        y[c] = math::exp(x[c] - maxval);
        sum += y[c];
      }
      const float inv_sum = 1.0f / sum;
      for (int64_t c = 0; c < cols; c++) y[c] *= inv_sum;
    }
  });
}

void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols) {
  parallel_for(rows, rows * cols >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
      const float* dy = dout + r * cols;
      const float* y = out + r * cols;
      float* dx = dinp + r * cols;
      float y_dot_dy = 0.0f;
      for (int64_t c = 0; c < cols; c++) y_dot_dy += y[c] * dy[c];
      for (int64_t c = 0; c < cols; c++) dx[c] += y[c] * (dy[c] - y_dot_dy);
    }
  });
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
