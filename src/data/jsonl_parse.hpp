#pragma once
// What the JSONL line parser (jsonl_parse.cpp) shares with the loaders (jsonl.cpp), which read
// whole files in every format; not a public interface.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/data/jsonl.hpp"
#include "normlab/data/task.hpp"

namespace normlab::data::detail {

using nlohmann::json;

// A line too long for the task: skipped and counted by a loader given LoadStats, else an InputError
// with this message.
struct OverLong {
  std::string message;
};

// The JSON value's type as a reader would name it.
std::string type_name(const json& value);
// A string from the file as JSON shows it: quoted, control characters escaped ("\u0000" cannot cut
// the message short), invalid UTF-8 replaced.
std::string json_quoted(const std::string& text);
bool is_blank(std::string_view line);
// Parses one line into an object with exactly the task's keys (label_optional: a data-defined
// task's label key may be absent, as in a file to predict).
json parse_object(std::string_view line, const Task& task, std::string_view where, bool label_optional = false);
// Data-defined tasks: a whitespace-separated string, or an array of strings (null allowed where
// `nulls`), as strings. Empty strings and strings with whitespace inside are refused.
// `options` normalizes the input text (labels are read as written).
std::vector<std::optional<std::string>> parse_words(const json& value, std::string_view where, std::string_view field,
                                                    bool nulls, const TextOptions& options);
// A per-sequence label: one word.
std::string label_string(const json& value, std::string_view where);
// OverLong for more tokens than the task's max_seq_len.
void check_length(const StringExample& example, const Task& schema, std::string_view where, std::string_view field);
// A data-defined task's object (parse_object's) as strings.
StringExample parse_string_example(const json& object, const Task& schema, std::string_view where);
// A data-defined example's strings as ids: unknown tokens are "[UNK]", unknown labels an error.
// "[PAD]" and "[UNK]" written in the data are read as "[UNK]" (never the padding id) and counted.
Example data_example(const StringExample& strings, const Task& task, std::string_view where,
                     LoadStats* stats = nullptr);
// One line as an example (OverLong for a sequence longer than the task allows).
Example parse_jsonl_object(std::string_view line, const Task& task, std::string_view where);

}  // namespace normlab::data::detail
