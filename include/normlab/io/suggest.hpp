#pragma once
// "Did you mean ...?" for every reader of names a user types (config keys, sections, choices).
#include <cstdint>
#include <string>
#include <vector>

namespace normlab::io {

// Levenshtein distance.
int64_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word`. First the names users type for ours: an alias such as
// "learning_rate", "lr_rate" (-> lr), "ln", "layer_norm" (-> layernorm), "bn", "rms", "variant",
// "seed", "step" names its target, written as the full dotted key when a candidate is one
// ("steps" -> "train.steps"). Otherwise edit distance, except that a candidate containing the word
// or contained in it ("warmup" / "warmup_steps") counts as one edit away. Empty if there is none.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);
// Only the alias step of closest(): empty when `word` is no alias (or typo of one) of a candidate.
std::string alias_of(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace normlab::io
