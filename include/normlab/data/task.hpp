#pragma once
// Tasks: what the model reads, what it must predict, and (for the algorithmic ones) a seeded
// generator of examples. Lengths are drawn uniformly from [min_len, max_len]; every random number
// comes from normlab::Rng, so a seed gives the same data on every platform.
//
//   reverse   (per token)     tokens: digits "0".."9".  target[i] = tokens[T-1-i].
//             3 1 4 1 5  ->  5 1 4 1 3
//             An encoder sees the whole sequence and its positions, so it can learn to look at the
//             mirrored position; longer test sequences ask whether that rule generalizes.
//
//   sort      (per token)     tokens: digits "0".."9".  targets = the tokens sorted ascending.
//             3 1 4 1 5  ->  1 1 3 4 5
//             Position i needs the i-th smallest token: a counting problem over the whole sequence.
//
//   brackets  (per token)     tokens: "(" ")".  target[i] = nesting depth after token i:
//             classes "0".."14", "15+" (depth 15 or more), and "!" once the prefix has closed more
//             brackets than it opened (from that position to the end: the string can no longer be
//             balanced, so depth is meaningless).
//             ( ( ) ( ) ) )  (  ->  1 2 1 2 1 0 ! !
//             Generated as a random walk: "(" or ")" with equal odds while open brackets remain; at
//             depth 0, "(" with probability 15/16 and an invalid ")" with 1/16. The answer at
//             position i is a prefix count, which attention must reconstruct from positions.
//
//   majority  (per sequence)  tokens: "0" "1".  label = the more frequent bit; a tie goes to the
//             first token's value.
//             1 0 1 1 0  ->  1        0 1 1 0  ->  0 (tie, starts with 0)
//
//   mlm_text  (per token)     character-level masked language modelling on lines of text (the King
//             James Bible, data/kjv/). tokens: "[MASK]", "[UNK]", then every character of the
//             training split. There is no generator: examples come from JSONL files as raw text,
//             and the masks are drawn at batch time (mlm.hpp), so each epoch masks differently.
//
// Data-defined tasks: no rule and no generator; the vocabulary and the labels are those of the
// training file (built by make_data_task), and every example comes from a JSONL file.
//
//   sequence_classification  (per sequence)  {"tokens": "the film was great", "label": "positive"}
//             one label per sequence, predicted by the mean-pooled head (like majority).
//   token_classification     (per token)     {"tokens": "red green blue", "targets": "<s> red green"}
//             one label per position (tagging; also seq2seq-as-tagging such as reverse or shift);
//             a null target (array form) means "no label here".
//
//   Tokens and labels are strings without whitespace (a string value is split on whitespace, an
//   array holds one per entry). Input ids: "[PAD]" = 0 (never produced by normlab, whose batches are
//   packed; reserved for users who pad), "[UNK]" = 1 (any token absent from the training file), then
//   the training file's distinct tokens in byte order. Labels: the training file's distinct labels in
//   byte order, no specials; a label the training file lacks is an error (the head has no output
//   for it).
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/data/vocab.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/rng.hpp"

namespace normlab::data {

enum class TaskKind { reverse, sort, brackets, majority, mlm_text, sequence_classification, token_classification };
// task.name's values (train/config.hpp), in documentation order.
inline constexpr std::pair<TaskKind, const char*> kTaskNames[] = {{TaskKind::reverse, "reverse"},
                                                                  {TaskKind::sort, "sort"},
                                                                  {TaskKind::brackets, "brackets"},
                                                                  {TaskKind::majority, "majority"},
                                                                  {TaskKind::mlm_text, "mlm_text"},
                                                                  {TaskKind::sequence_classification,
                                                                   "sequence_classification"},
                                                                  {TaskKind::token_classification,
                                                                   "token_classification"}};
std::string to_string(TaskKind kind);
// The kind named `name`, or nullopt.
std::optional<TaskKind> find_task_kind(std::string_view name);
// The data-defined tasks: sequence_classification, token_classification.
inline bool is_data_task(TaskKind kind) {
  return kind == TaskKind::sequence_classification || kind == TaskKind::token_classification;
}

// How a user's input string becomes tokens (vocab.hpp): symbols "3 1 2" / "(()())", characters, or
// whitespace-separated words (data-defined tasks: unknown words become "[UNK]").
enum class Segmentation { symbols, characters, words };

inline constexpr const char* kPadToken = "[PAD]";
inline constexpr const char* kUnkToken = "[UNK]";

// How a data-defined task's text becomes words, in its files and at predict time alike
// (docs/config.md, task.lowercase and task.split_punctuation). Words are split on whitespace; then
//   lowercase          ASCII letters are lower-cased ("Great" -> "great"; other bytes unchanged)
//   split_punctuation  every ASCII punctuation character is a word of its own ("good," -> "good" ",";
//                      "don't" -> "don" "'" "t"); sequence_classification only, since it would
//                      change the number of tokens a per-token target list was written for
struct TextOptions {
  bool lowercase = false;
  bool split_punctuation = false;
};
// The words of `text` under `options`, appended to `words`.
void split_words(std::string_view text, const TextOptions& options, std::vector<std::string>& words);
// One word as the options normalize it (lowercase only: a word holds no whitespace).
std::string normalize_word(std::string_view word, const TextOptions& options);

// How a data-defined task's files are read (data/formats.hpp, docs/config.md "Your own data").
struct FileOptions {
  std::string format = "auto";                 // auto (by extension) | jsonl | csv | tsv | conll
  std::string text_field;                      // the key / column of the text ("": tokens in JSONL, text in CSV/TSV)
  std::string label_field;                     // the key / column of the label or tags ("": label / targets in JSONL,
                                               // label / tags in CSV/TSV)
  int64_t max_file_bytes = int64_t{64} << 20;  // larger files are refused before they are read
  int64_t min_count = 1;                       // training tokens seen fewer times are read as [UNK]
};

struct Task {
  std::string name;  // "reverse", "sort", "brackets", "majority", "mlm_text"
  TaskKind kind = TaskKind::reverse;
  TargetKind target_kind = TargetKind::per_token;
  Segmentation segmentation = Segmentation::symbols;
  Vocab input_vocab;          // what the model reads: embedding rows
  Vocab output_vocab;         // the classes it predicts: head outputs (mlm_text: same as input_vocab)
  int32_t max_seq_len = 256;  // longest sequence a data file may hold (the loader refuses longer)
  TextOptions text;           // data-defined tasks: how text becomes words
  FileOptions file;           // data-defined tasks: how files are read

