#pragma once
// What the two registries (nn/norm_registry.hpp, nn/residual_registry.hpp) do alike: find an entry by its
// spec's name, list the names in registry order.
#include <string>
#include <vector>

namespace normlab::nn {

template <class Entry>
const Entry* find_entry(const std::vector<Entry>& registry, const std::string& name) {
  for (const Entry& entry : registry)
    if (entry.spec.name == name) return &entry;
  return nullptr;
}

template <class Entry>
std::vector<std::string> entry_names(const std::vector<Entry>& registry) {
  std::vector<std::string> names;
  for (const Entry& entry : registry) names.push_back(entry.spec.name);
  return names;
}

}  // namespace normlab::nn
