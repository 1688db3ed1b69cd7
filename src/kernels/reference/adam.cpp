#include "normlab/kernels/reference/adam.hpp"

#include <cmath>

namespace normlab::kernels::reference {

void adam_update(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s) {
  for (int64_t i = 0; i < N; i++) {
    float grad = g[i];
    // weight decay: AdamW shrinks the parameter itself, Adam adds an L2 term to the gradient
    if (s.decoupled) p[i] = p[i] * s.param_scale;
    else grad = grad + s.grad_decay * p[i];
    // m, v: running averages of the gradient and of its square
    m[i] = m[i] * s.beta1 + s.one_minus_beta1 * grad;
    v[i] = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    // p -= lr * mhat / (sqrt(vhat) + eps), with mhat's 1 / (1 - beta1^t) folded into neg_step_size
    const float denom = std::sqrt(v[i]) / s.bias_correction2_sqrt + s.eps;
    p[i] = p[i] + s.neg_step_size * m[i] / denom;
  }
}

// Each tensor alone: lane l adds g[i]^2 for i = l, l + 8, ...; then the lanes pairwise.
void sums_of_squares(double* sums, const float* const* g, const int64_t* numel, int64_t count) {
  for (int64_t k = 0; k < count; k++) {
    double lanes[8] = {};
    for (int64_t i = 0; i < numel[k]; i++) lanes[i % 8] += double(g[k][i]) * double(g[k][i]);
    for (int width = 4; width >= 1; width /= 2)
      for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
    sums[k] = lanes[0];
  }
}

double adam_update_sum_squares(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s) {
  reference::adam_update(p, m, v, g, N, s);
  double sum = 0.0;
  reference::sums_of_squares(&sum, &g, &N, 1);
  return sum;
}

bool all_finite(const float* x, int64_t N) {
  for (int64_t i = 0; i < N; i++)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace normlab::kernels::reference
