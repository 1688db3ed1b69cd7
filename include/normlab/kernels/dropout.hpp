#pragma once
// Inverted dropout: each element is zeroed with probability p and the survivors are scaled by
// 1 / (1 - p), so the expected value is unchanged and evaluation needs no rescaling.
#include <cstdint>

#include "normlab/rng.hpp"

namespace normlab::kernels {

// mask[i] is 0 (dropped) or 1 / (1 - p) (kept), and out[i] = inp[i] * mask[i]. The mask is drawn
// serially from rng, one uniform per element in index order (element i is kept when u >= p), so a
// seed reproduces it on any thread count. p == 0 draws nothing and out is an exact copy (mask 1);
// p == 1 draws nothing and drops everything (mask 0). Throws normlab::UsageError unless 0 <= p <= 1.
void dropout_forward(float* out, float* mask,  // (N), (N)
                     const float* inp,         // (N)
                     int64_t N, float p, Rng& rng);

// ACCUMULATES (+=): dinp[i] += dout[i] * mask[i].
void dropout_backward(float* dinp,                          // (N)
                      const float* dout, const float* mask,  // (N), (N)
                      int64_t N);

}  // namespace normlab::kernels
