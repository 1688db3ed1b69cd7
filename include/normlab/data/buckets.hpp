#pragma once
// Length buckets, for reporting accuracy by sequence length. The test splits hold sequences longer
// than any training sequence; a bucket says whether it lies wholly beyond the training maximum, so a
// report can separate "seen lengths" from "length generalization".
//
//   make_length_buckets(64, 8, 20)  ->  1-8, 9-16, 17-20, 21-24*, 25-32*, ..., 57-64*
//   (* = beyond_train_max). The bucket holding train_max_len is cut there, so no bucket mixes seen
//   and unseen lengths.
#include <cstdint>
#include <string>
#include <vector>

namespace normlab::data {

struct LengthBucket {
  int32_t min_len = 1;            // inclusive
  int32_t max_len = 1;            // inclusive
  bool beyond_train_max = false;  // every length here is longer than the longest training sequence

  bool contains(int32_t length) const { return length >= min_len && length <= max_len; }
  std::string label() const;  // "9-16", or "7" for a one-length bucket
};

// Buckets of `width` lengths covering 1..max_len, with an extra boundary after train_max_len
// (train_max_len <= 0: no training maximum known, nothing is marked beyond). width 0: no length
// buckets, one bucket 1..max_len that counts as trained (task.bucket_width 0, the default for your
// own data, whose lengths are not the question). UsageError if max_len < 1 or width < 0.
std::vector<LengthBucket> make_length_buckets(int32_t max_len, int32_t width, int32_t train_max_len);

// The buckets with the one holding `length` cut just before it, so that `length` starts a bucket
// (a single-length training regime: its one trained length gets a bucket of its own, apart from the
// shorter lengths it never saw).
std::vector<LengthBucket> cut_buckets_before(std::vector<LengthBucket> buckets, int32_t length);

// Index of the bucket containing `length`, or -1.
int64_t find_bucket(const std::vector<LengthBucket>& buckets, int32_t length);

}  // namespace normlab::data
