#pragma once
// Token embedding lookup: row n of out is row ids[n] of the (V, C) table. Ids are int32_t (a
// vocabulary never needs more), one per packed token.
#include <cstdint>

namespace normlab::kernels {

// Throws normlab::UsageError if an id is outside [0, V).
void embedding_forward(float* out,                               // (N, C)
                       const int32_t* ids, const float* weight,  // (N), (V, C)
                       int64_t N, int64_t V, int64_t C);

// ACCUMULATES (+=): dweight[ids[n]] += dout[n]. Threaded over column blocks, each thread walking
// the tokens in order, so every row of dweight sums its tokens in token order: bit-identical for
// any thread count. Throws normlab::UsageError if an id is outside [0, V).
void embedding_backward(float* dweight,                         // (V, C)
                        const float* dout, const int32_t* ids,  // (N, C), (N)
                        int64_t N, int64_t V, int64_t C);

}  // namespace normlab::kernels
