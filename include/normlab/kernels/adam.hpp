#pragma once
// The element loop of one Adam / AdamW step over a contiguous range of one parameter tensor: the
// update of src/optim/optimizer.cpp (Optimizer::step_adam), which computes the scalars in double
// once per tensor and rounds them to float (torch.optim.Adam's float32 operation order):
//   adamw: p = p * param_scale                adam: g = g + grad_decay * p
//   m = m * beta1 + one_minus_beta1 * g;      v = v * beta2 + one_minus_beta2 * g * g
//   p = p + neg_step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)
// Every operation is one IEEE float operation (no fused multiply-add), so each path gives the same
// bits, the reference path's plain loop (kernels/reference/adam.hpp) included.
#include <cstdint>

namespace normlab::kernels {

struct AdamScalars {
  bool decoupled;     // AdamW: scale the parameter (when param_scale != 1); Adam: decay the gradient
  float param_scale;  // 1 - lr * weight_decay (AdamW)
  float grad_decay;   // weight_decay (Adam; 0 for none)
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^t)
};

// p, m, v, g: N floats each. Runs on the calling thread (the optimizer splits the work).
void adam_update(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s);

// sums[k] = sum of g[k][i]^2 over i < numel[k], for k < count: the squared gradient norm of each
// tensor, in double over 8 fixed lanes (lane l adds i = l, l + 8, ... in order) folded pairwise
// ((l, l + 4), then (l, l + 2), then (l, l + 1)): the same bits on every path, thread count and
// grouping of tensors. A tensor with numel 0 sums to 0 (its pointer is not read). Fast paths run
// several tensors' lanes side by side (one tensor's is a chain of dependent additions).
void sums_of_squares(double* sums, const float* const* g, const int64_t* numel, int64_t count);

// adam_update of one whole tensor (p, m, v, g: N floats each), returning sum of g[i]^2: the
// tensor's sums_of_squares, the same bits, from the pass that reads g for the update (the gradient
// norm without a pass of its own).
double adam_update_sum_squares(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s);

// True if none of x[0..N) is infinite or NaN: what a squared norm in double of floats needs to be
// finite (N float squares cannot overflow a double), so a finite gradient norm can be known before
// the pass that computes it (autograd.hpp, LeafGradientCheck).
bool all_finite(const float* x, int64_t N);

}  // namespace normlab::kernels
