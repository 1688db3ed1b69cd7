#include "normlab/kernels/dropout.hpp"
#include "isa_kernels.hpp"

#include <string>

#include "normlab/error.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {
// Below this many elements a loop runs on the calling thread: waking the team costs more than the
// loop (the result is the same either way: each element or row is computed on its own).
constexpr int64_t kMinParallelElements = int64_t{1} << 15;
}  // namespace

void dropout_forward(float* out, float* mask, const float* inp, int64_t N, float p, Rng& rng) {
  if (!(p >= 0.0f && p <= 1.0f)) {
    throw UsageError("dropout_forward: p must be in [0, 1], got " + std::to_string(p));
  }
  if (p == 0.0f || p == 1.0f) {
    const float fill = p == 0.0f ? 1.0f : 0.0f;
    for (int64_t i = 0; i < N; i++) mask[i] = fill;
  } else {
    // Serial on purpose: the mask must depend on the seed only, never on the thread count.
    const float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < N; i++) mask[i] = rng.uniform() >= p ? scale : 0.0f;
  }
#pragma omp parallel for schedule(static) if (N >= kMinParallelElements)
  for (int64_t i = 0; i < N; i++) out[i] = inp[i] * mask[i];
}

void dropout_backward(float* dinp, const float* dout, const float* mask, int64_t N) {
#pragma omp parallel for schedule(static) if (N >= kMinParallelElements)
  for (int64_t i = 0; i < N; i++) dinp[i] += dout[i] * mask[i];
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
