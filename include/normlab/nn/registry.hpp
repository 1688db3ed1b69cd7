#pragma once
// What the two registries (nn/norm_registry.hpp, nn/residual_registry.hpp) do alike: find an entry by its
// spec's name, list the names in registry order.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "normlab/error.hpp"

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

// The entry named `name`, or UsageError "unknown WHAT 'NAME' (choose a, b, c)".
template <class Entry>
const Entry* require_entry(const std::vector<Entry>& registry, const std::string& name, const char* what) {
  const Entry* entry = find_entry(registry, name);
  if (entry == nullptr)
    throw UsageError(fmt::format("unknown {} '{}' (choose {})", what, name, fmt::join(entry_names(registry), ", ")));
  return entry;
}

}  // namespace normlab::nn
