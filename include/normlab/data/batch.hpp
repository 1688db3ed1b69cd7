#pragma once
// Examples and packed batches of variable-length sequences.
//
// A batch is never padded. Its B sequences sit back to back in one `tokens` array, and `offsets`
// says where each one starts:
//
//   sequences:  [7 3]  [1 1 4 0 2]  [9]
//   tokens:     7 3 1 1 4 0 2 9          (T_total = 8)
//   offsets:    0 2 7 8                  (B + 1 = 4), sequence b = tokens[offsets[b], offsets[b+1])
//
// Token-wise layers run on the whole (T_total, C) matrix; attention runs on each sequence's own
// slice, so no work goes to padding and nothing can leak between sequences.
#include <cstdint>
#include <span>
#include <vector>

namespace normlab::data {

// per_token:    one class per position ("reverse": the output symbol at each position); a position
//               with nothing to predict has target -1 (e.g. unmasked positions in masked LM).
// per_sequence: one class for the whole sequence ("majority": is the sequence mostly ones?).
enum class TargetKind { per_token, per_sequence };

struct Example {
  std::vector<int32_t> tokens;   // (T) input ids, T >= 1
  std::vector<int32_t> targets;  // per_token: (T), -1 = no target; per_sequence: (1).
                                 // Raw text for masked LM: empty until masked (see mlm.hpp).
};

struct Batch {
  TargetKind target_kind = TargetKind::per_token;
  std::vector<int32_t> tokens;   // (T_total) all sequences back to back
  std::vector<int64_t> offsets;  // (B+1) offsets[0] = 0, offsets[B] = T_total
  std::vector<int32_t> targets;  // per_token: (T_total), -1 = no target; per_sequence: (B)
  int64_t num_real_tokens = 0;   // T_total; every token is real, there is no padding
  int64_t num_targets = 0;       // entries of `targets` that are not -1: the loss denominator

  int64_t batch_size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t length(int64_t b) const { return offsets[b + 1] - offsets[b]; }
  int64_t max_length() const;
  int64_t min_length() const;  // 0 for a batch without sequences
};

// Packs the examples in the given order. UsageError if an example is empty or its targets do not
// fit `kind` (per_token: one per token; per_sequence: exactly one).
Batch pack_batch(std::span<const Example* const> examples, TargetKind kind);
Batch pack_batch(const std::vector<Example>& examples, TargetKind kind);

}  // namespace normlab::data
