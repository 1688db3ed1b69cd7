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
// The (len, len) probabilities of long sequences are never stored (flash attention's way;
// src/kernels/attention.cpp explains the blocking). What the forward keeps for the backward, att,
// starts with two floats per token and head, head-major (so threads working on two heads of one
// sequence never write one cache line): att[(h * T + t) * 2 + 0] = the largest raw score
// q_t . k_j of row t (unscaled), and att[(h * T + t) * 2 + 1] = 1 / sum_j exp((q_t . k_j - max) /
// sqrt(hd)), T = offsets[B]. The backward recomputes the probabilities from them, bit for bit.
// Sequences of at most kAttentionKeptExpsMaxLength (256) tokens also keep their exponentials
// e_ij = exp((q_i . k_j - max_i) / sqrt(hd)): after the statistics (rounded up to 16 floats),
// sequence by sequence, each head's (L, Lp) matrix with Lp = L rounded up to 16 (zero past L). For
// them the backward reads e instead of recomputing q k^T and its exponentials. Memory: 2 * T * NH
// floats plus at most 256 * NH per token of a short sequence, linear in the lengths.
// (The reference kernels in kernels/reference/attention.hpp keep the whole matrices instead.)
#include <cstdint>

#include "normlab/kernels/grad_out.hpp"

namespace normlab::kernels {

// Sequences up to this many tokens keep their exponentials for the backward (above).
inline constexpr int64_t kAttentionKeptExpsMaxLength = 256;

// Number of floats in the cache: 2 * offsets[B] * NH of row statistics (rows before offsets[0]
// included, so a row's statistics sit at its token index within each head's block), then the
// exponentials of the sequences of at most kAttentionKeptExpsMaxLength tokens (above).
int64_t attention_cache_size(const int64_t* offsets, int64_t B, int64_t NH);  // offsets (B+1)

// Forward. att may be nullptr (inference: no cache, each thread uses its own scratch). Threaded
// over (sequence, head) pairs; each pair writes disjoint parts of out and att, so the result does
// not depend on the thread count.
void attention_forward(float* out, float* att,                    // (T, C), (attention_cache_size)
                       const float* qkv, const int64_t* offsets,  // (T, 3C), (B+1)
                       int64_t B, int64_t C, int64_t NH);

// Backward. ACCUMULATES (+=) into dqkv, or overwrites it (grad_out.hpp). att is the cache
// attention_forward wrote for this qkv. Threaded over (sequence, head) pairs, each storing into
// its own rows and columns of dqkv.
void attention_backward(GradOut dqkv,                              // (T, 3C)
                        const float* dout, const float* qkv,       // (T, C), (T, 3C)
                        const float* att, const int64_t* offsets,  // (attention_cache_size), (B+1)
                        int64_t B, int64_t C, int64_t NH);

}  // namespace normlab::kernels
