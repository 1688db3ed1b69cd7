#pragma once
// JSONL datasets: one JSON object per line, one example per object. Three schemas, chosen by the
// task (data/README.md has the full description):
//
//   per-token tasks     {"tokens":["3","1","2"],"targets":["2","1","3"]}
//                       targets: one entry per token; null = no target at that position.
//   per-sequence tasks  {"tokens":["1","0","1"],"label":"1"}
//   masked-LM text      {"text":"In the beginning God created the heaven and the earth."}
//   data-defined tasks  {"tokens":"the film was great","label":"positive"} (sequence_classification)
//                       {"tokens":"a b c","targets":"<s> a b"} (token_classification); tokens and
//                       targets may also be arrays of strings (targets: null = no target)
//
// Symbols and classes are the task's token strings, so a file is readable and does not depend on
// how ids are numbered. Blank lines at the end of a file are ignored. Loading is strict otherwise: an
// empty file, a blank line, malformed JSON, a missing or repeated key, an extra key (built-in tasks;
// a data-defined task ignores other keys and reads the ones task.text_field / task.label_field
// name), a wrong type, an unknown symbol or class, an empty sequence, or a targets array whose
// length differs from tokens is an InputError "PATH:LINE: what is wrong" (lines count from 1). A
// sequence longer than task.max_seq_len is skipped and counted when the caller asks (LoadStats),
// an InputError otherwise. A file larger than max_file_bytes is refused before it is read.
// Data-defined tasks also read CSV, TSV and CoNLL files (formats.hpp).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/data/task.hpp"
#include "normlab/io/stop.hpp"

namespace normlab::data {

inline constexpr int64_t kMaxJsonlBytes = int64_t{64} << 20;  // 64 MiB

// The longest line a valid example of at most `max_seq_len` symbols can need: 64 bytes a symbol
// (a symbol, its target and their JSON punctuation, even written with \u escapes) plus 4 KiB.
// Longer lines are refused before they are parsed, so a line's size bounds the memory it takes.
constexpr int64_t max_jsonl_line_bytes(int32_t max_seq_len) { return 64 * int64_t{max_seq_len} + 4096; }

// What a loader read besides its examples. Given one, a loader skips and counts the sequences
// longer than the task's max_seq_len (the one rule for over-long lines: the caller's own length
// limit then filters the rest the same way); without one, such a line is an InputError.
struct LoadStats {
  int64_t lines = 0;     // examples in the file, over-long ones included
  int64_t too_long = 0;  // skipped: longer than max_seq_len (or a line longer than any such example)
  int64_t tokens = 0;    // data-defined tasks: input tokens of the examples read
  int64_t unknown = 0;   //   of them read as [UNK]: absent from the vocabulary (or rarer than task.min_count)
  int64_t reserved = 0;  //   of them written as "[PAD]" or "[UNK]" in the file, read as [UNK]
  int64_t longest = 0;   //   the most tokens of an example read (over-long ones excluded)
};

// Masked-LM lines load as raw examples (targets empty); see mlm.hpp. Data-defined tasks read the
// file in its format (formats.hpp). A stop request (io/stop.hpp) throws io::StopRequested between lines.
std::vector<Example> load_jsonl(const std::string& path, const Task& task, int64_t max_file_bytes = kMaxJsonlBytes,
                                io::StopFlag stop = nullptr, LoadStats* stats = nullptr);

// The "text" strings of a masked-LM file, for building its vocabulary (make_text_task). Same checks.
std::vector<std::string> load_text_lines(const std::string& path, int32_t max_chars,
                                         int64_t max_file_bytes = kMaxJsonlBytes, io::StopFlag stop = nullptr,
                                         LoadStats* stats = nullptr);

// The strings of a data-defined task's file (any format). `schema` says the shape (its kind,
// target_kind, max_seq_len, text and file options; its vocabularies are not used).
std::vector<StringExample> load_string_examples(const std::string& path, const Task& schema,
                                                int64_t max_file_bytes = kMaxJsonlBytes, io::StopFlag stop = nullptr,
                                                LoadStats* stats = nullptr);
// The same file counted for make_data_task(name, counts, min_count) without keeping its strings;
// the size limit is schema.file.max_file_bytes.
VocabularyCounts count_vocabulary(const std::string& path, const Task& schema, io::StopFlag stop = nullptr,
                                  LoadStats* stats = nullptr);

// A data-defined task's file read for its shape alone: lines, over-long lines, the longest example.
LoadStats measure_file(const std::string& path, const Task& schema, io::StopFlag stop = nullptr);

// One record of a file to predict (`normlab predict --data`): its text as written and, when the
// file gives them, its label (per sequence: one) or tags (per token; nullopt: no tag there).
struct InputRecord {
  std::string text;
  std::optional<std::vector<std::optional<std::string>>> labels;  // nullopt: the file has none
  std::string where;                                              // "PATH:LINE"
};
// Every record of `contents` (the file at `path`), read in the task's own format: a data-defined
// task's CSV / TSV (header) / JSONL / CoNLL through task.text_field and task.label_field, the label
// key or column optional; a built-in task's JSONL as its data files have it. InputError
// "PATH:LINE: ..." as the loaders say it, invalid UTF-8 included.
void for_each_input_record(std::string_view contents, const std::string& path, const Task& task, io::StopFlag stop,
                           const std::function<void(InputRecord&&)>& on_record);

// One line of a file; `where` ("PATH:LINE") starts every error message.
Example parse_jsonl_line(std::string_view line, const Task& task, std::string_view where);

// The JSONL line (no newline) for an example: the inverse of parse_jsonl_line. Masked-LM examples
// are written as text from their tokens (targets are not stored: masks are drawn at batch time).
std::string example_to_jsonl(const Example& example, const Task& task);

// Writes all examples, one line each, atomically (io/atomic_file.hpp).
void write_jsonl(const std::string& path, const std::vector<Example>& examples, const Task& task);

}  // namespace normlab::data
