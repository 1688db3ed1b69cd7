#include "normlab/kernels/reference/softmax.hpp"

#include <cmath>

namespace normlab::kernels::reference {

void softmax_forward(float* out,        // (R,C)
                     const float* inp,  // (R,C)
                     int64_t R, int64_t C) {
  if (C == 0) return;
  for (int64_t r = 0; r < R; r++) {
    const float* x = inp + r * C;  // (C)
    float* y = out + r * C;        // (C)
    // subtract the row max so exp cannot overflow (the result does not change)
    float maxval = x[0];
    for (int64_t c = 1; c < C; c++) maxval = std::fmax(maxval, x[c]);
    // y = exp(x - max) / sum(exp(x - max))
    double sum = 0.0;
    for (int64_t c = 0; c < C; c++) sum += std::exp(double(x[c]) - maxval);
    for (int64_t c = 0; c < C; c++) y[c] = float(std::exp(double(x[c]) - maxval) / sum);
  }
}

void softmax_backward(float* dinp,                          // (R,C)
                      const float* dout, const float* out,  // (R,C), (R,C)
                      int64_t R, int64_t C) {
  for (int64_t r = 0; r < R; r++) {
    const float* dy = dout + r * C;  // (C)
    const float* y = out + r * C;    // (C)
    // every output depends on every input through the sum: dot = sum_k dy[k] * y[k]
    double dot = 0.0;
    for (int64_t c = 0; c < C; c++) dot += double(dy[c]) * y[c];
    // dx = y * (dy - dot)
    for (int64_t c = 0; c < C; c++) dinp[r * C + c] += float(y[c] * (dy[c] - dot));
  }
}

}  // namespace normlab::kernels::reference
