#pragma once
// Inverted dropout: each element is zeroed with probability p and the survivors are scaled by
// 1 / (1 - p), so the expected value is unchanged and evaluation needs no rescaling.
//
// The mask is counter-based, not drawn from a sequential generator: whether an element is kept is
// a pure function of (key, global sequence index, position in the sequence, feature), where the
// key names the seed, the step and the call site (dropout_key). So a sequence draws the same mask
// whatever else is in its batch, on any thread count and kernel path, and a data-parallel rank
// holding sequences [s0, s1) of the global batch (first_sequence = s0) draws exactly the bits one
// process draws for those sequences.
#include <cstdint>

namespace normlab::kernels {

// splitmix64 (Steele, Lea and Flood, 2014): draw n (from 0) of the generator seeded with s is
// mix64(s + (n + 1) * golden). Any draw is computed directly, without the draws before it.
inline uint64_t splitmix64(uint64_t s, uint64_t n) {
  uint64_t z = s + (n + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The key of one dropout call: the seed, then the step, then the call site, folded in one at a time.
inline uint64_t dropout_key(uint64_t seed, uint64_t step, uint64_t site) {
  return splitmix64(splitmix64(splitmix64(0x64726f706f7574ULL /* "dropout" */, seed), step), site);
}

// The generator of global sequence `sequence`: draw `sequence` of the generator seeded with the key.
inline uint64_t dropout_sequence_seed(uint64_t key, int64_t sequence) { return splitmix64(key, uint64_t(sequence)); }

// The uniform in [0, 1) (24 bits, exact in float) that decides element (position, feature) of a
// sequence in a (rows, C) activation: draw index = position * C + feature of the sequence's generator.
inline float dropout_uniform(uint64_t sequence_seed, int64_t index) {
  return float(splitmix64(sequence_seed, uint64_t(index)) >> 40) * (1.0f / 16777216.0f);
}

// A packed batch x (T, C): sequence b owns rows [offsets[b], offsets[b+1]) and is sequence
// first_sequence + b of the global batch. mask is 0 (dropped) or 1 / (1 - p) (kept: u >= p, u the
// element's dropout_uniform), and out = inp * mask. p == 0 keeps everything (mask 1, out an exact
// copy); p == 1 drops everything (mask 0). Throws normlab::UsageError unless 0 <= p <= 1.
void dropout_forward(float* out, float* mask,            // (T, C), (T, C); T = offsets[B]
                     const float* inp,                   // (T, C)
                     const int64_t* offsets, int64_t B,  // (B+1)
                     int64_t C, float p, uint64_t key, int64_t first_sequence);

// ACCUMULATES (+=): dinp[i] += dout[i] * mask[i].
void dropout_backward(float* dinp,                           // (N)
                      const float* dout, const float* mask,  // (N), (N)
                      int64_t N);

}  // namespace normlab::kernels
