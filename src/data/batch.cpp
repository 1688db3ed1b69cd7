#include "normlab/data/batch.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "normlab/error.hpp"

namespace normlab::data {

int64_t Batch::max_length() const {
  int64_t longest = 0;
  for (int64_t b = 0; b < batch_size(); ++b) longest = std::max(longest, length(b));
  return longest;
}

int64_t Batch::min_length() const {
  if (batch_size() <= 0) return 0;
  int64_t shortest = length(0);
  for (int64_t b = 1; b < batch_size(); ++b) shortest = std::min(shortest, length(b));
  return shortest;
}

Batch pack_batch(std::span<const Example* const> examples, TargetKind kind) {
  if (examples.empty()) throw UsageError("pack_batch: no examples");
  Batch batch;
  batch.target_kind = kind;
  size_t total_tokens = 0;
  for (size_t b = 0; b < examples.size(); ++b) {
    const Example& example = *examples[b];
    if (example.tokens.empty()) throw UsageError(fmt::format("pack_batch: example {} has no tokens", b));
    size_t expected_targets = kind == TargetKind::per_token ? example.tokens.size() : 1;
    if (example.targets.size() != expected_targets) {
      throw UsageError(fmt::format("pack_batch: example {} has {} targets, expected {} ({})", b, example.targets.size(),
                                   expected_targets,
                                   kind == TargetKind::per_token ? "one per token" : "one per sequence"));
    }
    total_tokens += example.tokens.size();
  }
  batch.tokens.reserve(total_tokens);
  batch.targets.reserve(kind == TargetKind::per_token ? total_tokens : examples.size());
  batch.offsets.reserve(examples.size() + 1);
  batch.offsets.push_back(0);
  for (const Example* example : examples) {
    batch.tokens.insert(batch.tokens.end(), example->tokens.begin(), example->tokens.end());
    batch.targets.insert(batch.targets.end(), example->targets.begin(), example->targets.end());
    batch.offsets.push_back(static_cast<int64_t>(batch.tokens.size()));
  }
  batch.num_real_tokens = static_cast<int64_t>(batch.tokens.size());
  batch.num_targets = std::count_if(batch.targets.begin(), batch.targets.end(), [](int32_t t) { return t != -1; });
  return batch;
}

Batch pack_batch(const std::vector<Example>& examples, TargetKind kind) {
  std::vector<const Example*> pointers;
  pointers.reserve(examples.size());
  for (const Example& example : examples) pointers.push_back(&example);
  return pack_batch(std::span<const Example* const>(pointers), kind);
}

}  // namespace normlab::data
