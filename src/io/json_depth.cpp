#include "normlab/io/json_depth.hpp"

#include <fmt/format.h>

#include "normlab/error.hpp"

namespace normlab::io {

int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

void require_json_depth(std::string_view text, std::string_view where) {
  if (json_nesting_depth(text) > kMaxJsonDepth) {
    throw InputError(fmt::format("{}: JSON nested deeper than {} levels", where, kMaxJsonDepth));
  }
}

}  // namespace normlab::io
