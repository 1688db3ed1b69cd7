#include "normlab/data/task.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>

#include "normlab/error.hpp"
#include "normlab/names.hpp"

namespace normlab::data {

namespace {

// Depth classes for "brackets": "0".."14", "15+", then "!" for an invalid prefix.
constexpr int32_t kMaxDepthClass = 15;
constexpr int32_t kInvalidDepthClass = kMaxDepthClass + 1;
// At depth 0 a ")" (which makes the prefix invalid) is drawn with probability 1/16.
constexpr uint32_t kInvalidCloseOdds = 16;

std::vector<std::string> digit_symbols(int count) {
  std::vector<std::string> symbols;
  for (int d = 0; d < count; ++d) symbols.push_back(std::to_string(d));
  return symbols;
}

Task symbol_task(std::string name, TaskKind kind, TargetKind target_kind, std::vector<std::string> inputs,
                 std::vector<std::string> outputs) {
  Task task;
  task.name = std::move(name);
  task.kind = kind;
  task.target_kind = target_kind;
  task.segmentation = Segmentation::symbols;
  task.input_vocab = Vocab({}, std::move(inputs));
  task.output_vocab = Vocab({}, std::move(outputs));
  return task;
}

void check_tokens(const Task& task, const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw UsageError(fmt::format("{}: empty sequence", task.name));
  for (int32_t id : tokens) {
    if (id < 0 || id >= task.input_vocab_size()) {
      throw UsageError(fmt::format("{}: token id {} out of range [0, {})", task.name, id, task.input_vocab_size()));
    }
  }
}

}  // namespace

std::vector<int32_t> Task::encode(std::string_view text, std::string_view what) const {
  switch (segmentation) {
    case Segmentation::symbols: return encode_symbols(input_vocab, text, what);
    case Segmentation::characters: return encode_text(input_vocab, text, what);
    case Segmentation::words: {
      std::vector<std::string> words;
      split_words(text, this->text, words);
      if (words.empty()) throw InputError(fmt::format("{}: no words (the input is empty)", what));
      const int32_t unk = input_vocab.id(kUnkToken);
      std::vector<int32_t> ids;
      ids.reserve(words.size());
      // A reserved name typed by the user is an unknown word, never the padding id.
      for (const std::string& w : words) ids.push_back(w == kPadToken ? unk : input_vocab.find(w).value_or(unk));
      return ids;
    }
  }
  throw UsageError("Task::encode: unknown segmentation");
}

std::string Task::decode_input(const std::vector<int32_t>& ids) const {
  return input_vocab.decode(ids, segmentation == Segmentation::characters ? "" : " ");
}

std::string Task::decode_targets(const std::vector<int32_t>& ids) const {
  // Character targets (mlm_text) are separated too: "_" marks positions without a target.
  return output_vocab.decode(ids, " ");
}

const std::vector<std::string>& algorithmic_task_names() {
  static const std::vector<std::string> names = {"reverse", "sort", "brackets", "majority"};
  return names;
}

std::string to_string(TaskKind kind) { return name_in(kTaskNames, kind); }

std::optional<TaskKind> find_task_kind(std::string_view name) { return value_named(kTaskNames, name); }

Task make_data_task(TaskKind kind, std::vector<std::string> tokens, std::vector<std::string> labels,
                    int32_t max_seq_len) {
  const std::string name = to_string(kind);
  if (!is_data_task(kind)) throw UsageError(fmt::format("make_data_task: {} is not a data-defined task", name));
  auto check = [&](const std::vector<std::string>& strings, const char* what) {
    if (strings.empty()) throw InputError(fmt::format("{}: no {}", name, what));
    std::set<std::string_view> seen;
    for (const std::string& s : strings) {
      if (s.empty() || s.find_first_of(" \t\n\r\f\v") != std::string::npos)
        throw InputError(fmt::format("{}: {} \"{}\" is empty or holds whitespace", name, what, s));
      if (!seen.insert(s).second) throw InputError(fmt::format("{}: {} \"{}\" appears twice", name, what, s));
    }
  };
  check(tokens, "token");
  check(labels, "label");
  for (const std::string& t : tokens)
    if (t == kPadToken || t == kUnkToken) throw InputError(fmt::format("{}: token \"{}\" is reserved", name, t));
  Task task;
  task.name = name;
  task.kind = kind;
  task.target_kind = task.kind == TaskKind::sequence_classification ? TargetKind::per_sequence : TargetKind::per_token;
  task.segmentation = Segmentation::words;
  task.input_vocab = Vocab({kPadToken, kUnkToken}, std::move(tokens));
  task.output_vocab = Vocab({}, std::move(labels));
  task.max_seq_len = max_seq_len;
  return task;
}

Task make_data_task(TaskKind kind, const std::vector<StringExample>& examples, int32_t max_seq_len) {
  std::set<std::string> tokens, labels;
  for (const StringExample& example : examples) {
    for (const std::string& t : example.tokens)
      if (t != kPadToken && t != kUnkToken) tokens.insert(t);  // written out, they stand for themselves
    for (const std::optional<std::string>& l : example.labels)
      if (l) labels.insert(*l);
  }
  return make_data_task(kind, std::vector<std::string>(tokens.begin(), tokens.end()),
                        std::vector<std::string>(labels.begin(), labels.end()), max_seq_len);
}

void VocabularyCounts::add(const StringExample& example) {
  for (const std::string& t : example.tokens)
    if (t != kPadToken && t != kUnkToken) ++tokens[t];  // written out, they stand for [UNK]
  for (const std::optional<std::string>& l : example.labels)
    if (l) labels.insert(*l);
}

Task make_data_task(TaskKind kind, const VocabularyCounts& counts, int64_t min_count, int32_t max_seq_len) {
  std::vector<std::string> kept;
  for (const auto& [token, count] : counts.tokens)
    if (count >= min_count) kept.push_back(token);
  if (kept.empty() && !counts.tokens.empty())
    throw InputError(fmt::format("task.min_count {}: no token occurs that often (the most frequent occurs {} times)",
                                 min_count,
                                 std::max_element(counts.tokens.begin(), counts.tokens.end(), [](auto& a, auto& b) {
                                   return a.second < b.second;
                                 })->second));
  return make_data_task(kind, std::move(kept), std::vector<std::string>(counts.labels.begin(), counts.labels.end()),
                        max_seq_len);
}

namespace {

bool is_ascii_punctuation(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return (u >= 33 && u <= 47) || (u >= 58 && u <= 64) || (u >= 91 && u <= 96) || (u >= 123 && u <= 126);
}

}  // namespace

std::string normalize_word(std::string_view word, const TextOptions& options) {
  std::string out(word);
  if (out == kPadToken || out == kUnkToken) return out;  // reserved names stay recognizable
  if (options.lowercase)
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

void split_words(std::string_view text, const TextOptions& options, std::vector<std::string>& words) {
  for_each_word(text, [&](std::string_view raw, size_t) {
    const std::string word = normalize_word(raw, options);
    // A reserved name such as "[UNK]" stays whole: it is one (reserved) token, not five characters.
    if (!options.split_punctuation || word == kPadToken || word == kUnkToken) {
      words.push_back(word);
      return;
    }
    size_t start = 0;
    for (size_t i = 0; i < word.size(); ++i) {
      if (!is_ascii_punctuation(word[i])) continue;
      if (i > start) words.push_back(word.substr(start, i - start));
      words.push_back(word.substr(i, 1));
      start = i + 1;
    }
    if (start < word.size()) words.push_back(word.substr(start));
  });
}

Task make_task(TaskKind kind) {
  switch (kind) {
    case TaskKind::reverse:
      return symbol_task("reverse", kind, TargetKind::per_token, digit_symbols(10), digit_symbols(10));
    case TaskKind::sort: return symbol_task("sort", kind, TargetKind::per_token, digit_symbols(10), digit_symbols(10));
    case TaskKind::brackets: {
      std::vector<std::string> depth_classes = digit_symbols(kMaxDepthClass);
      depth_classes.push_back(fmt::format("{}+", kMaxDepthClass));
      depth_classes.push_back("!");
      return symbol_task("brackets", kind, TargetKind::per_token, {"(", ")"}, std::move(depth_classes));
    }
    case TaskKind::majority: return symbol_task("majority", kind, TargetKind::per_sequence, {"0", "1"}, {"0", "1"});
    case TaskKind::mlm_text:
      throw InputError("task mlm_text: its vocabulary comes from the training text; build it with make_text_task");
    case TaskKind::sequence_classification:
    case TaskKind::token_classification: break;
  }
  throw InputError(
      fmt::format("task {}: its vocabulary and labels come from the training file; build it with "
                  "make_data_task",
                  to_string(kind)));
}

Task make_task(std::string_view name) {
  if (const std::optional<TaskKind> kind = find_task_kind(name)) return make_task(*kind);
  std::vector<std::string_view> known;
  for (const auto& [kind, text] : kTaskNames) known.push_back(text);
  throw InputError(fmt::format("unknown task \"{}\" (known: {})", name, fmt::join(known, ", ")));
}

Task make_text_task(const std::vector<std::string>& train_lines, int32_t max_seq_len) {
  // Byte order of UTF-8 strings is code point order.
  std::set<std::string_view> seen;
  for (const std::string& line : train_lines) {
    for (std::string_view character : utf8_characters(line, "mlm_text: training text")) seen.insert(character);
  }
  std::vector<std::string> characters(seen.begin(), seen.end());
  // "[" would make "[MASK]" typed by a user ambiguous with the characters "[", "M", ...; encode_text
  // resolves that in favour of the special token, which is the useful reading.
  Task task;
  task.name = "mlm_text";
  task.kind = TaskKind::mlm_text;
  task.target_kind = TargetKind::per_token;
  task.segmentation = Segmentation::characters;
  task.input_vocab = Vocab({"[MASK]", "[UNK]"}, std::move(characters));
  task.output_vocab = task.input_vocab;
  task.max_seq_len = max_seq_len;
  return task;
}

std::vector<int32_t> compute_targets(const Task& task, const std::vector<int32_t>& tokens) {
  check_tokens(task, tokens);
  const size_t length = tokens.size();
  switch (task.kind) {
    case TaskKind::reverse: {
      // Input and output vocabularies are both "0".."9", so ids carry over unchanged.
      return std::vector<int32_t>(tokens.rbegin(), tokens.rend());
    }
    case TaskKind::sort: {
      std::vector<int32_t> sorted = tokens;
      std::sort(sorted.begin(), sorted.end());
      return sorted;
    }
    case TaskKind::brackets: {
      const int32_t open = task.input_vocab.id("(");
      std::vector<int32_t> targets(length);
      int32_t depth = 0;
      bool invalid = false;
      for (size_t i = 0; i < length; ++i) {
        depth += tokens[i] == open ? 1 : -1;
        if (depth < 0) invalid = true;
        targets[i] = invalid ? kInvalidDepthClass : std::min(depth, kMaxDepthClass);
      }
      return targets;
    }
    case TaskKind::majority: {
      const int32_t one = task.input_vocab.id("1");
      int64_t ones = std::count(tokens.begin(), tokens.end(), one);
      int64_t zeros = static_cast<int64_t>(length) - ones;
      int32_t winner = ones > zeros ? one : ones < zeros ? task.input_vocab.id("0") : tokens[0];
      // Output classes "0", "1" are spelled like the inputs; map by string, not by id.
      return {task.output_vocab.id(task.input_vocab.token(winner))};
    }
    case TaskKind::mlm_text:
    case TaskKind::sequence_classification:
    case TaskKind::token_classification: break;
  }
  throw UsageError(fmt::format("compute_targets: task {} has no rule; its targets come from {}", task.name,
                               task.is_masked_lm() ? "masking" : "the data"));
}

Example generate_example(const Task& task, int32_t length, Rng& rng) {
  if (!task.has_generator()) throw UsageError(fmt::format("generate_example: task {} has no generator", task.name));
  if (length < 1) throw UsageError(fmt::format("generate_example: length {} < 1", length));
  Example example;
  example.tokens.resize(static_cast<size_t>(length));
  if (task.kind == TaskKind::brackets) {
    const int32_t open = task.input_vocab.id("(");
    const int32_t close = task.input_vocab.id(")");
    int32_t depth = 0;
    for (int32_t i = 0; i < length; ++i) {
      bool opens = depth == 0 ? rng.below(kInvalidCloseOdds) != 0 : rng.below(2) == 0;
      example.tokens[static_cast<size_t>(i)] = opens ? open : close;
      depth += opens ? 1 : -1;
    }
  } else {
    const uint32_t alphabet = static_cast<uint32_t>(task.input_vocab_size());
    for (int32_t& token : example.tokens) token = static_cast<int32_t>(rng.below(alphabet));
  }
  example.targets = compute_targets(task, example.tokens);
  return example;
}

std::vector<Example> generate_examples(const Task& task, int64_t count, int32_t min_len, int32_t max_len, uint64_t seed,
                                       io::StopFlag stop) {
  if (count < 0) throw UsageError(fmt::format("generate_examples: count {} < 0", count));
  if (min_len < 1 || max_len < min_len) {
    throw UsageError(fmt::format("generate_examples: bad length range [{}, {}]", min_len, max_len));
  }
  Rng rng(seed);
  const uint32_t num_lengths = static_cast<uint32_t>(max_len - min_len + 1);
  std::vector<Example> examples;
  examples.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    if (i % 1024 == 0) io::throw_if_stopped(stop);
    int32_t length = min_len + static_cast<int32_t>(rng.below(num_lengths));
    examples.push_back(generate_example(task, length, rng));
  }
  return examples;
}

uint64_t derive_seed(uint64_t seed, uint64_t index) {
  // splitmix64 (Steele, Lea, Flood 2014) applied twice: nearby (seed, index) pairs give unrelated seeds.
  auto splitmix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  return splitmix(splitmix(seed) ^ index);
}

}  // namespace normlab::data
