#pragma once
// One Adam / AdamW update of N parameters, the plain version (torch.optim.Adam / AdamW, amsgrad
// off), with the scalars the optimizer computes once per tensor (kernels/adam.hpp):
//   adam:  g = g + weight_decay * p          adamw: p = p * (1 - lr * weight_decay)
//   m = beta1 m + (1 - beta1) g              v = beta2 v + (1 - beta2) g^2
//   p = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
#include <cstdint>

#include "normlab/kernels/adam.hpp"

namespace normlab::kernels::reference {

// p, m, v, g: N floats each.
void adam_update(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s);

}  // namespace normlab::kernels::reference
