// Sums in double, as in every reference kernel (they are the yardstick of the fast ones).
#include "normlab/kernels/reference/rms_norm.hpp"

#include <cmath>

namespace normlab::kernels::reference {

void rms_norm_forward(float* out, float* rstd,               // (N,C), (N)
                      const float* inp, const float* gamma,  // (N,C), (C)
                      int64_t N, int64_t C, float eps) {
  for (int64_t n = 0; n < N; n++) {
    const float* x = inp + n * C;  // (C)
    float* y = out + n * C;        // (C)
    // ms = sum(x^2) / C, the mean square (no mean is subtracted)
    double sum_sq = 0.0;
    for (int64_t i = 0; i < C; i++) sum_sq += double(x[i]) * x[i];
    // rstd = 1 / sqrt(ms + eps)
    const double s = 1.0 / std::sqrt(sum_sq / double(C) + double(eps));
    // y = gamma * x * rstd
    for (int64_t i = 0; i < C; i++) y[i] = float(x[i] * s * (gamma ? gamma[i] : 1.0f));
    if (rstd) rstd[n] = float(s);
  }
}

void rms_norm_backward(float* dinp, float* dgamma,                               // (N,C), (C)
                       const float* dout, const float* inp, const float* gamma,  // (N,C), (N,C), (C)
                       const float* rstd,                                        // (N)
                       int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; n++) {
    const float* x = inp + n * C;    // (C)
    const float* dy = dout + n * C;  // (C)
    const double s = rstd[n];
    // g = dy * gamma reaches x * rstd; mean(g * x) is what the shared rstd sends back
    double mean_g_x = 0.0;
    for (int64_t i = 0; i < C; i++) mean_g_x += double(dy[i]) * (gamma ? gamma[i] : 1.0f) * x[i];
    mean_g_x /= double(C);
    for (int64_t i = 0; i < C; i++) {
      const double g = double(dy[i]) * (gamma ? gamma[i] : 1.0f);
      // dgamma += dy * x * rstd, summed over the tokens
      if (dgamma) dgamma[i] += float(dy[i] * x[i] * s);
      // dx = rstd * (g - x * rstd^2 * mean(g * x))
      if (dinp) dinp[n * C + i] += float(s * (g - x[i] * s * s * mean_g_x));
    }
  }
}

}  // namespace normlab::kernels::reference
