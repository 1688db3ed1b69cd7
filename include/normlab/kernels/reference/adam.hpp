#pragma once
// One Adam / AdamW update of N parameters, the plain version (torch.optim.Adam / AdamW, amsgrad
// off). t is the step number, starting at 1.
//   adam:  g = g + weight_decay * p          adamw: p = p * (1 - lr * weight_decay)
//   m = beta1 m + (1 - beta1) g              v = beta2 v + (1 - beta2) g^2
//   p = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
#include <cstdint>

namespace normlab::kernels::reference {

void adam_step(float* param, float* m, float* v,  // (N), (N), (N)
               const float* grad,                 // (N)
               int64_t N, int64_t t, float lr, float beta1, float beta2, float eps, float weight_decay,
               bool decoupled_weight_decay);

}  // namespace normlab::kernels::reference
