#include "normlab/data/jsonl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "normlab/data/formats.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/io/text.hpp"

namespace normlab::data {

namespace {

using nlohmann::json;

// A line too long for the task: skipped and counted by a loader given LoadStats, else an InputError
// with this message.
struct OverLong {
  std::string message;
};

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

// The JSON value's type as a reader would name it.
std::string type_name(const json& value) {
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  if (value.is_boolean()) return "a boolean";
  return "null";
}

// A string from the file as JSON shows it: quoted, control characters escaped ("\u0000" cannot cut
// the message short), invalid UTF-8 replaced.
std::string json_quoted(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string joined(const std::vector<std::string>& symbols) {
  std::string out;
  for (size_t i = 0; i < symbols.size(); ++i) out += (i > 0 ? " " : "") + symbols[i];
  return out;
}

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

// Parses one line into an object with exactly the task's keys (label_optional: a data-defined
// task's label key may be absent, as in a file to predict).
json parse_object(std::string_view line, const Task& task, std::string_view where, bool label_optional = false) {
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

bool has_space(const std::string& s) { return s.find_first_of(" \t\n\r\f\v") != std::string::npos; }

// Data-defined tasks: a whitespace-separated string, or an array of strings (null allowed where
// `nulls`), as strings. Empty strings and strings with whitespace inside are refused.
// `options` normalizes the input text (labels are read as written).
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

// OverLong for more tokens than the task's max_seq_len.
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

// A CSV / TSV record as strings: the text split into words, the label one word or the tags one per word.
StringExample record_example(const TextRecord& record, const Task& schema, const std::string& text_key,
                             const std::string& label_key) {
  StringExample example;
  split_words(record.text, schema.text, example.tokens);
  if (example.tokens.empty()) throw InputError(fmt::format("{}: {}: empty text", record.where, text_key));
  check_length(example, schema, record.where, text_key);
  std::vector<std::string> labels;
  split_words(record.label, {}, labels);
  if (schema.target_kind == TargetKind::per_sequence) {
    if (labels.size() != 1)
      throw InputError(
          fmt::format("{}: {}: expected one word, got {}", record.where, label_key, json_quoted(record.label)));
  } else if (labels.size() != example.tokens.size()) {
    throw InputError(fmt::format("{}: {}: {} tags but {} has {} words (one tag per word)", record.where, label_key,
                                 labels.size(), text_key, example.tokens.size()));
  }
  for (std::string& l : labels) example.labels.emplace_back(std::move(l));
  return example;
}

// A data-defined example's strings as ids: unknown tokens are "[UNK]", unknown labels an error.
// "[PAD]" and "[UNK]" written in the data are read as "[UNK]" (never the padding id) and counted.
Example data_example(const StringExample& strings, const Task& task, std::string_view where,
                     LoadStats* stats = nullptr) {
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

// One line as an example (OverLong for a sequence longer than the task allows).
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

// The file's contents. InputError for a file larger than max_file_bytes, naming the key that
// raises the limit, before anything is read, and for bytes that are not UTF-8 (io/text.hpp).
std::string read_data_file(const std::string& path, int64_t max_file_bytes) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > uintmax_t(max_file_bytes))
      throw InputError(
          fmt::format("{}: file is {} bytes, larger than the limit of {} bytes (task.max_file_mb {}: "
                      "raise it to read larger files)",
                      path, size, max_file_bytes, max_file_bytes >> 20));
  }
  std::string contents = io::read_file(path, static_cast<size_t>(max_file_bytes));  // also: missing, not a regular file
  io::require_utf8_lines(contents, path);  // every format, before any parser sees a byte
  return contents;
}

// Calls `on_line(line, where)` for every line of the contents, after the whole-file checks.
template <typename OnLine>
void for_each_line(const std::string& contents, const std::string& path, io::StopFlag stop, OnLine on_line) {
  if (contents.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError(fmt::format("{}: empty file (expected one JSON object per line)", path));
  size_t start = 0;
  int64_t line_number = 0;
  while (start < contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == std::string::npos) end = contents.size();
    std::string_view line(contents.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // tolerate CRLF files
    ++line_number;
    // Blank lines at the very end (an editor's extra newline) end the file; anywhere else they are
    // refused by the line parser.
    if (is_blank(line) && contents.find_first_not_of(" \t\r\n", start) == std::string::npos) break;
    if (line_number % 1024 == 0) io::throw_if_stopped(stop);
    on_line(line, fmt::format("{}:{}", path, line_number));
    start = end + 1;  // a final newline ends the last line; it does not start an empty one
  }
}

// Runs `read` for one record: an over-long one is counted in `stats` (or, without stats, refused).
template <typename Read>
void read_record(LoadStats* stats, Read read) {
  if (stats) ++stats->lines;
  try {
    read();
  } catch (const OverLong& e) {
    if (!stats) throw InputError(e.message);
    ++stats->too_long;
  }
}

using OnStringExample = std::function<void(StringExample&&, const std::string& where)>;

void for_each_string_example_in(const std::string& contents, const std::string& path, FileFormat format,
                                const Task& schema, io::StopFlag stop, LoadStats* stats,
                                const OnStringExample& on_example);

// Every example of a data-defined task's file, in the file's format (formats.hpp).
void for_each_string_example(const std::string& path, const Task& schema, int64_t max_file_bytes, io::StopFlag stop,
                             LoadStats* stats, const OnStringExample& on_example) {
  const std::string contents = read_data_file(path, max_file_bytes);
  const FileFormat format = file_format_of(path, schema.file);
  const OnStringExample measured = [&](StringExample&& example, const std::string& where) {
    if (stats) stats->longest = std::max<int64_t>(stats->longest, int64_t(example.tokens.size()));
    on_example(std::move(example), where);
  };
  for_each_string_example_in(contents, path, format, schema, stop, stats, measured);
}

void for_each_string_example_in(const std::string& contents, const std::string& path, FileFormat format,
                                const Task& schema, io::StopFlag stop, LoadStats* stats,
                                const OnStringExample& on_example) {
  if (format == FileFormat::jsonl) {
    for_each_line(contents, path, stop, [&](std::string_view line, const std::string& where) {
      read_record(stats,
                  [&] { on_example(parse_string_example(parse_object(line, schema, where), schema, where), where); });
    });
  } else if (format == FileFormat::conll) {
    if (schema.target_kind == TargetKind::per_sequence)
      throw InputError(
          fmt::format("{}: a CoNLL file holds one tag per token: task.name token_classification reads it, "
                      "{} needs one label per line (CSV, TSV or JSONL)",
                      path, schema.name));
    for_each_conll_sentence(contents, path, stop, [&](StringExample&& example, const std::string& where) {
      read_record(stats, [&] {
        for (std::string& token : example.tokens) token = normalize_word(token, schema.text);
        check_length(example, schema, where, "tokens");
        on_example(std::move(example), where);
      });
    });
  } else {
    const std::string text_key = text_field_of(schema, format), label_key = label_field_of(schema, format);
    const bool csv = format == FileFormat::csv;
    for_each_delimited_record(contents, path, csv ? ',' : '\t', csv, text_key, label_key, stop,
                              [&](TextRecord&& record) {
                                read_record(stats, [&] {
                                  on_example(record_example(record, schema, text_key, label_key), record.where);
                                });
                              });
  }
}

}  // namespace

Example parse_jsonl_line(std::string_view line, const Task& task, std::string_view where) {
  try {
    return parse_jsonl_object(line, task, where);
  } catch (const OverLong& e) {
    throw InputError(e.message);
  }
}

std::vector<Example> load_jsonl(const std::string& path, const Task& task, int64_t max_file_bytes, io::StopFlag stop,
                                LoadStats* stats) {
  std::vector<Example> examples;
  if (task.is_data_defined()) {
    for_each_string_example(path, task, max_file_bytes, stop, stats,
                            [&](StringExample&& strings, const std::string& where) {
                              examples.push_back(data_example(strings, task, where, stats));
                            });
    return examples;
  }
  const std::string contents = read_data_file(path, max_file_bytes);
  for_each_line(contents, path, stop, [&](std::string_view line, const std::string& where) {
    read_record(stats, [&] { examples.push_back(parse_jsonl_object(line, task, where)); });
  });
  return examples;
}

std::vector<std::string> load_text_lines(const std::string& path, int32_t max_chars, int64_t max_file_bytes,
                                         io::StopFlag stop, LoadStats* stats) {
  // Only the schema matters here; a vocabulary-free text task checks it.
  Task schema;
  schema.name = "mlm_text";
  schema.kind = TaskKind::mlm_text;
  schema.max_seq_len = max_chars;
  std::vector<std::string> lines;
  const std::string contents = read_data_file(path, max_file_bytes);
  for_each_line(contents, path, stop, [&](std::string_view line, const std::string& where) {
    read_record(stats, [&] {
      const json object = parse_object(line, schema, where);
      const json& text = object.at("text");
      if (!text.is_string())
        throw InputError(fmt::format("{}: text: expected a string, got {}", where, type_name(text)));
      std::string value = text.get<std::string>();
      if (value.empty()) throw InputError(fmt::format("{}: text: empty string", where));
      const size_t characters = utf8_characters(value, fmt::format("{}: text", where)).size();
      if (characters > static_cast<size_t>(max_chars))
        throw OverLong{fmt::format("{}: text: {} characters, more than the limit of {}", where, characters, max_chars)};
      lines.push_back(std::move(value));
    });
  });
  return lines;
}

std::vector<StringExample> load_string_examples(const std::string& path, const Task& schema, int64_t max_file_bytes,
                                                io::StopFlag stop, LoadStats* stats) {
  std::vector<StringExample> examples;
  for_each_string_example(path, schema, max_file_bytes, stop, stats,
                          [&](StringExample&& example, const std::string&) { examples.push_back(std::move(example)); });
  return examples;
}

void for_each_input_record(std::string_view contents, const std::string& path, const Task& task, io::StopFlag stop,
                           const std::function<void(InputRecord&&)>& on_record) {
  const std::string text(contents);
  io::require_utf8_lines(text, path);
  if (!task.is_data_defined()) {
    // The built-in tasks' own JSONL: symbols (or text) with their targets.
    for_each_line(text, path, stop, [&](std::string_view line, const std::string& where) {
      InputRecord record;
      record.where = where;
      if (task.is_masked_lm()) {
        const json object = parse_object(line, task, where);
        if (!object.at("text").is_string())
          throw InputError(fmt::format("{}: text: expected a string, got {}", where, type_name(object.at("text"))));
        record.text = object.at("text").get<std::string>();
      } else {
        const Example example = parse_jsonl_line(line, task, where);
        record.text = task.decode_input(example.tokens);
        std::vector<std::optional<std::string>> labels;
        for (int32_t id : example.targets)
          labels.push_back(id < 0 ? std::nullopt : std::optional<std::string>(task.output_vocab.token(id)));
        record.labels = std::move(labels);
      }
      on_record(std::move(record));
    });
    return;
  }
  const FileFormat format = file_format_of(path, task.file);
  const std::string text_key = text_field_of(task, format), label_key = label_field_of(task, format);
  auto words_as_text = [](const std::vector<std::optional<std::string>>& words) {
    std::string out;
    for (const auto& w : words) out += (out.empty() ? "" : " ") + w.value_or("");
    return out;
  };
  if (format == FileFormat::jsonl) {
    for_each_line(text, path, stop, [&](std::string_view line, const std::string& where) {
      const json object = parse_object(line, task, where, /*label_optional=*/true);
      InputRecord record;
      record.where = where;
      const json& value = object.at(text_key);
      // The text as written: a string as it is, an array of words joined by spaces.
      record.text = value.is_string() ? value.get<std::string>()
                                      : words_as_text(parse_words(value, where, text_key, false, TextOptions{}));
      if (object.contains(label_key) && !object.at(label_key).is_null()) {
        if (task.target_kind == TargetKind::per_sequence)
          record.labels = std::vector<std::optional<std::string>>{label_string(object.at(label_key), where)};
        else record.labels = parse_words(object.at(label_key), where, label_key, true, TextOptions{});
      }
      on_record(std::move(record));
    });
  } else if (format == FileFormat::conll) {
    for_each_conll_sentence(text, path, stop, [&](StringExample&& example, const std::string& where) {
      InputRecord record;
      record.where = where;
      for (const std::string& token : example.tokens) record.text += (record.text.empty() ? "" : " ") + token;
      record.labels = std::move(example.labels);
      on_record(std::move(record));
    });
  } else {
    const bool csv = format == FileFormat::csv;
    for_each_delimited_record(
        text, path, csv ? ',' : '\t', csv, text_key, label_key, stop,
        [&](TextRecord&& row) {
          InputRecord record;
          record.where = row.where;
          record.text = std::move(row.text);
          if (row.has_label && row.label.find_first_not_of(" \t") != std::string::npos) {  // an empty cell: no label
            std::vector<std::string> labels;
            split_words(row.label, {}, labels);
            if (task.target_kind == TargetKind::per_sequence && labels.size() != 1)
              throw InputError(
                  fmt::format("{}: {}: expected one word, got {}", row.where, label_key, json_quoted(row.label)));
            record.labels.emplace();
            for (std::string& l : labels) record.labels->emplace_back(std::move(l));
          }
          on_record(std::move(record));
        },
        /*label_optional=*/true);
  }
}

LoadStats measure_file(const std::string& path, const Task& schema, io::StopFlag stop) {
  LoadStats stats;
  for_each_string_example(path, schema, schema.file.max_file_bytes, stop, &stats,
                          [](StringExample&&, const std::string&) {});
  return stats;
}

VocabularyCounts count_vocabulary(const std::string& path, const Task& schema, io::StopFlag stop, LoadStats* stats) {
  VocabularyCounts counts;
  for_each_string_example(path, schema, schema.file.max_file_bytes, stop, stats,
                          [&](StringExample&& example, const std::string&) { counts.add(example); });
  return counts;
}

std::string example_to_jsonl(const Example& example, const Task& task) {
  nlohmann::ordered_json object;
  if (task.is_masked_lm()) {
    object["text"] = task.input_vocab.decode(example.tokens, "");
    return object.dump();
  }
  nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
  for (int32_t id : example.tokens) tokens.push_back(task.input_vocab.token(id));
  object["tokens"] = std::move(tokens);
  if (task.target_kind == TargetKind::per_sequence) {
    if (example.targets.size() != 1) {
      throw UsageError(fmt::format("example_to_jsonl: {} targets for a per-sequence task", example.targets.size()));
    }
    object["label"] = task.output_vocab.token(example.targets[0]);
    return object.dump();
  }
  if (example.targets.size() != example.tokens.size()) {
    throw UsageError(
        fmt::format("example_to_jsonl: {} targets for {} tokens", example.targets.size(), example.tokens.size()));
  }
  nlohmann::ordered_json targets = nlohmann::ordered_json::array();
  for (int32_t id : example.targets) {
    if (id == -1) {
      targets.push_back(nullptr);
    } else {
      targets.push_back(task.output_vocab.token(id));
    }
  }
  object["targets"] = std::move(targets);
  return object.dump();
}

void write_jsonl(const std::string& path, const std::vector<Example>& examples, const Task& task) {
  std::string contents;
  for (const Example& example : examples) {
    contents += example_to_jsonl(example, task);
    contents += '\n';
  }
  io::write_file_atomic(path, contents);
}

}  // namespace normlab::data
