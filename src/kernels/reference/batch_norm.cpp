// Sums in double, as in every reference kernel (they are the yardstick of the fast ones).
#include "normlab/kernels/reference/batch_norm.hpp"

#include <cmath>

namespace normlab::kernels::reference {

void batch_norm_forward_train(float* out, float* mean, float* rstd,                     // (N,C), (C), (C)
                              float* running_mean, float* running_var,                  // (C), (C)
                              const float* inp, const float* gamma, const float* beta,  // (N,C), (C), (C)
                              int64_t N, int64_t C, float eps, float momentum, RankSum* /*ranks*/) {
  for (int64_t c = 0; c < C; c++) {  // one feature (a column) at a time
    // mean = sum over the N tokens of x[:, c] / N
    double sum = 0.0;
    for (int64_t n = 0; n < N; n++) sum += inp[n * C + c];
    const double m = sum / double(N);
    // var = sum((x - mean)^2) / N, biased: this is what normalizes the batch
    double sum_sq = 0.0;
    for (int64_t n = 0; n < N; n++) sum_sq += (inp[n * C + c] - m) * (inp[n * C + c] - m);
    const double var = sum_sq / double(N);
    const double s = 1.0 / std::sqrt(var + double(eps));
    // y = gamma * (x - mean) * rstd + beta
    for (int64_t n = 0; n < N; n++)
      out[n * C + c] = float((inp[n * C + c] - m) * s * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f));
    if (mean) mean[c] = float(m);
    if (rstd) rstd[c] = float(s);
    // running = (1 - momentum) * running + momentum * batch; the variance UNBIASED (N - 1)
    if (running_mean) running_mean[c] = float((1.0 - momentum) * running_mean[c] + momentum * m);
    if (running_var && N > 1)
      running_var[c] = float((1.0 - momentum) * running_var[c] + momentum * sum_sq / double(N - 1));
  }
}

void batch_norm_forward_eval(float* out, const float* inp,                         // (N,C), (N,C)
                             const float* running_mean, const float* running_var,  // (C), (C)
                             const float* gamma, const float* beta,                // (C), (C)
                             int64_t N, int64_t C, float eps) {
  for (int64_t c = 0; c < C; c++) {
    // the running statistics replace the batch's: every token is normalized on its own
    const double s = 1.0 / std::sqrt(double(running_var[c]) + double(eps));
    for (int64_t n = 0; n < N; n++)
      out[n * C + c] =
          float((inp[n * C + c] - double(running_mean[c])) * s * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f));
  }
}

void batch_norm_backward(float* dinp, float* dgamma, float* dbeta,                 // (N,C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,  // (N,C), (N,C), (C)
                         const float* mean, const float* rstd,                     // (C), (C)
                         int64_t N, int64_t C, RankSum* /*ranks*/) {
  for (int64_t c = 0; c < C; c++) {
    // the cached float mean of a feature near 1e4 has lost low bits that x - mean needs: add back
    // the mean of the residuals, in double
    double residual = 0.0;
    for (int64_t n = 0; n < N; n++) residual += double(inp[n * C + c]) - double(mean[c]);
    const double m = double(mean[c]) + residual / double(N), s = rstd[c];
    // sum(dy) and sum(dy * xhat) over the tokens: dbeta and dgamma, and what the batch mean and
    // variance send back to every token
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int64_t n = 0; n < N; n++) {
      const double xhat = (inp[n * C + c] - m) * s;
      sum_dy += dout[n * C + c];
      sum_dy_xhat += dout[n * C + c] * xhat;
    }
    if (dbeta) dbeta[c] += float(sum_dy);
    if (dgamma) dgamma[c] += float(sum_dy_xhat);
    if (!dinp) continue;
    // dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)): LayerNorm's formula, taken
    // down a column instead of along a row
    const double gam = gamma ? gamma[c] : 1.0f;
    for (int64_t n = 0; n < N; n++) {
      const double xhat = (inp[n * C + c] - m) * s;
      dinp[n * C + c] += float(gam * s * (dout[n * C + c] - sum_dy / double(N) - xhat * sum_dy_xhat / double(N)));
    }
  }
}

}  // namespace normlab::kernels::reference
