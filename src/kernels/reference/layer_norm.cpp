// Sums are taken in double: the reference is what the fast kernels are tested against, so its own
// rounding must stay far below theirs.
#include "normlab/kernels/reference/layer_norm.hpp"

#include <cmath>

namespace normlab::kernels::reference {

void layer_norm_forward(float* out, float* mean, float* rstd,                     // (N,C), (N), (N)
                        const float* inp, const float* gamma, const float* beta,  // (N,C), (C), (C)
                        int64_t N, int64_t C, float eps) {
  for (int64_t n = 0; n < N; n++) {
    const float* x = inp + n * C;  // (C) this token's features
    float* y = out + n * C;        // (C)
    // mean = sum(x) / C
    double sum = 0.0;
    for (int64_t i = 0; i < C; i++) sum += x[i];
    const double m = sum / double(C);
    // var = sum((x - mean)^2) / C, biased (divided by C, not C - 1)
    double sum_sq = 0.0;
    for (int64_t i = 0; i < C; i++) sum_sq += (x[i] - m) * (x[i] - m);
    const double var = sum_sq / double(C);
    // rstd = 1 / sqrt(var + eps); eps keeps a constant row (var = 0) finite
    const double s = 1.0 / std::sqrt(var + double(eps));
    // y = gamma * xhat + beta, xhat = (x - mean) * rstd
    for (int64_t i = 0; i < C; i++) {
      const double xhat = (x[i] - m) * s;
      y[i] = float(xhat * (gamma ? gamma[i] : 1.0f) + (beta ? beta[i] : 0.0f));
    }
    // cache what the backward needs: two numbers per token
    if (mean) mean[n] = float(m);
    if (rstd) rstd[n] = float(s);
  }
}

void layer_norm_backward(float* dinp, float* dgamma, float* dbeta,                 // (N,C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,  // (N,C), (N,C), (C)
                         const float* mean, const float* rstd,                     // (N), (N)
                         int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; n++) {
    const float* x = inp + n * C;    // (C)
    const float* dy = dout + n * C;  // (C)
    // the cached float mean of a row near 1e4 has lost low bits that x - mean needs: add back
    // the mean of the residuals, in double
    double residual = 0.0;
    for (int64_t i = 0; i < C; i++) residual += double(x[i]) - double(mean[n]);
    const double m = double(mean[n]) + residual / double(C);
    const double s = rstd[n];
    // g = dy * gamma is the gradient reaching xhat; we need its mean and the mean of g * xhat
    double mean_g = 0.0, mean_g_xhat = 0.0;
    for (int64_t i = 0; i < C; i++) {
      const double xhat = (x[i] - m) * s;
      const double g = double(dy[i]) * (gamma ? gamma[i] : 1.0f);
      mean_g += g;
      mean_g_xhat += g * xhat;
    }
    mean_g /= double(C);
    mean_g_xhat /= double(C);
    for (int64_t i = 0; i < C; i++) {
      const double xhat = (x[i] - m) * s;
      const double g = double(dy[i]) * (gamma ? gamma[i] : 1.0f);
      // dbeta += dy, dgamma += dy * xhat: summed over the tokens
      if (dbeta) dbeta[i] += dy[i];
      if (dgamma) dgamma[i] += float(dy[i] * xhat);
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)): the two means are what the mean and the
      // variance of the row send back (docs/layernorm.md derives it)
      if (dinp) dinp[n * C + i] += float(s * (g - mean_g - xhat * mean_g_xhat));
    }
  }
}

}  // namespace normlab::kernels::reference
