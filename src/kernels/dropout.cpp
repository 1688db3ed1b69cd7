#include "normlab/kernels/dropout.hpp"
#include "isa_kernels.hpp"

#include <string>

#include "normlab/error.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

void dropout_forward(float* out, float* mask, const float* inp, const int64_t* offsets, int64_t B, int64_t C, float p,
                     uint64_t key, int64_t first_sequence) {
  if (!(p >= 0.0f && p <= 1.0f)) {
    throw UsageError("dropout_forward: p must be in [0, 1], got " + std::to_string(p));
  }
  // Each element's mask is a function of its coordinates alone, so any thread may draw it.
  const float scale = 1.0f / (1.0f - p);  // inf at p == 1, where u >= p never holds
  parallel_for(B, offsets[B] * C >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; b++) {
      const uint64_t seed = dropout_sequence_seed(key, first_sequence + b);
      const int64_t begin = offsets[b] * C, end = offsets[b + 1] * C;
      for (int64_t i = begin; i < end; i++) {  // index within the sequence: position * C + feature
        mask[i] = dropout_uniform(seed, i - begin) >= p ? scale : 0.0f;
        out[i] = inp[i] * mask[i];
      }
    }
  });
}

void dropout_backward(float* dinp, const float* dout, const float* mask, int64_t N) {
  parallel_for(N, N >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) dinp[i] += dout[i] * mask[i];
  });
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
