#pragma once
// "Did you mean ...?" for every reader of names a user types (config keys, sections, choices).
#include <cstdint>
#include <string>
#include <vector>

namespace normlab::io {

// Levenshtein distance.
int64_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word`: edit distance, except that a candidate containing the word or
// contained in it ("warmup" / "warmup_steps") counts as one edit away. Empty if there is none.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace normlab::io
