#pragma once
// How a global batch is cut between ranks: contiguous runs of whole sequences with about the same
// number of TOKENS each (tokens, not sequences, set the compute of a packed batch).
//
//   sequences (lengths):  5 1 1 1 4 4     2 ranks, 16 tokens: target 8 per rank
//   boundaries:           0 4 6           rank 0: sequences [0, 4) = 8 tokens, rank 1: [4, 6) = 8
//
// Every rank gets at least one sequence when the batch has at least as many sequences as there
// are ranks; otherwise the last ranks get none (they still join every collective).
#include <cstdint>
#include <span>
#include <vector>

#include "normlab/data/batch.hpp"

namespace normlab::dist {

// offsets (B+1) as in data::Batch -> boundaries (parts+1) in sequence indices: boundaries[0] = 0,
// boundaries[parts] = B, non-decreasing; part p holds sequences [boundaries[p], boundaries[p+1]).
// Boundary k is the sequence boundary whose token prefix is nearest to k * T / parts (ties to the
// earlier one), kept inside the range that leaves every part non-empty when B >= parts.
std::vector<int64_t> balanced_split(std::span<const int64_t> offsets, int parts);

// Sequences [first, last) of `batch` as a batch of their own (targets and counts recomputed).
data::Batch sub_batch(const data::Batch& batch, int64_t first, int64_t last);

}  // namespace normlab::dist