  int32_t input_vocab_size() const { return input_vocab.size(); }
  int32_t num_classes() const { return output_vocab.size(); }
  bool is_masked_lm() const { return kind == TaskKind::mlm_text; }
  bool is_data_defined() const { return is_data_task(kind); }
  bool has_generator() const { return kind != TaskKind::mlm_text && !is_data_defined(); }

  // A user's string as input ids (InputError for unknown symbols / empty input).
  std::vector<int32_t> encode(std::string_view text, std::string_view what = "input") const;
  // Input ids as a readable string: symbols separated by spaces, characters run together.
  std::string decode_input(const std::vector<int32_t>& ids) const;
  // Class ids as a readable string (-1 prints as "_").
  std::string decode_targets(const std::vector<int32_t>& ids) const;
};

// The algorithmic tasks, in a fixed order: reverse, sort, brackets, majority.
const std::vector<std::string>& algorithmic_task_names();

// A data-defined task from its input tokens (without "[PAD]" / "[UNK]") and labels, in the order
// they get ids (a checkpoint stores them so). InputError for an empty list, a duplicate, or a token
// or label that is empty or holds whitespace.
Task make_data_task(TaskKind kind, std::vector<std::string> tokens, std::vector<std::string> labels,
                    int32_t max_seq_len = 4096);

// The strings of one data-defined example, before any vocabulary exists.
struct StringExample {
  std::vector<std::string> tokens;
  std::vector<std::optional<std::string>> labels;  // per sequence: one; per token: one per token (nullopt: none)
};
// The task whose vocabulary and labels are those of `examples` (each sorted by bytes, distinct).
Task make_data_task(TaskKind kind, const std::vector<StringExample>& examples, int32_t max_seq_len = 4096);

// What a training file holds, counted without keeping its examples (a large file's strings would
// take many times its size): each distinct token with its count, each distinct label.
struct VocabularyCounts {
  std::map<std::string, int64_t> tokens;  // "[PAD]" / "[UNK]" written in the data are not counted
  std::set<std::string> labels;
  void add(const StringExample& example);
};
// The task of these counts: tokens seen at least `min_count` times get their own id, rarer ones are
// read as "[UNK]" (so the "[UNK]" row is trained). InputError when min_count leaves no token.
Task make_data_task(TaskKind kind, const VocabularyCounts& counts, int64_t min_count, int32_t max_seq_len = 4096);

// An algorithmic task; InputError for mlm_text (its vocabulary comes from training text: use
// make_text_task) and the data-defined tasks (make_data_task). By name: InputError naming the known
// tasks for any other name.
Task make_task(TaskKind kind);
Task make_task(std::string_view name);

// The masked-LM text task; its character vocabulary is every UTF-8 character that occurs in
// `train_lines`, in code point order, after "[MASK]" (id 0) and "[UNK]" (id 1). InputError if a line
// is not valid UTF-8.
Task make_text_task(const std::vector<std::string>& train_lines, int32_t max_seq_len = 512);

// The correct targets for an input sequence under the task's rule (per_token: (T), per_sequence:
// (1)). UsageError for mlm_text, whose targets come from masking.
std::vector<int32_t> compute_targets(const Task& task, const std::vector<int32_t>& tokens);

// One example of exactly `length` tokens; the tokens are drawn from rng, the targets computed.
Example generate_example(const Task& task, int32_t length, Rng& rng);

// `count` examples with lengths uniform in [min_len, max_len], all drawn from Rng(seed). A stop
// request (io/stop.hpp) throws io::StopRequested.
std::vector<Example> generate_examples(const Task& task, int64_t count, int32_t min_len, int32_t max_len, uint64_t seed,
                                       io::StopFlag stop = nullptr);

// Independent seeds for sub-streams (per split, per epoch, per example): splitmix64 of the pair.
uint64_t derive_seed(uint64_t seed, uint64_t index);

}  // namespace normlab::data
