#pragma once
// The text formats a data-defined task (sequence_classification, token_classification) reads, each
// chosen per file by task.format ("auto": by the file's extension):
//
//   jsonl  .jsonl and anything else   {"id": 7, "tokens": "the film was great", "label": "positive"}
//          one object per line; the text under task.text_field (default "tokens"), the label under
//          task.label_field (default "label", or "targets" for tagging); other keys are ignored
//   csv    .csv   RFC 4180: a header row naming the columns, fields separated by commas, a field in
//          double quotes may hold commas, newlines and "" (a quote); the text in column
//          task.text_field (default "text"), the label in task.label_field (default "label", or
//          "tags": whitespace-separated, one per token); other columns are ignored
//   tsv    .tsv   the same with tabs and no quoting (a field cannot hold a tab or a newline)
//   conll  .conll .conllu  tagging only: one token per line, its first column the token and its
//          last column the tag (columns separated by spaces or tabs), a blank line between
//          sentences; lines starting with "#" and "-DOCSTART-" lines are skipped
//
// Errors are InputError "PATH:LINE: what is wrong", the line of the record (CSV) or of the
// sentence's first token (CoNLL).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/data/task.hpp"
#include "normlab/io/stop.hpp"

namespace normlab::data {

enum class FileFormat { jsonl, csv, tsv, conll };

// task.format for `path`: the named format, or by extension for "auto".
FileFormat file_format_of(const std::string& path, const FileOptions& options);
const char* format_name(FileFormat format);
// The key / column names the task reads in this format.
std::string text_field_of(const Task& task, FileFormat format);
std::string label_field_of(const Task& task, FileFormat format);

// One record: the text and the label (a word) or the tags (whitespace-separated), as written.
struct TextRecord {
  std::string text;
  std::string label;
  std::string where;      // "PATH:LINE"
  bool has_label = true;  // false: label_optional and the header has no label column
};

// Every record of a CSV or TSV file's contents, in order. label_optional: a header without the
// label column is read too (a file to predict), its records without a label.
void for_each_delimited_record(std::string_view contents, const std::string& path, char separator, bool quoting,
                               const std::string& text_column, const std::string& label_column, io::StopFlag stop,
                               const std::function<void(TextRecord&&)>& on_record, bool label_optional = false);

// Every sentence of a CoNLL file's contents: tokens and tags, one each per line.
void for_each_conll_sentence(std::string_view contents, const std::string& path, io::StopFlag stop,
                             const std::function<void(StringExample&&, const std::string& where)>& on_sentence);

}  // namespace normlab::data
