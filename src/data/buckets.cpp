#include "normlab/data/buckets.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "normlab/error.hpp"

namespace normlab::data {

std::string LengthBucket::label() const {
  return min_len == max_len ? std::to_string(min_len) : fmt::format("{}-{}", min_len, max_len);
}

std::vector<LengthBucket> make_length_buckets(int32_t max_len, int32_t width, int32_t train_max_len) {
  if (max_len < 1 || width < 0) {
    throw UsageError(fmt::format("make_length_buckets: max_len {} must be >= 1 and width {} >= 0", max_len, width));
  }
  if (width == 0) return {LengthBucket{1, max_len, false}};  // no length split: every length in one group
  std::vector<LengthBucket> buckets;
  for (int32_t start = 1; start <= max_len; start += width) {
    const int32_t end = std::min(max_len, start + width - 1);
    if (train_max_len >= start && train_max_len < end) {
      // Cut at the training maximum: [start, train_max] seen, [train_max + 1, end] unseen.
      buckets.push_back({start, train_max_len, false});
      buckets.push_back({train_max_len + 1, end, true});
    } else {
      buckets.push_back({start, end, train_max_len > 0 && start > train_max_len});
    }
  }
  return buckets;
}

std::vector<LengthBucket> cut_buckets_before(std::vector<LengthBucket> buckets, int32_t length) {
  const int64_t index = find_bucket(buckets, length);
  if (index < 0 || buckets[size_t(index)].min_len == length) return buckets;
  LengthBucket& below = buckets[size_t(index)];
  const LengthBucket from{length, below.max_len, below.beyond_train_max};
  below.max_len = length - 1;
  buckets.insert(buckets.begin() + index + 1, from);
  return buckets;
}

int64_t find_bucket(const std::vector<LengthBucket>& buckets, int32_t length) {
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].contains(length)) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace normlab::data
