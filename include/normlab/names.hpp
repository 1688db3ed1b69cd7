#pragma once
// Settings that are choices keep a name table beside their enum, {{E::a, "a"}, {E::b, "b"}, ...}
// (nn::kPlacementNames, optim::kOptimizerNames, data::kTaskNames, ...): the config parser, to_string
// and error messages all read it, through these two lookups.
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

namespace normlab {

// The name `table` gives `value`; "?" for a value it does not list.
template <class E, size_t N>
const char* name_in(const std::pair<E, const char*> (&table)[N], E value) {
  for (const auto& [entry, name] : table)
    if (entry == value) return name;
  return "?";
}

// The value `table` names `name`, or nullopt.
template <class E, size_t N>
std::optional<E> value_named(const std::pair<E, const char*> (&table)[N], std::string_view name) {
  for (const auto& [entry, text] : table)
    if (name == text) return entry;
  return std::nullopt;
}

}  // namespace normlab
