#pragma once
// Helpers shared by the study sources (not a public interface).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "normlab/error.hpp"

namespace normlab::study::detail {

[[noreturn]] inline void fail(const std::string& where, const std::string& key, const std::string& what) {
  throw InputError(fmt::format("{}: {}: {}", where, key, what));
}

// Sets a dotted key ("optim.lr") in a config object.
inline void set_path(nlohmann::json& config, const std::string& dotted, const nlohmann::json& value,
                     const std::string& where) {
  const auto dot = dotted.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == dotted.size())
    fail(where, "set", fmt::format("'{}' is not of the form section.key", dotted));
  nlohmann::json& section = config[dotted.substr(0, dot)];
  if (!section.is_object()) section = nlohmann::json::object();
  section[dotted.substr(dot + 1)] = value;
}

inline std::string format_lr(double lr) { return fmt::format("{:g}", lr); }

// A config value as it appears in run names and labels: numbers in %g, strings as they are.
inline std::string value_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  return v.dump();
}

}  // namespace normlab::study::detail
