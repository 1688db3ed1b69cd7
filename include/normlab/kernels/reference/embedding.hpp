#pragma once
// Token embedding, the plain version: row n of out is row ids[n] of the (V, C) table, and the
// backward adds row n of dout into row ids[n] of dweight, token after token. Same contract as
// kernels/embedding.hpp (throws normlab::UsageError for an id outside [0, V)).
#include <cstdint>

namespace normlab::kernels::reference {

void embedding_forward(float* out,                               // (N,C)
                       const int32_t* ids, const float* weight,  // (N), (V,C)
                       int64_t N, int64_t V, int64_t C);

// ACCUMULATES (+=) into dweight.
void embedding_backward(float* dweight,                         // (V,C)
                        const float* dout, const int32_t* ids,  // (N,C), (N)
                        int64_t N, int64_t V, int64_t C);

}  // namespace normlab::kernels::reference
