#include "normlab/kernels/reference/activations.hpp"

#include <cmath>

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

}  // namespace normlab::kernels::reference
