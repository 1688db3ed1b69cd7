#pragma once
// The length regime of generated training batches: how the lengths of one batch are chosen, with the
// number of tokens per batch matched across regimes (docs/config.md, task.length_regime).
//
//   mixed     batch_size sequences, each length uniform in [min_len, max_len] (every batch mixes
//             lengths; T tokens on average)
//   single    every sequence has length max_len; as many as bring the batch nearest to T tokens
//   bucketed  one bucket of bucket_width consecutive lengths per batch (drawn in proportion to the
//             tokens it holds), lengths uniform inside it, sequences added while they bring the
//             batch nearer to T tokens
//
// T = batch_size * (min_len + max_len) / 2, the mean token count of a mixed batch. Bucketed batches
// see each length as often as mixed ones do, in expectation; single batches see only max_len.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "normlab/rng.hpp"

namespace normlab::data {

enum class LengthRegime { mixed, single, bucketed };
inline constexpr std::pair<LengthRegime, const char*> kLengthRegimeNames[] = {{LengthRegime::mixed, "mixed"},
                                                                              {LengthRegime::single, "single"},
                                                                              {LengthRegime::bucketed, "bucketed"}};

// "mixed" | "single" | "bucketed"; UsageError naming the choices otherwise.
LengthRegime parse_length_regime(const std::string& name);
std::string to_string(LengthRegime regime);

// T above, rounded half up.
int64_t matched_tokens_per_batch(int64_t batch_size, int32_t min_len, int32_t max_len);

struct RegimeOptions {
  LengthRegime regime = LengthRegime::mixed;
  int64_t batch_size = 32;
  int32_t min_len = 1;
  int32_t max_len = 32;
  int32_t bucket_width = 8;  // bucketed only
};

// The lengths of the next batch of a single or bucketed regime, drawn from rng (mixed batches draw
// their lengths interleaved with their examples: GeneratorSampler keeps that order).
std::vector<int32_t> draw_regime_lengths(const RegimeOptions& options, Rng& rng);

}  // namespace normlab::data
