#include "normlab/train/metrics.hpp"

#include <fmt/format.h>

#include <cmath>

#include "normlab/error.hpp"

namespace normlab::train {

int64_t argmax_row(const float* logits, int64_t classes) {
  int64_t best = 0;
  for (int64_t v = 1; v < classes; ++v) {
    if (logits[v] > logits[best]) best = v;
  }
  return best;
}

int64_t count_correct(const Tensor& logits, const std::vector<int32_t>& targets) {
  const int64_t rows = logits.size(0), V = logits.size(1);
  if (static_cast<int64_t>(targets.size()) != rows) {
    throw UsageError(fmt::format("count_correct: {} targets for {} rows", targets.size(), rows));
  }
  const float* values = logits.data();
  int64_t correct = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const int32_t target = targets[size_t(row)];
    if (target < 0) continue;
    if (argmax_row(values + row * V, V) == target) ++correct;
  }
  return correct;
}

double row_cross_entropy(const float* logits, int64_t V, int32_t target) {
  double largest = -INFINITY;
  for (int64_t v = 0; v < V; ++v) largest = std::max(largest, double(logits[v]));
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(double(logits[v]) - largest);
  return std::log(sum) - (double(logits[target]) - largest);
}

}  // namespace normlab::train
