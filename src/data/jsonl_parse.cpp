// One JSONL line as an example (the schemas: include/normlab/data/jsonl.hpp): the strict checks
// of the object and its keys, a built-in task's symbols and classes, a data-defined task's words
// and labels. The loaders that read whole files, in every format, are in jsonl.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "jsonl_parse.hpp"
#include "normlab/data/formats.hpp"
#include "normlab/data/jsonl.hpp"
#include "normlab/error.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/io/json_strict.hpp"

namespace normlab::data {

using namespace detail;  // the shared pieces (jsonl_parse.hpp)

namespace {

using nlohmann::json;

// The keys each kind of example has, in the order they are written.
std::vector<std::string> expected_keys(const Task& task) {
  if (task.is_masked_lm()) return {"text"};
  if (task.is_data_defined()) return {text_field_of(task, FileFormat::jsonl), label_field_of(task, FileFormat::jsonl)};
  if (task.target_kind == TargetKind::per_sequence) return {"tokens", "label"};
  return {"tokens", "targets"};
}

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += fmt::format("{}\"{}\"", i > 0 ? ", " : "", keys[i]);
  return out;
}

std::string joined(const std::vector<std::string>& symbols) {
  std::string out;
  for (size_t i = 0; i < symbols.size(); ++i) out += (i > 0 ? " " : "") + symbols[i];
  return out;
}

bool has_space(const std::string& s) { return s.find_first_of(" \t\n\r\f\v") != std::string::npos; }

std::vector<int32_t> parse_tokens(const json& tokens, const Task& task, std::string_view where) {
  if (!tokens.is_array()) {
    throw InputError(fmt::format("{}: tokens: expected an array of strings, got {}", where, type_name(tokens)));
  }
  if (tokens.empty()) throw InputError(fmt::format("{}: tokens: empty sequence", where));
  if (tokens.size() > static_cast<size_t>(task.max_seq_len)) {
    throw OverLong{fmt::format("{}: tokens: {} symbols, more than the limit of {} for task {}", where, tokens.size(),
                               task.max_seq_len, task.name)};
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const json& symbol = tokens[i];
    if (!symbol.is_string()) {
      throw InputError(fmt::format("{}: tokens[{}]: expected a string, got {}", where, i, type_name(symbol)));
    }
    auto id = task.input_vocab.find(symbol.get<std::string>());
    if (!id) {
      throw InputError(fmt::format("{}: tokens[{}]: unknown symbol {} for task {} (known: {})", where, i,
                                   json_quoted(symbol.get<std::string>()), task.name,
                                   joined(task.input_vocab.tokens())));
    }
    ids.push_back(*id);
  }
  return ids;
}

int32_t parse_class(const json& value, const Task& task, std::string_view where, std::string_view field) {
  if (!value.is_string()) {
    throw InputError(fmt::format("{}: {}: expected a string, got {}", where, field, type_name(value)));
  }
  auto id = task.output_vocab.find(value.get<std::string>());
  if (!id) {
    throw InputError(fmt::format("{}: {}: unknown class {} for task {} (classes: {})", where, field,
                                 json_quoted(value.get<std::string>()), task.name, joined(task.output_vocab.tokens())));
  }
  return *id;
}

std::vector<int32_t> parse_text(const json& text, const Task& task, std::string_view where) {
  if (!text.is_string()) throw InputError(fmt::format("{}: text: expected a string, got {}", where, type_name(text)));
  const std::string& value = text.get_ref<const std::string&>();
  if (value.empty()) throw InputError(fmt::format("{}: text: empty string", where));
  std::vector<int32_t> ids = encode_text(task.input_vocab, value, fmt::format("{}: text", where));
  if (ids.size() > static_cast<size_t>(task.max_seq_len)) {
    throw OverLong{fmt::format("{}: text: {} characters, more than the limit of {} for task {}", where, ids.size(),
                               task.max_seq_len, task.name)};
  }
  return ids;
}

}  // namespace

