#include "normlab/kernels/reference/dropout.hpp"

#include <string>

#include "normlab/error.hpp"
#include "normlab/kernels/dropout.hpp"

namespace normlab::kernels::reference {

void dropout_forward(float* out, float* mask, const float* inp, const int64_t* offsets, int64_t B, int64_t C, float p,
                     uint64_t key, int64_t first_sequence) {
  if (!(p >= 0.0f && p <= 1.0f)) throw UsageError("dropout_forward: p must be in [0, 1], got " + std::to_string(p));
  const float scale = 1.0f / (1.0f - p);  // inf at p == 1, where u >= p never holds
  for (int64_t b = 0; b < B; b++) {
    // the mask of a sequence depends on its index in the global batch, not on its neighbours
    const uint64_t seed = dropout_sequence_seed(key, first_sequence + b);
    for (int64_t t = offsets[b]; t < offsets[b + 1]; t++)
      for (int64_t c = 0; c < C; c++) {
        const int64_t i = t * C + c;
        const float u = dropout_uniform(seed, (t - offsets[b]) * C + c);  // position * C + feature
        mask[i] = u >= p ? scale : 0.0f;
        out[i] = inp[i] * mask[i];
      }
  }
}

void dropout_backward(float* dinp, const float* dout, const float* mask, int64_t N) {
  for (int64_t i = 0; i < N; i++) dinp[i] += dout[i] * mask[i];
}

}  // namespace normlab::kernels::reference
