// Ties and boundaries of computed rules, checked exhaustively over small inputs against the rule
// written out here: the length buckets' cut at the longest training length (a length never trained
// on is never reported as seen, a trained one never as unseen) and the majority task's label
// (the more frequent bit; a tie goes to the first token).
#include <doctest/doctest.h>

#include <vector>

#include "normlab/data/buckets.hpp"
#include "normlab/data/task.hpp"

using namespace normlab::data;

TEST_CASE(
    "boundaries: every length lands in one bucket, marked unseen exactly when longer than the longest trained length") {
  for (int32_t max_len = 1; max_len <= 14; ++max_len)
    for (int32_t width = 1; width <= 6; ++width)
      for (int32_t train_max = 0; train_max <= max_len + 1; ++train_max) {
        INFO("max_len " << max_len << " width " << width << " train_max " << train_max);
        const std::vector<LengthBucket> buckets = make_length_buckets(max_len, width, train_max);
        // Contiguous from 1 to max_len, in order, none empty.
        REQUIRE(!buckets.empty());
        CHECK(buckets.front().min_len == 1);
        CHECK(buckets.back().max_len == max_len);
        for (size_t i = 0; i < buckets.size(); ++i) {
          CHECK(buckets[i].min_len <= buckets[i].max_len);
          if (i > 0) CHECK(buckets[i].min_len == buckets[i - 1].max_len + 1);
        }
        for (int32_t length = 1; length <= max_len; ++length) {
          const int64_t index = find_bucket(buckets, length);
          REQUIRE(index >= 0);
          // train_max 0: unknown, so nothing is claimed to be beyond it.
          CHECK(buckets[size_t(index)].beyond_train_max == (train_max > 0 && length > train_max));
        }
        CHECK(find_bucket(buckets, 0) == -1);
        CHECK(find_bucket(buckets, max_len + 1) == -1);
      }
  // The case that must cut: the longest trained length is a bucket's first length.
  const std::vector<LengthBucket> cut = make_length_buckets(12, 4, 5);  // 1-4, 5, 6-8*, 9-12*
  REQUIRE(cut.size() == 4);
  CHECK(cut[1].label() == "5");
  CHECK(!cut[1].beyond_train_max);
  CHECK(cut[2].label() == "6-8");
  CHECK(cut[2].beyond_train_max);
}

TEST_CASE(
    "boundaries: majority labels every 0/1 sequence up to length 10 by the more frequent bit, a tie by the first "
    "token") {
  const Task task = make_task("majority");
  const int32_t one = task.input_vocab.id("1"), zero = task.input_vocab.id("0");
  int ties = 0;
  for (int length = 1; length <= 10; ++length)
    for (uint32_t bits = 0; bits < (1u << length); ++bits) {
      std::vector<int32_t> tokens;
      int ones = 0;
      for (int i = 0; i < length; ++i) {
        const bool is_one = (bits >> i) & 1u;
        tokens.push_back(is_one ? one : zero);
        ones += is_one;
      }
      const int zeros = length - ones;
      const bool label_one = ones > zeros || (ones == zeros && tokens[0] == one);
      ties += ones == zeros;
      const std::vector<int32_t> targets = compute_targets(task, tokens);
      REQUIRE(targets.size() == 1);
      INFO("length " << length << " ones " << ones);
      CHECK(task.output_vocab.token(targets[0]) == (label_one ? "1" : "0"));
    }
  CHECK(ties > 0);
}
