#include "normlab/data/mlm.hpp"

#include <fmt/format.h>

#include "normlab/error.hpp"

namespace normlab::data {

namespace {

void check_config(const MaskConfig& config) {
  auto in_unit = [](float p) { return p >= 0.0f && p <= 1.0f; };
  if (!in_unit(config.select_prob) || !in_unit(config.mask_prob) || !in_unit(config.random_prob) ||
      config.mask_prob + config.random_prob > 1.0f) {
    throw UsageError(fmt::format("MaskConfig: probabilities out of range (select {}, mask {}, random {})",
                                 config.select_prob, config.mask_prob, config.random_prob));
  }
}

}  // namespace

Example mask_tokens(const std::vector<int32_t>& tokens, const Vocab& vocab, const MaskConfig& config, Rng& rng) {
  check_config(config);
  const int32_t mask_id = vocab.id("[MASK]");
  const int32_t first_symbol = vocab.num_specials();
  const uint32_t num_symbols = static_cast<uint32_t>(vocab.size() - vocab.num_specials());
  if (num_symbols == 0) throw UsageError("mask_tokens: the vocabulary has no ordinary symbols");

  Example masked;
  masked.tokens = tokens;
  masked.targets.assign(tokens.size(), -1);

  auto corrupt = [&](size_t i) {
    masked.targets[i] = tokens[i];
    float branch = rng.uniform();
    if (branch < config.mask_prob) {
      masked.tokens[i] = mask_id;
    } else if (branch < config.mask_prob + config.random_prob) {
      masked.tokens[i] = first_symbol + static_cast<int32_t>(rng.below(num_symbols));
    }  // else: left unchanged, but still predicted
  };

  size_t num_selected = 0;
  size_t num_candidates = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab.size()) {
      throw UsageError(fmt::format("mask_tokens: token id {} out of range [0, {})", tokens[i], vocab.size()));
    }
    if (vocab.is_special(tokens[i])) continue;
    ++num_candidates;
    if (rng.uniform() < config.select_prob) {
      corrupt(i);
      ++num_selected;
    }
  }
  if (num_selected == 0 && num_candidates > 0 && config.select_prob > 0.0f) {
    // Pick the k-th ordinary position.
    uint32_t k = rng.below(static_cast<uint32_t>(num_candidates));
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (vocab.is_special(tokens[i])) continue;
      if (k-- == 0) {
        corrupt(i);
        break;
      }
    }
  }
  return masked;
}

std::vector<Example> mask_examples(const std::vector<Example>& raw, const Task& task, const MaskConfig& config,
                                   uint64_t seed) {
  if (!task.is_masked_lm()) throw UsageError(fmt::format("mask_examples: task {} is not masked LM", task.name));
  std::vector<Example> masked;
  masked.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    Rng rng(derive_seed(seed, i));
    masked.push_back(mask_tokens(raw[i].tokens, task.input_vocab, config, rng));
  }
  return masked;
}

}  // namespace normlab::data
