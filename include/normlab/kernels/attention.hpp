#pragma once
// Multi-head self-attention over a packed batch of variable-length sequences.
//
// A batch of B sequences is stored packed: sequence b owns rows [offsets[b], offsets[b+1]) of every
// token-wise matrix, T = offsets[B] rows in all. A token attends only to the tokens of its own
// sequence, so no FLOPs go to padding, no padding can leak into a real token, and a sequence's
// result is bit-identical whatever its batch-mates are (PyTorch gets the same numbers from a padded
// batch with src_key_padding_mask marking the padding).
//
// qkv is the input projection x @ in_proj_weight^T + in_proj_bias, one row per token laid out as
// PyTorch's nn.MultiheadAttention packs it: [q (C) | k (C) | v (C)]. Head h of NH uses the columns
// [h*hd, (h+1)*hd) of each of q, k and v, hd = C / NH. For each sequence and head:
//   att = softmax(q k^T / sqrt(hd)) over the keys of that sequence,  out_h = att v
// and out holds the heads side by side, (T, C), ready for out_proj.
//
// The probability cache att stores, sequence after sequence and head after head within a sequence,
// one (len_b, len_b) row-major matrix (query row, key column): attention_cache_size floats.
#include <cstdint>

namespace normlab::kernels {

// Number of floats in the probability cache: sum over b of NH * len_b^2.
int64_t attention_cache_size(const int64_t* offsets, int64_t B, int64_t NH);  // offsets (B+1)

// Forward. att may be nullptr (inference: no cache, each thread uses its own scratch). Threaded
// over (sequence, head) pairs; each pair writes disjoint parts of out and att, so the result does
// not depend on the thread count.
void attention_forward(float* out, float* att,                     // (T, C), (attention_cache_size)
                       const float* qkv, const int64_t* offsets,  // (T, 3C), (B+1)
                       int64_t B, int64_t C, int64_t NH);

// Backward. ACCUMULATES (+=) into dqkv. att is the cache attention_forward wrote for this qkv.
void attention_backward(float* dqkv,                                // (T, 3C)
                        const float* dout, const float* qkv,        // (T, C), (T, 3C)
                        const float* att, const int64_t* offsets,   // (attention_cache_size), (B+1)
                        int64_t B, int64_t C, int64_t NH);

}  // namespace normlab::kernels
