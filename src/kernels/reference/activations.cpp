#include "normlab/kernels/reference/activations.hpp"

#include <cmath>
#include <cstddef>
#include <vector>

namespace normlab::kernels::reference {

void gelu_forward(float* out, const float* inp, int64_t N) {  // (N), (N)
  for (int64_t i = 0; i < N; i++) {
    const double x = inp[i];
    // Phi(x) = 0.5 erfc(-x / sqrt 2), the normal CDF (erfc stays accurate for negative x)
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    out[i] = float(x * cdf);
  }
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N) {  // (N), (N), (N)
  for (int64_t i = 0; i < N; i++) {
    const double x = inp[i];
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    // phi(x) = exp(-x^2 / 2) / sqrt(2 pi), the normal density
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    // d/dx [x Phi(x)] = Phi(x) + x phi(x)
    dinp[i] += float(dout[i] * (cdf + x * pdf));
  }
}

void relu_forward(float* out, const float* inp, int64_t N) {  // (N), (N)
  for (int64_t i = 0; i < N; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* dout, const float* inp, int64_t N) {  // (N), (N), (N)
  // the gradient passes where x > 0 (and is 0 at exactly 0, as in PyTorch)
  for (int64_t i = 0; i < N; i++) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

void dyt_forward(float* out, const float* inp, const float* alpha, const float* gamma, const float* beta, int64_t N,
                 int64_t C) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      const int64_t i = n * C + c;
      out[i] = float(gamma[c] * std::tanh(double(alpha[0]) * inp[i]) + beta[c]);
    }
}

void dyt_backward(float* dinp, float* dalpha, float* dgamma, float* dbeta, const float* dout, const float* inp,
                  const float* alpha, const float* gamma, int64_t N, int64_t C) {
  // alpha, gamma and beta are shared by every row: their gradients sum over all N rows.
  std::vector<double> sum_gamma(size_t(C), 0.0), sum_beta(size_t(C), 0.0);
  double sum_alpha = 0.0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      const int64_t i = n * C + c;
      const double t = std::tanh(double(alpha[0]) * inp[i]);
      const double dt = double(dout[i]) * gamma[c] * (1.0 - t * t);  // the gradient reaching alpha x
      if (dinp != nullptr) dinp[i] += float(dt * alpha[0]);
      sum_alpha += dt * inp[i];
      sum_gamma[size_t(c)] += double(dout[i]) * t;
      sum_beta[size_t(c)] += dout[i];
    }
  dalpha[0] += float(sum_alpha);
  for (int64_t c = 0; c < C; c++) {
    dgamma[c] += float(sum_gamma[size_t(c)]);
    dbeta[c] += float(sum_beta[size_t(c)]);
  }
}

}  // namespace normlab::kernels::reference
