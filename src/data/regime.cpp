#include "normlab/data/regime.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "normlab/error.hpp"
#include "normlab/names.hpp"

namespace normlab::data {

namespace {

// Appends lengths drawn by draw_length while each one brings the total nearer to `tokens` than it
// was (the first always), i.e. while 2 * total + length < 2 * tokens.
template <class Draw>
std::vector<int32_t> fill_to_tokens(int64_t tokens, Draw draw_length) {
  std::vector<int32_t> lengths;
  int64_t total = 0;
  while (true) {
    const int32_t length = draw_length();
    if (!lengths.empty() && 2 * total + length >= 2 * tokens) return lengths;
    lengths.push_back(length);
    total += length;
  }
}

}  // namespace

LengthRegime parse_length_regime(const std::string& name) {
  if (const std::optional<LengthRegime> regime = value_named(kLengthRegimeNames, name)) return *regime;
  throw UsageError(fmt::format("unknown length regime '{}' (choose mixed, single, bucketed)", name));
}

std::string to_string(LengthRegime regime) { return name_in(kLengthRegimeNames, regime); }

int64_t matched_tokens_per_batch(int64_t batch_size, int32_t min_len, int32_t max_len) {
  return (batch_size * (int64_t{min_len} + max_len) + 1) / 2;
}

std::vector<int32_t> draw_regime_lengths(const RegimeOptions& options, Rng& rng) {
  const int64_t tokens = matched_tokens_per_batch(options.batch_size, options.min_len, options.max_len);
  if (options.regime == LengthRegime::single) return fill_to_tokens(tokens, [&] { return options.max_len; });
  if (options.regime != LengthRegime::bucketed)
    throw UsageError(fmt::format("draw_regime_lengths: regime {} draws its own lengths", to_string(options.regime)));
  // Buckets [min_len + k * width, ...] cut at max_len; bucket k is drawn with probability
  // (sum of its lengths) / (sum of all lengths): the share of tokens a mixed batch gives it.
  const int32_t width = std::max(1, options.bucket_width);
  const int64_t num_lengths = int64_t{options.max_len} - options.min_len + 1;
  const int64_t length_sum = num_lengths * (int64_t{options.min_len} + options.max_len) / 2;
  int64_t ticket = int64_t(rng.below(static_cast<uint32_t>(length_sum)));
  int32_t first = options.min_len;
  while (true) {
    const int32_t last = std::min(options.max_len, first + width - 1);
    const int64_t bucket_sum = int64_t(last - first + 1) * (int64_t{first} + last) / 2;
    if (ticket < bucket_sum || last == options.max_len) {
      const uint32_t count = static_cast<uint32_t>(last - first + 1);
      return fill_to_tokens(tokens, [&] { return first + static_cast<int32_t>(rng.below(count)); });
    }
    ticket -= bucket_sum;
    first = last + 1;
  }
}

}  // namespace normlab::data
