#pragma once
// Multi-head self-attention on a packed batch, the plain version: one sequence, one head, one
// query row at a time. Sequence b owns rows [offsets[b], offsets[b+1]) of the T packed rows and
// attends only to itself. qkv rows are [q (C) | k (C) | v (C)]; head h uses columns
// [h*hd, (h+1)*hd) of each, hd = C / NH. For each sequence and head:
//   att = softmax(q k^T / sqrt(hd)),  out_h = att v
// att is the whole probability matrix, unlike the fast kernel's row statistics: per sequence, per
// head, a (len, len) row-major matrix (query row, key column); attention_cache_size gives its size.
#include <cstdint>

#include "normlab/kernels/grad_out.hpp"

namespace normlab::kernels::reference {

// Number of floats in the probability cache: sum over b of NH * len_b^2.
int64_t attention_cache_size(const int64_t* offsets, int64_t B, int64_t NH);  // offsets (B+1)

// att may be nullptr (inference).
void attention_forward(float* out, float* att,                    // (T,C), (sum_b NH*len_b^2)
                       const float* qkv, const int64_t* offsets,  // (T,3C), (B+1)
                       int64_t B, int64_t C, int64_t NH);

// ACCUMULATES (+=) into dqkv, or overwrites it (grad_out.hpp). att is what attention_forward wrote.
void attention_backward(GradOut dqkv_out,                          // (T,3C)
                        const float* dout, const float* qkv,       // (T,C), (T,3C)
                        const float* att, const int64_t* offsets,  // (sum_b NH*len_b^2), (B+1)
                        int64_t B, int64_t C, int64_t NH);

}  // namespace normlab::kernels::reference