namespace detail {

std::string type_name(const json& value) {
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  if (value.is_boolean()) return "a boolean";
  return "null";
}

std::string json_quoted(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

json parse_object(std::string_view line, const Task& task, std::string_view where, bool label_optional) {
  if (is_blank(line)) throw InputError(fmt::format("{}: blank line (expected one JSON object per line)", where));
  // nlohmann's parser stops at a NUL byte and would accept a line with junk after it.
  if (line.find('\0') != std::string_view::npos) throw InputError(fmt::format("{}: NUL byte in line", where));
  // No valid example needs a longer line; checked before parsing builds anything from it.
  const int64_t limit = max_jsonl_line_bytes(task.max_seq_len);
  if (static_cast<int64_t>(line.size()) > limit) {
    throw OverLong{fmt::format("{}: line of {} bytes, longer than any {} example can be ({} bytes for {} symbols)",
                               where, line.size(), task.name, limit, task.max_seq_len)};
  }
  io::require_json_depth(line, where);
  // nlohmann keeps the last of repeated keys silently; a repeated key in a data file is a mistake.
  std::vector<std::string> repeated;
  json object;
  try {
    object = io::parse_json_linear(line, &repeated);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    std::string message = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..." -> "column 9: ..."
    if (auto at = message.find("column "); at != std::string::npos) message = message.substr(at);
    throw InputError(fmt::format("{}: malformed JSON: {}", where, message));
  }
  if (!object.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object, got {}", where, type_name(object)));
  }
  if (!repeated.empty()) throw InputError(fmt::format("{}: key {} appears twice", where, json_quoted(repeated.back())));
  const std::vector<std::string> keys = expected_keys(task);
  // A user's own file may carry more keys (an id, a source): only the named ones are read.
  for (const auto& [key, value] : object.items()) {
    if (task.is_data_defined()) break;
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      throw InputError(fmt::format("{}: unexpected key {} (a {} example has keys {})", where, json_quoted(key),
                                   task.name, quoted_list(keys)));
    }
  }
  for (const std::string& key : keys) {
    if (label_optional && key != keys.front()) break;
    if (!object.contains(key)) {
      throw InputError(fmt::format("{}: missing key \"{}\" (a {} example has keys {}{})", where, key, task.name,
                                   quoted_list(keys),
                                   task.is_data_defined() ? "; task.text_field and task.label_field name others" : ""));
    }
  }
  return object;
}

std::vector<std::optional<std::string>> parse_words(const json& value, std::string_view where, std::string_view field,
                                                    bool nulls, const TextOptions& options) {
  std::vector<std::optional<std::string>> words;
  if (value.is_string()) {
    std::vector<std::string> split;
    split_words(value.get_ref<const std::string&>(), options, split);
    for (std::string& w : split) words.emplace_back(std::move(w));
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      const json& word = value[i];
      if (word.is_null() && nulls) {
        words.emplace_back(std::nullopt);
        continue;
      }
      if (!word.is_string()) {
        throw InputError(fmt::format("{}: {}[{}]: expected a string{}, got {}", where, field, i,
                                     nulls ? " or null" : "", type_name(word)));
      }
      const std::string& s = word.get_ref<const std::string&>();
      if (s.empty() || has_space(s)) {
        throw InputError(fmt::format("{}: {}[{}]: {} is empty or holds whitespace (tokens and labels are single words)",
                                     where, field, i, json_quoted(s)));
      }
      words.emplace_back(normalize_word(s, options));
    }
  } else {
    throw InputError(
        fmt::format("{}: {}: expected a string of whitespace-separated words or an array of strings, got {}", where,
                    field, type_name(value)));
  }
  if (words.empty()) throw InputError(fmt::format("{}: {}: empty sequence", where, field));
  return words;
}

std::string label_string(const json& value, std::string_view where) {
  if (!value.is_string())
    throw InputError(fmt::format("{}: label: expected a string, got {}", where, type_name(value)));
  const std::string& s = value.get_ref<const std::string&>();
  if (s.empty() || has_space(s)) {
    throw InputError(
        fmt::format("{}: label: {} is empty or holds whitespace (labels are single words)", where, json_quoted(s)));
  }
  return s;
}

