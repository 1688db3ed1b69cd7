#pragma once
// A bound on how deeply user-supplied JSON may nest. nlohmann::json parses any depth, but dump(),
// comparison and copying of a parsed value recurse once per level: a few hundred thousand `[`
// (well inside the size limits of a config file or a safetensors header) overflow the stack. No
// file normlab reads nests deeper than 5 levels, so everything is checked against
// kMaxJsonDepth before it is parsed.
#include <string>
#include <string_view>

namespace normlab::io {

inline constexpr int kMaxJsonDepth = 64;

// The deepest nesting of [ and { in `text`, brackets inside strings not counted. A plain scan: it
// does not validate the JSON (the parser does that afterwards).
int json_nesting_depth(std::string_view text);

// InputError "<where>: JSON nested deeper than 64 levels" when json_nesting_depth(text) > kMaxJsonDepth.
void require_json_depth(std::string_view text, std::string_view where);

}  // namespace normlab::io
