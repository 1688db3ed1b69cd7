#pragma once
// Strict JSON for every file a user hands normlab (configs, compare configs, data lines, checkpoint
// headers and metadata). nlohmann::json keeps the last of repeated keys silently; a repeated key in
// a config or a checkpoint is a mistake, so it is reported. Its parse callback, the obvious way to
// see keys, rescans the parent container after every element (time quadratic in an array's length:
// a 1 MiB array of `{}` took half a minute); this parser builds the value through the SAX interface
// instead, so every parse is linear in the text's length.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace normlab::io {

// Parses `text` (no NUL or depth check: callers word those errors themselves) in linear time.
// A syntax error, or a number too large for a double, throws nlohmann::json::exception like
// json::parse. *duplicate_key_path receives the object keys leading to the first repeated key
// (["model", "lr"] for a second "lr" in "model"), and stays empty if no key repeats.
nlohmann::json parse_json_linear(std::string_view text, std::vector<std::string>* duplicate_key_path);

// A whole JSON document from a user: InputError "<where>: invalid JSON: contains a NUL byte",
// "<where>: JSON nested deeper than 64 levels", "<where>: invalid JSON: parse error at line 3,
// column 5: ..." or "<where>: model.lr: duplicate key".
nlohmann::json parse_strict(std::string_view text, std::string_view where);

// nlohmann's exception text without its "[json.exception.parse_error.101] " tag.
std::string json_error_message(const nlohmann::json::exception& error);

}  // namespace normlab::io