void check_length(const StringExample& example, const Task& schema, std::string_view where, std::string_view field) {
  if (example.tokens.size() > static_cast<size_t>(schema.max_seq_len))
    throw OverLong{fmt::format("{}: {}: {} entries, more than the limit of {}", where, field, example.tokens.size(),
                               schema.max_seq_len)};
}

StringExample parse_string_example(const json& object, const Task& schema, std::string_view where) {
  StringExample example;
  const std::string text_key = text_field_of(schema, FileFormat::jsonl),
                    label_key = label_field_of(schema, FileFormat::jsonl);
  for (auto& token : parse_words(object.at(text_key), where, text_key, false, schema.text))
    example.tokens.push_back(std::move(*token));
  check_length(example, schema, where, text_key);
  if (schema.target_kind == TargetKind::per_sequence) {
    example.labels.emplace_back(label_string(object.at(label_key), where));
    return example;
  }
  example.labels = parse_words(object.at(label_key), where, label_key, true, TextOptions{});
  if (example.labels.size() != example.tokens.size()) {
    throw InputError(fmt::format("{}: {}: {} entries but {} has {} (one target per token)", where, label_key,
                                 example.labels.size(), text_key, example.tokens.size()));
  }
  return example;
}

Example data_example(const StringExample& strings, const Task& task, std::string_view where, LoadStats* stats) {
  Example example;
  const int32_t unk = task.input_vocab.id(kUnkToken);
  for (const std::string& token : strings.tokens) {
    const bool reserved = token == kPadToken || token == kUnkToken;
    const int32_t id = reserved ? unk : task.input_vocab.find(token).value_or(unk);
    if (stats) stats->reserved += reserved, stats->unknown += !reserved && id == unk, ++stats->tokens;
    example.tokens.push_back(id);
  }
  for (size_t i = 0; i < strings.labels.size(); ++i) {
    if (!strings.labels[i]) {
      example.targets.push_back(-1);
      continue;
    }
    auto id = task.output_vocab.find(*strings.labels[i]);
    if (!id) {
      const std::string field = task.target_kind == TargetKind::per_sequence ? "label" : fmt::format("targets[{}]", i);
      throw InputError(
          fmt::format("{}: {}: label {} does not occur in the training file, so the model cannot predict "
                      "it (labels: {})",
                      where, field, json_quoted(*strings.labels[i]), joined(task.output_vocab.tokens())));
    }
    example.targets.push_back(*id);
  }
  return example;
}

Example parse_jsonl_object(std::string_view line, const Task& task, std::string_view where) {
  const json object = parse_object(line, task, where);
  if (task.is_data_defined()) return data_example(parse_string_example(object, task, where), task, where);
  Example example;
  if (task.is_masked_lm()) {
    example.tokens = parse_text(object.at("text"), task, where);
    return example;
  }
  example.tokens = parse_tokens(object.at("tokens"), task, where);
  if (task.target_kind == TargetKind::per_sequence) {
    example.targets = {parse_class(object.at("label"), task, where, "label")};
    return example;
  }
  const json& targets = object.at("targets");
  if (!targets.is_array()) {
    throw InputError(
        fmt::format("{}: targets: expected an array of strings or nulls, got {}", where, type_name(targets)));
  }
  if (targets.size() != example.tokens.size()) {
    throw InputError(fmt::format("{}: targets: {} entries but tokens has {} (one target per token)", where,
                                 targets.size(), example.tokens.size()));
  }
  example.targets.reserve(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    example.targets.push_back(
        targets[i].is_null() ? -1 : parse_class(targets[i], task, where, fmt::format("targets[{}]", i)));
  }
  return example;
}

}  // namespace detail

Example parse_jsonl_line(std::string_view line, const Task& task, std::string_view where) {
  try {
    return parse_jsonl_object(line, task, where);
  } catch (const OverLong& e) {
    throw InputError(e.message);
  }
}

}  // namespace normlab::data
