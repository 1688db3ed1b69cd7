#pragma once
// Metrics computed from a model's logits: what training records per step and evaluation per
// sequence. They read the logits only (no graph, no kernels), in double precision.
#include <cstdint>
#include <vector>

#include "normlab/tensor.hpp"

namespace normlab::train {

// The class the model predicts for a row: the first index of the largest logit among `classes`.
int64_t argmax_row(const float* logits, int64_t classes);

// Rows of `logits` (rows, V) whose argmax is their target; rows with target -1 are skipped.
int64_t count_correct(const Tensor& logits, const std::vector<int32_t>& targets);

// Cross-entropy of one row (V logits) against `target`: log(sum exp z) - z[target], in double.
double row_cross_entropy(const float* logits, int64_t V, int32_t target);

}  // namespace normlab::train
