#include "normlab/data/formats.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <filesystem>
#include <utility>

#include "normlab/error.hpp"
#include "normlab/io/text.hpp"
#include "normlab/names.hpp"

namespace normlab::data {

namespace {

constexpr std::pair<FileFormat, const char*> kFormatNames[] = {{FileFormat::jsonl, "jsonl"},
                                                               {FileFormat::csv, "csv"},
                                                               {FileFormat::tsv, "tsv"},
                                                               {FileFormat::conll, "conll"}};

}  // namespace

// task.format by name; "auto": by the file's extension (any other is JSONL).
FileFormat file_format_of(const std::string& path, const FileOptions& options) {
  if (const std::optional<FileFormat> format = value_named(kFormatNames, options.format)) return *format;
  std::string extension = std::filesystem::path(path).extension().string();
  for (char& c : extension) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (extension == ".csv") return FileFormat::csv;
  if (extension == ".tsv") return FileFormat::tsv;
  if (extension == ".conll" || extension == ".conllu") return FileFormat::conll;
  return FileFormat::jsonl;
}

const char* format_name(FileFormat format) { return name_in(kFormatNames, format); }

std::string text_field_of(const Task& task, FileFormat format) {
  if (!task.file.text_field.empty()) return task.file.text_field;
  return format == FileFormat::jsonl ? "tokens" : "text";
}

std::string label_field_of(const Task& task, FileFormat format) {
  if (!task.file.label_field.empty()) return task.file.label_field;
  if (task.target_kind == TargetKind::per_sequence) return "label";
  return format == FileFormat::jsonl ? "targets" : "tags";
}

namespace {

// Reads one record of a delimited file from `pos`: its fields, unquoted. Returns false at the end.
// `line` is the record's first line on entry and the next record's on return.
class DelimitedReader {
 public:
  DelimitedReader(std::string_view contents, const std::string& path, char separator, bool quoting)
      : text_(contents), path_(path), separator_(separator), quoting_(quoting) {}

  bool next(std::vector<std::string>& fields, int64_t& first_line) {
    fields.clear();
    if (pos_ >= text_.size()) return false;
    first_line = line_;
    std::string field;
    bool quoted = false, was_quoted = false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (quoted) {
        if (c == '"' && pos_ < text_.size() && text_[pos_] == '"') field += '"', ++pos_;
        else if (c == '"') quoted = false;
        else field += c, line_ += c == '\n';
        continue;
      }
      if (c == '\n' || (c == '\r' && pos_ < text_.size() && text_[pos_] == '\n')) {
        if (c == '\r') ++pos_;
        ++line_;
        break;
      }
      if (c == separator_) {
        fields.push_back(std::move(field));
        field.clear();
        was_quoted = false;
      } else if (quoting_ && c == '"' && field.empty() && !was_quoted) {
        quoted = was_quoted = true;
      } else if (quoting_ && was_quoted) {
        throw InputError(fmt::format("{}:{}: text after a closing quote (write a quote inside a quoted field as \"\")",
                                     path_, line_));
      } else {
        field += c;
      }
    }
    if (quoted)
      throw InputError(
          fmt::format("{}:{}: a quoted field is not closed before the end of the file", path_, first_line));
    fields.push_back(std::move(field));
    return true;
  }

  bool only_blank_left() const { return text_.find_first_not_of(" \t\r\n", pos_) == std::string_view::npos; }

 private:
  std::string_view text_;
  const std::string& path_;
  char separator_;
  bool quoting_;
  size_t pos_ = 0;
  int64_t line_ = 1;
};

bool blank(const std::vector<std::string>& fields) {
  return fields.size() == 1 && fields[0].find_first_not_of(" \t\r") == std::string::npos;
}

std::string column_list(const std::vector<std::string>& header) {
  std::string out;
  for (size_t i = 0; i < header.size(); ++i)
    out += (i ? ", " : "") + fmt::format("\"{}\"", io::escape_control(header[i]));
  return out;
}

size_t column_index(const std::vector<std::string>& header, const std::string& name, const std::string& path,
                    const char* key) {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  throw InputError(fmt::format("{}:1: no column \"{}\" in the header (columns: {}); name the column with {}", path,
                               io::escape_control(name), column_list(header), key));
}

}  // namespace

void for_each_delimited_record(std::string_view contents, const std::string& path, char separator, bool quoting,
                               const std::string& text_column, const std::string& label_column, io::StopFlag stop,
                               const std::function<void(TextRecord&&)>& on_record, bool label_optional) {
  if (contents.size() >= 3 && contents.substr(0, 3) == "\xEF\xBB\xBF") contents.remove_prefix(3);  // a UTF-8 BOM
  DelimitedReader reader(contents, path, separator, quoting);
  std::vector<std::string> header, fields;
  int64_t line = 0;
  if (!reader.next(header, line) || blank(header))
    throw InputError(fmt::format("{}:1: expected a header row naming the columns", path));
  for (std::string& name : header)
    while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.pop_back();
  const size_t text_at = column_index(header, text_column, path, "task.text_field");
  const bool has_label = !label_optional || std::find(header.begin(), header.end(), label_column) != header.end();
  const size_t label_at = has_label ? column_index(header, label_column, path, "task.label_field") : text_at;
  int64_t records = 0;
  while (reader.next(fields, line)) {
    if (blank(fields)) {
      if (reader.only_blank_left()) break;  // an editor's newlines at the end
      throw InputError(fmt::format("{}:{}: blank line (expected one record per line)", path, line - 1));
    }
    if (fields.size() != header.size())
      throw InputError(fmt::format("{}:{}: {} fields, but the header has {} ({})", path, line, fields.size(),
                                   header.size(), column_list(header)));
    if (++records % 1024 == 0) io::throw_if_stopped(stop);
    std::string label = has_label ? fields[label_at] : std::string();
    on_record({std::move(fields[text_at]), std::move(label), fmt::format("{}:{}", path, line), has_label});
  }
  if (records == 0) throw InputError(fmt::format("{}: no records after the header", path));
}

void for_each_conll_sentence(std::string_view contents, const std::string& path, io::StopFlag stop,
                             const std::function<void(StringExample&&, const std::string& where)>& on_sentence) {
  StringExample sentence;
  int64_t line_number = 0, first = 0, sentences = 0;
  auto flush = [&] {
    if (sentence.tokens.empty()) return;
    if (++sentences % 1024 == 0) io::throw_if_stopped(stop);
    on_sentence(std::move(sentence), fmt::format("{}:{}", path, first));
    sentence = {};
  };
  size_t start = 0;
  while (start < contents.size()) {
    std::string_view line = io::next_line(contents, start);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) {
      flush();
      continue;
    }
    if (line.front() == '#' || line.substr(0, 10) == "-DOCSTART-") continue;
    std::vector<std::string> columns;
    split_words(line, {}, columns);
    if (columns.size() < 2)
      throw InputError(fmt::format("{}:{}: expected a token and its tag separated by a space or tab, got \"{}\"", path,
                                   line_number, io::escape_control(line.substr(0, 60))));
    if (sentence.tokens.empty()) first = line_number;
    sentence.tokens.push_back(columns.front());
    sentence.labels.emplace_back(columns.back());
  }
  flush();
  if (sentences == 0) throw InputError(fmt::format("{}: empty file (expected token-per-line sentences)", path));
}

}  // namespace normlab::data
