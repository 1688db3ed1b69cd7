#include "normlab/io/suggest.hpp"

#include <algorithm>
#include <limits>

namespace normlab::io {

int64_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<int64_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int64_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  int64_t best_distance = std::numeric_limits<int64_t>::max();
  for (const std::string& candidate : candidates) {
    const bool contains =
        !word.empty() && (candidate.find(word) != std::string::npos || word.find(candidate) != std::string::npos);
    int64_t d = contains ? std::min<int64_t>(1, edit_distance(word, candidate)) : edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace normlab::io
