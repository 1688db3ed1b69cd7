// RMSNorm forward/backward on raw arrays: LayerNorm without centering (docs/layernorm.md).
// Same precision plan as layer_norm.cpp: row sums in double lanes with a fixed combination order,
// elementwise work in float.
#include "normlab/kernels/rms_norm.hpp"
#include "isa_kernels.hpp"
#include "lanes.hpp"

#include <cmath>
#include <vector>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {

// sum_i x[i]^2, in double.
double row_sum_squares(const float* x, int64_t n) {  // x: (n)
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; l++) lanes[l] += double(x[i + l]) * double(x[i + l]);
  }
  double total = sum_lanes(lanes);
  for (; i < n; i++) total += double(x[i]) * double(x[i]);
  return total;
}

}  // namespace

void rms_norm_forward(float* out, float* rstd,               // (rows, cols), (rows)
                      const float* inp, const float* gamma,  // (rows, cols), (cols)
                      int64_t rows, int64_t cols, float eps) {
  parallel_for(rows, rows * cols >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
      const float* x = inp + r * cols;  // (cols)
      float* y = out + r * cols;        // (cols)
      // No mean is subtracted, so one pass suffices: a sum of squares has no cancellation.
      double mean_square = row_sum_squares(x, cols) / double(cols);
      double row_rstd = 1.0 / std::sqrt(mean_square + double(eps));
      if (rstd != nullptr) rstd[r] = float(row_rstd);
      const float rstd_f = float(row_rstd);
      for (int64_t i = 0; i < cols; i++) {
        float xhat = x[i] * rstd_f;
        y[i] = gamma != nullptr ? xhat * gamma[i] : xhat;
      }
    }
  });
}

// With xhat = x * rstd and g = dout * gamma, differentiating rstd = (mean(x^2) + eps)^(-1/2)
// (d rstd / d x_j = -rstd^3 * x_j / cols) gives
//   dx = rstd * (g - xhat * mean(g * xhat))
// LayerNorm's formula without its mean(g) term: nothing was centered, so no gradient flows back
// through a mean.
void rms_norm_backward(float* dinp, float* dgamma,                               // (rows, cols), (cols)
                       const float* dout, const float* inp, const float* gamma,  // (rows, cols), (rows, cols), (cols)
                       const float* rstd,                                        // (rows)
                       int64_t rows, int64_t cols) {
  const bool parallel = rows * cols >= kMinParallelElements;
  const int num_threads = parallel_parts(parallel);  // parts: a dgamma partial each
  std::vector<double> dgamma_partial(dgamma != nullptr ? size_t(num_threads) * size_t(cols) : 0, 0.0);

  for_blocks(rows, num_threads, [&](int64_t part, int64_t begin, int64_t end) {
    double* dgamma_thread = dgamma != nullptr ? dgamma_partial.data() + size_t(part) * size_t(cols) : nullptr;

    for (int64_t r = begin; r < end; r++) {
      const float* x = inp + r * cols;    // (cols)
      const float* dy = dout + r * cols;  // (cols)
      const float rstd_r = rstd[r];

      double lanes_gxhat[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= cols; i += kLanes) {
        for (int l = 0; l < kLanes; l++) {
          float g = gamma != nullptr ? dy[i + l] * gamma[i + l] : dy[i + l];
          lanes_gxhat[l] += double(g * (x[i + l] * rstd_r));
        }
      }
      double sum_gxhat = sum_lanes(lanes_gxhat);
      for (; i < cols; i++) {
        float g = gamma != nullptr ? dy[i] * gamma[i] : dy[i];
        sum_gxhat += double(g * (x[i] * rstd_r));
      }
      const float mean_gxhat = float(sum_gxhat / double(cols));

      float* dx = dinp != nullptr ? dinp + r * cols : nullptr;  // (cols)
      for (int64_t j = 0; j < cols; j++) {
        float xhat = x[j] * rstd_r;
        if (dx != nullptr) {
          float g = gamma != nullptr ? dy[j] * gamma[j] : dy[j];
          dx[j] += rstd_r * (g - xhat * mean_gxhat);
        }
        if (dgamma_thread != nullptr) dgamma_thread[j] += double(dy[j] * xhat);
      }
    }
  });

  if (dgamma != nullptr) {
    for (int64_t j = 0; j < cols; j++) {
      double sum = 0.0;
      for (int t = 0; t < num_threads; t++) sum += dgamma_partial[size_t(t) * size_t(cols) + size_t(j)];
      dgamma[j] += float(sum);
    }
  }
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
