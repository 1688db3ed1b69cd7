// Sums in double, as in every reference kernel (they are the yardstick of the fast ones).
#include "normlab/kernels/reference/power_norm.hpp"

#include <cmath>

namespace normlab::kernels::reference {

void power_norm_forward(float* out, float* rstd, float* running_phi,              // (N,C), (C), (C)
                        const float* inp, const float* gamma, const float* beta,  // (N,C), (C), (C)
                        int64_t N, int64_t C, float eps, float momentum) {
  for (int64_t c = 0; c < C; c++) {  // one feature (a column) at a time
    // normalize by the running quadratic mean of the steps before this one: psi = sqrt(phi + eps)
    const double s = 1.0 / std::sqrt(double(running_phi[c]) + double(eps));
    for (int64_t n = 0; n < N; n++)
      out[n * C + c] = float(inp[n * C + c] * s * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f));
    if (rstd) rstd[c] = float(s);
    if (momentum <= 0.0f || N <= 0) continue;
    // phi = (1 - momentum) * phi + momentum * mean(x^2) over this batch's tokens
    double sum_sq = 0.0;
    for (int64_t n = 0; n < N; n++) sum_sq += double(inp[n * C + c]) * double(inp[n * C + c]);
    running_phi[c] = float((1.0 - momentum) * running_phi[c] + double(momentum) * sum_sq / double(N));
  }
}

void power_norm_backward(float* dinp, float* dgamma, float* dbeta, float* grad_ema,  // (N,C), (C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,    // (N,C), (N,C), (C)
                         const float* rstd,                                          // (C)
                         int64_t N, int64_t C, float momentum) {
  for (int64_t c = 0; c < C; c++) {
    const double s = rstd[c], gam = gamma ? gamma[c] : 1.0f;
    const double nu = grad_ema ? grad_ema[c] : 0.0;
    // dbeta = sum(dy), dgamma = sum(dy * xhat); Gamma = mean(xhat^2), Lambda = mean(g * xhat)
    double sum_dy = 0.0, sum_dy_xhat = 0.0, sum_xhat_sq = 0.0;
    for (int64_t n = 0; n < N; n++) {
      const double xhat = inp[n * C + c] * s, dy = dout[n * C + c];
      sum_dy += dy;
      sum_dy_xhat += dy * xhat;
      sum_xhat_sq += xhat * xhat;
      // dx = rstd * (g - nu * xhat): nu of the steps before this one
      if (dinp) dinp[n * C + c] += float(s * (gam * dy - nu * xhat));
    }
    if (dbeta) dbeta[c] += float(sum_dy);
    if (dgamma) dgamma[c] += float(sum_dy_xhat);
    if (!grad_ema || N <= 0) continue;
    // nu = nu * (1 - momentum * Gamma) + momentum * Lambda
    const double m = momentum, Gamma = sum_xhat_sq / double(N), Lambda = gam * sum_dy_xhat / double(N);
    grad_ema[c] = float(nu * (1.0 - m * Gamma) + m * Lambda);
  }
}

}  // namespace normlab::kernels::reference
