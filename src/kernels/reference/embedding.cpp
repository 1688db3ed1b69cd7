#include "normlab/kernels/reference/embedding.hpp"

#include <fmt/format.h>

#include "normlab/error.hpp"

namespace normlab::kernels::reference {

namespace {
void check_id(const char* where, int32_t id, int64_t n, int64_t V) {
  if (id < 0 || id >= V)
    throw UsageError(fmt::format("{}: token id {} at position {} is outside the vocabulary [0, {})", where, id, n, V));
}
}  // namespace

void embedding_forward(float* out, const int32_t* ids, const float* weight, int64_t N, int64_t V, int64_t C) {
  for (int64_t n = 0; n < N; n++) {
    check_id("embedding_forward", ids[n], n, V);
    for (int64_t c = 0; c < C; c++) out[n * C + c] = weight[ids[n] * C + c];  // out[n] = weight[ids[n]]
  }
}

void embedding_backward(float* dweight, const float* dout, const int32_t* ids, int64_t N, int64_t V, int64_t C) {
  for (int64_t n = 0; n < N; n++) {
    check_id("embedding_backward", ids[n], n, V);
    for (int64_t c = 0; c < C; c++) dweight[ids[n] * C + c] += dout[n * C + c];  // tokens in order
  }
}

}  // namespace normlab::kernels::reference
