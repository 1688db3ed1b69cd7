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
// Each tensor's squared norm in 8 double lanes folded pairwise (kernels/adam.hpp).
void sums_of_squares(double* sums, const float* const* g, const int64_t* numel, int64_t count);
// adam_update, then the tensor's sum of squares as sums_of_squares takes it.
double adam_update_sum_squares(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s);
// No element infinite or NaN.
bool all_finite(const float* x, int64_t N);

}  // namespace normlab::kernels::reference
