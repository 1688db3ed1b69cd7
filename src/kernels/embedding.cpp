#include "normlab/kernels/embedding.hpp"
#include "isa_kernels.hpp"

#include <string>

#include "normlab/error.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {
// Checked before any thread starts: an exception cannot leave an OpenMP region.
void check_ids(const char* where, const int32_t* ids, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; n++) {
    if (ids[n] < 0 || ids[n] >= V) {
      throw UsageError(std::string(where) + ": token id " + std::to_string(ids[n]) + " at position " +
                       std::to_string(n) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
}
}  // namespace

void embedding_forward(float* out, const int32_t* ids, const float* weight, int64_t N, int64_t V, int64_t C) {
  check_ids("embedding_forward", ids, N, V);
  parallel_for(N, N * C >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n++) {
      const float* row = weight + int64_t(ids[n]) * C;
      float* y = out + n * C;
      for (int64_t c = 0; c < C; c++) y[c] = row[c];
    }
  });
}

void embedding_backward(float* dweight, const float* dout, const int32_t* ids, int64_t N, int64_t V, int64_t C) {
  check_ids("embedding_backward", ids, N, V);
  const int64_t parts = parallel_parts(N * C >= kMinParallelElements);
  run_parts(parts, [&](int64_t part) {
    // Columns [c0, c1) belong to this part; each column's sum runs over tokens in order.
    const int64_t c0 = C * part / parts;
    const int64_t c1 = C * (part + 1) / parts;
    for (int64_t n = 0; n < N; n++) {
      float* drow = dweight + int64_t(ids[n]) * C;
      const float* dy = dout + n * C;
      for (int64_t c = c0; c < c1; c++) drow[c] += dy[c];
    }
  });
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
