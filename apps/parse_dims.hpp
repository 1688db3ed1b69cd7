#pragma once
// "--shape 64,128,768": a fixed number of positive integers separated by commas, for the bench
// subcommands. Errors are one InputError line naming the option, the text and what was expected.
#include <fmt/core.h>

#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/error.hpp"

namespace normlab::cli {

// `expected` describes the dimensions for the message, e.g. "three positive integers B,T,C like
// 64,128,768". Every value must be in [1, max_value].
inline std::vector<int64_t> parse_dims(const std::string& text, const char* option, size_t count, const char* expected,
                                       int64_t max_value) {
  auto bad = [&](const std::string& why) {
    return InputError(fmt::format("{}: {} (got \"{}\", expected {})", option, why, text, expected));
  };
  std::vector<int64_t> dims;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string field = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (field.empty() || ec != std::errc() || end != field.data() + field.size()) {
      throw bad(fmt::format("\"{}\" is not an integer", field));
    }
    if (value <= 0) throw bad(fmt::format("{} is not positive", value));
    if (value > max_value) throw bad(fmt::format("{} is too large", value));
    dims.push_back(value);
    if (comma == std::string::npos) break;
    if (dims.size() == count) throw bad(fmt::format("more than {} dimensions", count));
    start = comma + 1;
  }
  if (dims.size() != count) throw bad(fmt::format("{} dimensions", dims.size()));
  return dims;
}

}  // namespace normlab::cli
