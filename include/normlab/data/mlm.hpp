#pragma once
// Masking for masked language modelling, as in BERT (Devlin et al. 2019, section 3.1):
// each ordinary position is selected with probability 15%; a selected position becomes
//   [MASK]               80% of the time,
//   a random character   10% (uniform over the non-special ids; may equal the original, as in BERT),
//   itself, unchanged    10%,
// and its target is the original token. Positions not selected have target -1 (no loss there).
// Special tokens ([UNK]) are never selected, so the model is never asked to predict them. A line
// where no position was selected gets one selected position (uniform), so every example counts.
//
// Training draws masks from the sampler's Rng at batch time: each epoch masks differently and a run
// is still reproducible. Evaluation uses mask_examples with a fixed seed, so every evaluation of a
// checkpoint sees the same masks.
#include <cstdint>
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/data/task.hpp"
#include "normlab/data/vocab.hpp"
#include "normlab/rng.hpp"

namespace normlab::data {

struct MaskConfig {
  float select_prob = 0.15f;  // fraction of positions that get a target
  float mask_prob = 0.8f;     // of those: replaced by [MASK]
  float random_prob = 0.1f;   // of those: replaced by a random symbol; the rest stay unchanged
};

// A masked copy of `tokens` (ids of `vocab`, which must contain "[MASK]"): tokens (T), targets (T).
Example mask_tokens(const std::vector<int32_t>& tokens, const Vocab& vocab, const MaskConfig& config, Rng& rng);

// Every raw example masked with its own Rng(derive_seed(seed, i)): the result depends only on the
// seed and the example, not on batch size or order.
std::vector<Example> mask_examples(const std::vector<Example>& raw, const Task& task, const MaskConfig& config,
                                   uint64_t seed);

}  // namespace normlab::data
