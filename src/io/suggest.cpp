#include "normlab/io/suggest.hpp"

#include <algorithm>
#include <cctype>
#include <utility>
#include <limits>

#include "normlab/nn/norm_registry.hpp"
#include "normlab/nn/residual_registry.hpp"

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

namespace {

// Names users type for what normlab calls otherwise: PyTorch's and common spellings.
const std::vector<std::pair<std::string, std::string>>& aliases() {
  static const std::vector<std::pair<std::string, std::string>> table = [] {
    std::vector<std::pair<std::string, std::string>> all = {{"learning_rate", "lr"},  {"lr_rate", "lr"},
                                                            {"learningrate", "lr"},   {"variant", "variants"},
                                                            {"seed", "seeds"},        {"step", "steps"},
                                                            {"num_steps", "steps"},   {"max_steps", "steps"},
                                                            {"norm_type", "norm"},    {"n_layers", "layers"},
                                                            {"num_layers", "layers"}, {"n_heads", "heads"},
                                                            {"num_heads", "heads"},   {"batchsize", "batch_size"}};
    // Each normalization's own spellings ("ln", "rms_norm"), from its registry entry.
    for (const nn::NormEntry& entry : nn::norm_registry())
      for (const std::string& alias : entry.spec.aliases) all.emplace_back(alias, entry.spec.name);
    for (const nn::ResidualEntry& entry : nn::residual_registry())
      for (const std::string& alias : entry.spec.aliases) all.emplace_back(alias, entry.spec.name);
    return all;
  }();
  return table;
}

}  // namespace

// The candidate an alias of `word` names: the same prefix with the alias's target ("optim.learning_rate" ->
// "optim.lr"), else the full dotted key ending in it ("steps" -> "train.steps"), else the target itself.
std::string alias_of(const std::string& word, const std::vector<std::string>& candidates) {
  std::string lower;
  for (char c : word) lower += c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t dot = lower.rfind('.');
  const std::string prefix = dot == std::string::npos ? "" : lower.substr(0, dot + 1);
  const std::string last = dot == std::string::npos ? lower : lower.substr(dot + 1);
  auto has = [&](const std::string& c) {
    return std::find(candidates.begin(), candidates.end(), c) != candidates.end();
  };
  for (const std::string& target : {last, std::string()}) {  // the word itself, then its alias
    std::string name = target;
    if (name.empty()) {
      for (const auto& [alias, canonical] : aliases()) {
        // A typo in a long alias ("learnig_rate") still names it.
        if (last == alias || (alias.size() >= 6 && edit_distance(last, alias) <= 2)) {
          name = canonical;
          break;
        }
      }
      if (name.empty()) return "";
    }
    if (!prefix.empty() && has(prefix + name)) return prefix + name;
    if (prefix.empty()) {
      for (const std::string& c : candidates)
        if (c.size() > name.size() && c.compare(c.size() - name.size(), name.size(), name) == 0 &&
            c[c.size() - name.size() - 1] == '.')
          return c;
    }
    if (has(name)) return name;
    if (!prefix.empty()) {
      for (const std::string& c : candidates)
        if (c.size() > name.size() && c.compare(c.size() - name.size(), name.size(), name) == 0 &&
            c[c.size() - name.size() - 1] == '.')
          return c;
    }
  }
  return "";
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  if (std::string aliased = alias_of(word, candidates); !aliased.empty() && aliased != word) return aliased;
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
