#include "normlab/dist/split.hpp"

#include <algorithm>
#include <cstdlib>

#include "normlab/error.hpp"

namespace normlab::dist {

std::vector<int64_t> balanced_split(std::span<const int64_t> offsets, int parts) {
  if (parts < 1 || offsets.empty()) throw UsageError("balanced_split: needs parts >= 1 and offsets (B+1)");
  const int64_t B = static_cast<int64_t>(offsets.size()) - 1;
  const int64_t total = offsets[size_t(B)];
  std::vector<int64_t> boundaries(size_t(parts) + 1, B);
  boundaries[0] = 0;
  for (int k = 1; k < parts; ++k) {
    // The target is k/parts of the tokens, in exact integer arithmetic: prefix * parts vs k * total.
    const int64_t previous = boundaries[size_t(k) - 1];
    // With B >= parts, leave at least one sequence for each part: boundary k in [previous + 1, B - (parts - k)].
    const int64_t low = B >= parts ? previous + 1 : previous;
    const int64_t high = B >= parts ? B - (parts - k) : B;
    int64_t best = low;
    for (int64_t i = low; i <= high; ++i) {
      const int64_t distance = std::llabs(offsets[size_t(i)] * parts - int64_t(k) * total);
      const int64_t best_distance = std::llabs(offsets[size_t(best)] * parts - int64_t(k) * total);
      if (distance < best_distance) best = i;
      if (offsets[size_t(i)] * parts >= int64_t(k) * total) break;  // prefixes only grow from here
    }
    boundaries[size_t(k)] = best;
  }
  return boundaries;
}

data::Batch sub_batch(const data::Batch& batch, int64_t first, int64_t last) {
  if (first < 0 || last < first || last > batch.batch_size()) throw UsageError("sub_batch: bad sequence range");
  data::Batch out;
  out.target_kind = batch.target_kind;
  const int64_t token_begin = batch.offsets[size_t(first)], token_end = batch.offsets[size_t(last)];
  out.tokens.assign(batch.tokens.begin() + token_begin, batch.tokens.begin() + token_end);
  out.offsets.reserve(size_t(last - first) + 1);
  for (int64_t b = first; b <= last; ++b) out.offsets.push_back(batch.offsets[size_t(b)] - token_begin);
  if (batch.target_kind == data::TargetKind::per_token) {
    out.targets.assign(batch.targets.begin() + token_begin, batch.targets.begin() + token_end);
  } else {
    out.targets.assign(batch.targets.begin() + first, batch.targets.begin() + last);
  }
  out.num_real_tokens = token_end - token_begin;
  out.num_targets = std::count_if(out.targets.begin(), out.targets.end(), [](int32_t t) { return t != -1; });
  return out;
}

}  // namespace normlab::dist
