// Adam's element loop (kernels/adam.hpp), compiled once per kernel path so that it runs in the
// path's vector width: sqrt and division are exactly rounded in every width, and nothing is fused.
#include "normlab/kernels/adam.hpp"
#include "isa_kernels.hpp"

#include <cmath>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {
// m, v and p of one element, the gradient already decayed.
inline void moments_and_step(float& p, float& m, float& v, float grad, const AdamScalars& s) {
  m = m * s.beta1 + s.one_minus_beta1 * grad;
  v = v * s.beta2 + s.one_minus_beta2 * grad * grad;
  const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  p = p + s.neg_step_size * m / denom;
}
}  // namespace

// The three cases are three loops, so that each one vectorizes without a test inside.
void adam_update(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t N,
                 const AdamScalars& s) {
  const AdamScalars c = s;  // a local copy: the compiler need not reload it after each store
  if (c.decoupled && c.param_scale != 1.0f) {
    for (int64_t i = 0; i < N; i++) {
      p[i] = p[i] * c.param_scale;
      moments_and_step(p[i], m[i], v[i], g[i], c);
    }
  } else if (!c.decoupled && c.grad_decay != 0.0f) {
    for (int64_t i = 0; i < N; i++) moments_and_step(p[i], m[i], v[i], g[i] + c.grad_decay * p[i], c);
  } else {
    for (int64_t i = 0; i < N; i++) moments_and_step(p[i], m[i], v[i], g[i], c);
  }
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
