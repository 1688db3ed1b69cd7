#include "normlab/kernels/reference/adam.hpp"
#include "../isa_kernels.hpp"

#include <cmath>

namespace normlab::kernels::reference {

void adam_step(float* param, float* m, float* v,  // (N), (N), (N)
               const float* grad,                 // (N)
               int64_t N, int64_t t, float lr, float beta1, float beta2, float eps, float weight_decay,
               bool decoupled_weight_decay) {
  // bias corrections: m and v start at 0, so early averages are too small by these factors
  const double bias_correction1 = 1.0 - std::pow(double(beta1), double(t));
  const double bias_correction2 = 1.0 - std::pow(double(beta2), double(t));
  for (int64_t i = 0; i < N; i++) {
    float g = grad[i];
    // weight decay: AdamW shrinks the parameter itself, Adam adds an L2 term to the gradient
    if (decoupled_weight_decay)
      param[i] = float(param[i] * (1.0 - double(lr) * weight_decay));
    else
      g = g + weight_decay * param[i];
    // m, v: running averages of the gradient and of its square
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    // p -= lr * mhat / (sqrt(vhat) + eps)
    const double m_hat = m[i] / bias_correction1;
    const double v_hat = v[i] / bias_correction2;
    param[i] = float(param[i] - double(lr) * m_hat / (std::sqrt(v_hat) + double(eps)));
  }
}

// The dispatched element loop (kernels/adam.hpp) in its plain form. The optimizer does not call it
// on this path (it runs adam_step above); it is here so that every path has every kernel, and the
// tests compare it with the fast builds.
void adam_update(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s) {
  for (int64_t i = 0; i < N; i++) {
    float grad = g[i];
    if (s.decoupled)
      p[i] = p[i] * s.param_scale;
    else
      grad = grad + s.grad_decay * p[i];
    m[i] = m[i] * s.beta1 + s.one_minus_beta1 * grad;
    v[i] = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    const float denom = std::sqrt(v[i]) / s.bias_correction2_sqrt + s.eps;
    p[i] = p[i] + s.neg_step_size * m[i] / denom;
  }
}

}  // namespace normlab::kernels::reference
