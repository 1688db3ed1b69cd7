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

}  // namespace normlab::kernels::reference
