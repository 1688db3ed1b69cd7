// The loaders of include/normlab/data/jsonl.hpp: a data file read whole (its size limit, UTF-8),
// cut into lines (JSONL) or records (CSV, TSV, CoNLL: formats.cpp), each line parsed by
// jsonl_parse.cpp; and the records of a file to predict.
#include "normlab/data/jsonl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "jsonl_parse.hpp"
#include "normlab/data/formats.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/text.hpp"

namespace normlab::data {

using namespace detail;  // the line parser's pieces (jsonl_parse.hpp)

namespace {

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
    std::string_view line = io::next_line(contents, start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // tolerate CRLF files
    ++line_number;
    // Blank lines at the very end (an editor's extra newline) end the file; anywhere else they are
    // refused by the line parser.
    if (is_blank(line) && contents.find_first_not_of(" \t\r\n", start) == std::string::npos) break;
    if (line_number % 1024 == 0) io::throw_if_stopped(stop);
    on_line(line, fmt::format("{}:{}", path, line_number));
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

}  // namespace normlab::data
