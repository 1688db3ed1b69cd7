// Tests for the data layer: tasks, vocabularies, JSONL files, packed batches, samplers, buckets.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/data/buckets.hpp"
#include "normlab/data/dataset.hpp"
#include "normlab/data/jsonl.hpp"
#include "normlab/data/mlm.hpp"
#include "normlab/data/splits.hpp"
#include "normlab/data/task.hpp"
#include "normlab/data/vocab.hpp"
#include "normlab/error.hpp"

#include "support.hpp"

using normlab::test::TempDir;

namespace fs = std::filesystem;
using namespace normlab;
using namespace normlab::data;

namespace {

// A fresh directory under the system temp dir, removed when the test ends.

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_all(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

// The InputError message from loading `contents` as a JSONL file of `task` ("" if it loaded).
std::string load_error(const TempDir& dir, const std::string& contents, const Task& task,
                       int64_t max_bytes = kMaxJsonlBytes) {
  const std::string path = dir.sub("case.jsonl");
  write_all(path, contents);
  try {
    load_jsonl(path, task, max_bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Independent answers, computed on the printed strings rather than on ids.
std::vector<std::string> reference_targets(const std::string& task, const std::vector<std::string>& symbols) {
  const size_t n = symbols.size();
  std::vector<std::string> out;
  if (task == "reverse") {
    for (size_t i = 0; i < n; ++i) out.push_back(symbols[n - 1 - i]);
  } else if (task == "sort") {
    std::map<std::string, int> counts;
    for (const std::string& s : symbols) ++counts[s];
    for (auto& [symbol, count] : counts) out.insert(out.end(), static_cast<size_t>(count), symbol);
  } else if (task == "brackets") {
    for (size_t i = 0; i < n; ++i) {
      // Balance of every prefix 0..j for j <= i, counted from scratch.
      int lowest = 0;
      int balance = 0;
      for (size_t j = 0; j <= i; ++j) {
        int opens = static_cast<int>(std::count(symbols.begin(), symbols.begin() + static_cast<long>(j) + 1, "("));
        balance = opens - (static_cast<int>(j) + 1 - opens);
        lowest = std::min(lowest, balance);
      }
      out.push_back(lowest < 0 ? "!" : balance >= 15 ? "15+" : std::to_string(balance));
    }
  } else if (task == "majority") {
    long ones = std::count(symbols.begin(), symbols.end(), "1");
    long zeros = static_cast<long>(n) - ones;
    out.push_back(ones > zeros ? "1" : ones < zeros ? "0" : symbols[0]);
  }
  return out;
}

std::vector<std::string> strings_of(const Vocab& vocab, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(vocab.token(id));
  return out;
}

// A text task over a small fixed corpus, and its raw examples.
std::vector<std::string> sample_lines() {
  return {"In the beginning God created the heaven and the earth.",
          "And the earth was without form, and void; and darkness was upon the face of the deep.",
          "And God said, Let there be light: and there was light.",
          "And God saw the light, that it was good: and God divided the light from the darkness."};
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.tokens == b.tokens && a.offsets == b.offsets && a.targets == b.targets && a.num_targets == b.num_targets &&
         a.target_kind == b.target_kind;
}

}  // namespace

TEST_CASE("data vocab: ids, decode, encode round trip and unknown symbols") {
  Vocab vocab({"[MASK]", "[UNK]"}, {"a", "b", " "});
  CHECK(vocab.size() == 5);
  CHECK(vocab.num_specials() == 2);
  CHECK(vocab.id("[MASK]") == 0);
  CHECK(vocab.id("b") == 3);
  CHECK(vocab.token(4) == " ");
  CHECK(vocab.is_special(1));
  CHECK_FALSE(vocab.is_special(2));
  CHECK_FALSE(vocab.find("c").has_value());
  CHECK_THROWS_AS(vocab.id("c"), UsageError);
  CHECK_THROWS_AS(vocab.token(5), UsageError);
  CHECK_THROWS_AS(Vocab({}, {"x", "x"}), UsageError);
  CHECK_THROWS_AS(Vocab({}, {""}), UsageError);

  // Characters: unknown "c" becomes [UNK]; a written-out [MASK] is the special token.
  std::vector<int32_t> ids = encode_text(vocab, "ab [MASK]c", "input");
  CHECK(ids == std::vector<int32_t>{2, 3, 4, 0, 1});
  CHECK(vocab.decode(ids, "") == "ab [MASK][UNK]");
  CHECK(encode_text(vocab, vocab.decode(ids, ""), "input") == ids);
  CHECK_THROWS_AS(encode_text(vocab, "", "input"), InputError);
  Vocab no_unk({}, {"a"});
  CHECK_THROWS_WITH_AS(encode_text(no_unk, "ab", "--input"), "--input: unknown character \"b\" at character 2",
                       InputError);

  // Symbols: spaced, packed, and bracket strings all read the same way.
  Task reverse = make_task("reverse");
  CHECK(reverse.encode("3 1 2") == std::vector<int32_t>{3, 1, 2});
  CHECK(reverse.encode("312") == std::vector<int32_t>{3, 1, 2});
  CHECK(reverse.encode("  31 2 ") == std::vector<int32_t>{3, 1, 2});
  CHECK(reverse.decode_input({3, 1, 2}) == "3 1 2");
  CHECK(reverse.encode(reverse.decode_input({9, 0, 0, 7})) == std::vector<int32_t>{9, 0, 0, 7});
  Task brackets = make_task("brackets");
  CHECK(brackets.encode("(()())") == std::vector<int32_t>{0, 0, 1, 0, 1, 1});
  CHECK(brackets.decode_targets({1, 16, -1}) == "1 ! _");
  try {
    reverse.encode("3 x 2", "--input");
    FAIL("no error for an unknown symbol");
  } catch (const InputError& e) {
    std::string message = e.what();
    CHECK(message.find("--input") == 0);
    CHECK(message.find("\"x\"") != std::string::npos);
    CHECK(message.find("character 3") != std::string::npos);
  }
  CHECK_THROWS_AS(brackets.encode("(()]"), InputError);
  CHECK_THROWS_AS(reverse.encode("   "), InputError);
}

TEST_CASE("data tasks: targets on hand-checked examples") {
  Task reverse = make_task("reverse");
  Task sort = make_task("sort");
  Task brackets = make_task("brackets");
  Task majority = make_task("majority");
  auto targets = [](const Task& task, const std::string& input) {
    return task.decode_targets(compute_targets(task, task.encode(input)));
  };
  CHECK(targets(reverse, "3 1 4 1 5") == "5 1 4 1 3");
  CHECK(targets(reverse, "7") == "7");
  CHECK(targets(sort, "3 1 4 1 5 9 2 6") == "1 1 2 3 4 5 6 9");
  CHECK(targets(brackets, "((()())") == "1 2 3 2 3 2 1");
  CHECK(targets(brackets, "(()))()(") == "1 2 1 0 ! ! ! !");
  CHECK(targets(brackets, ")") == "!");
  CHECK(targets(brackets, std::string(17, '(') + ")") == "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15+ 15+ 15+ 15+");
  CHECK(targets(majority, "1 0 1 1 0") == "1");
  CHECK(targets(majority, "0 0 1") == "0");
  CHECK(targets(majority, "0 1 1 0") == "0");  // tie: the first token
  CHECK(targets(majority, "1 0") == "1");      // tie: the first token
  CHECK(reverse.target_kind == TargetKind::per_token);
  CHECK(majority.target_kind == TargetKind::per_sequence);
  CHECK(brackets.num_classes() == 17);
  CHECK(reverse.num_classes() == 10);
  CHECK(majority.num_classes() == 2);
  CHECK_THROWS_AS(make_task("copy"), InputError);
  CHECK_THROWS_AS(make_task("mlm_text"), InputError);
}

TEST_CASE("data tasks: generated targets match an independent recomputation") {
  for (const std::string& name : algorithmic_task_names()) {
    CAPTURE(name);
    Task task = make_task(name);
    std::vector<Example> examples = generate_examples(task, 300, 1, 40, 7);
    for (const Example& example : examples) {
      std::vector<std::string> symbols = strings_of(task.input_vocab, example.tokens);
      REQUIRE(strings_of(task.output_vocab, example.targets) == reference_targets(name, symbols));
    }
  }
}

TEST_CASE("data tasks: lengths in range and varied, generation seeded") {
  for (const std::string& name : algorithmic_task_names()) {
    CAPTURE(name);
    Task task = make_task(name);
    std::vector<Example> examples = generate_examples(task, 500, 3, 17, 11);
    std::set<size_t> lengths;
    std::set<int32_t> symbols_seen;
    for (const Example& example : examples) {
      CHECK(example.tokens.size() >= 3);
      CHECK(example.tokens.size() <= 17);
      lengths.insert(example.tokens.size());
      symbols_seen.insert(example.tokens.begin(), example.tokens.end());
    }
    CHECK(lengths.size() == 15);  // every length 3..17 appears in 500 draws
    CHECK(static_cast<int32_t>(symbols_seen.size()) == task.input_vocab_size());

    std::vector<Example> again = generate_examples(task, 500, 3, 17, 11);
    std::vector<Example> other = generate_examples(task, 500, 3, 17, 12);
    int same_as_again = 0;
    int same_as_other = 0;
    for (size_t i = 0; i < examples.size(); ++i) {
      same_as_again += examples[i].tokens == again[i].tokens && examples[i].targets == again[i].targets;
      same_as_other += examples[i].tokens == other[i].tokens;
    }
    CHECK(same_as_again == 500);
    CHECK(same_as_other < 100);  // a few short sequences may coincide by chance
  }
  // Brackets: mostly valid prefixes, but invalid ones occur.
  Task brackets = make_task("brackets");
  int invalid = 0;
  for (const Example& example : generate_examples(brackets, 1000, 1, 32, 3)) {
    invalid += example.targets.back() == brackets.output_vocab.id("!");
  }
  CHECK(invalid > 50);
  CHECK(invalid < 500);
  CHECK_THROWS_AS(generate_examples(brackets, 3, 0, 4, 1), UsageError);
  CHECK_THROWS_AS(generate_examples(brackets, 3, 5, 4, 1), UsageError);
}

TEST_CASE("data batch: packing offsets, targets and counts") {
  std::vector<Example> examples = {
      {{7, 3}, {3, 7}},
      {{1, 1, 4, 0, 2}, {-1, 1, -1, -1, 2}},
      {{9}, {9}},
  };
  Batch batch = pack_batch(examples, TargetKind::per_token);
  CHECK(batch.batch_size() == 3);
  CHECK(batch.offsets == std::vector<int64_t>{0, 2, 7, 8});
  CHECK(batch.tokens == std::vector<int32_t>{7, 3, 1, 1, 4, 0, 2, 9});
  CHECK(batch.targets == std::vector<int32_t>{3, 7, -1, 1, -1, -1, 2, 9});
  CHECK(batch.num_real_tokens == 8);
  CHECK(batch.num_targets == 5);
  CHECK(batch.length(1) == 5);
  CHECK(batch.max_length() == 5);
  for (int64_t b = 0; b < batch.batch_size(); ++b) {
    const Example& example = examples[static_cast<size_t>(b)];
    CHECK(std::equal(example.tokens.begin(), example.tokens.end(), batch.tokens.begin() + batch.offsets[b]));
  }

  std::vector<Example> sequences = {{{1, 0, 1}, {1}}, {{0}, {0}}};
  Batch per_sequence = pack_batch(sequences, TargetKind::per_sequence);
  CHECK(per_sequence.targets == std::vector<int32_t>{1, 0});
  CHECK(per_sequence.offsets == std::vector<int64_t>{0, 3, 4});
  CHECK(per_sequence.num_targets == 2);

  CHECK_THROWS_AS(pack_batch(sequences, TargetKind::per_token), UsageError);
  CHECK_THROWS_AS(pack_batch(examples, TargetKind::per_sequence), UsageError);
  CHECK_THROWS_AS(pack_batch(std::vector<Example>{{{}, {}}}, TargetKind::per_token), UsageError);
  CHECK_THROWS_AS(pack_batch(std::vector<Example>{}, TargetKind::per_token), UsageError);
}

TEST_CASE("data jsonl: round trip for every kind of task") {
  TempDir dir;
  for (const std::string& name : algorithmic_task_names()) {
    CAPTURE(name);
    Task task = make_task(name);
    std::vector<Example> examples = generate_examples(task, 50, 1, 20, 5);
    const std::string path = dir.sub(name + ".jsonl");
    write_jsonl(path, examples, task);
    std::vector<Example> loaded = load_jsonl(path, task);
    REQUIRE(loaded.size() == examples.size());
    for (size_t i = 0; i < loaded.size(); ++i) {
      CHECK(loaded[i].tokens == examples[i].tokens);
      CHECK(loaded[i].targets == examples[i].targets);
    }
  }
  // The documented line formats, exactly.
  Task reverse = make_task("reverse");
  CHECK(example_to_jsonl({{3, 1, 2}, {2, 1, 3}}, reverse) == R"({"tokens":["3","1","2"],"targets":["2","1","3"]})");
  CHECK(example_to_jsonl({{3, 1}, {-1, 3}}, reverse) == R"({"tokens":["3","1"],"targets":[null,"3"]})");
  Task majority = make_task("majority");
  CHECK(example_to_jsonl({{1, 0, 1}, {1}}, majority) == R"({"tokens":["1","0","1"],"label":"1"})");
  // null targets survive a round trip; key order and spaces do not matter when reading.
  Example parsed = parse_jsonl_line(R"( { "targets" : [null, "3"], "tokens" : ["3", "1"] } )", reverse, "x:1");
  CHECK(parsed.targets == std::vector<int32_t>{-1, 3});
  CHECK(parsed.tokens == std::vector<int32_t>{3, 1});

  // Text: lines come back as the same characters; characters outside the vocabulary become [UNK].
  Task text = make_text_task(sample_lines());
  const std::string path = dir.sub("text.jsonl");
  write_all(path, "{\"text\":\"In the beginning\"}\r\n{\"text\":\"Zion & light\"}\n");
  std::vector<Example> loaded = load_jsonl(path, text);
  REQUIRE(loaded.size() == 2);
  CHECK(text.decode_input(loaded[0].tokens) == "In the beginning");
  CHECK(loaded[0].targets.empty());
  CHECK(text.decode_input(loaded[1].tokens) == "[UNK]ion [UNK] light");
  write_jsonl(dir.sub("text2.jsonl"), loaded, text);
  std::vector<Example> reloaded = load_jsonl(dir.sub("text2.jsonl"), text);
  CHECK(reloaded[1].tokens == loaded[1].tokens);
  CHECK(load_text_lines(path, 100) == std::vector<std::string>{"In the beginning", "Zion & light"});
}

TEST_CASE("data jsonl: every malformed file is an InputError naming file and line") {
  TempDir dir;
  const std::string path = dir.sub("case.jsonl");
  Task reverse = make_task("reverse");
  Task majority = make_task("majority");
  Task text = make_text_task(sample_lines());
  const std::string good = R"({"tokens":["3","1"],"targets":["1","3"]})"
                           "\n";
  const std::string good_majority = R"({"tokens":["1"],"label":"1"})"
                                    "\n";
  const std::string good_text = R"({"text":"In the"})"
                                "\n";

  struct Case {
    const char* what;
    const Task* task;
    std::string contents;
    std::string line;    // expected "PATH:LINE" prefix's line
    std::string detail;  // expected fragment of the message
  };
  const std::string long_tokens = [] {
    std::string tokens = "[";
    for (int i = 0; i < 257; ++i) tokens += std::string(i ? "," : "") + "\"1\"";
    return tokens + "]";
  }();
  const std::vector<Case> cases = {
      {"malformed JSON", &reverse,
       good + R"({"tokens":["3"],"targets":["3"])"
              "\n",
       "2", "malformed JSON"},
      {"blank line", &reverse, good + "\n" + good, "2", "blank line"},
      {"not an object", &reverse, good + good + "[1,2]\n", "3", "expected a JSON object"},
      {"missing key", &reverse,
       good + R"({"tokens":["3"]})"
              "\n",
       "2", "missing key \"targets\""},
      {"extra key", &reverse,
       R"({"tokens":["3"],"targets":["3"],"id":4})"
       "\n",
       "1", "unexpected key \"id\""},
      {"repeated key", &reverse,
       R"({"tokens":["3"],"targets":["3"],"tokens":["4"]})"
       "\n",
       "1", "appears twice"},
      {"tokens not an array", &reverse,
       good + R"({"tokens":"31","targets":["1","3"]})"
              "\n",
       "2", "tokens: expected an array"},
      {"token not a string", &reverse,
       good + R"({"tokens":[3,1],"targets":["1","3"]})"
              "\n",
       "2", "tokens[0]: expected a string, got a number"},
      {"unknown symbol", &reverse,
       good + R"({"tokens":["3","a"],"targets":["1","3"]})"
              "\n",
       "2", "tokens[1]: unknown symbol \"a\""},
      {"empty sequence", &reverse,
       good + R"({"tokens":[],"targets":[]})"
              "\n",
       "2", "empty sequence"},
      {"too long", &reverse, good + R"({"tokens":)" + long_tokens + R"(,"targets":)" + long_tokens + "}\n", "2",
       "more than the limit of 256"},
      {"targets length", &reverse,
       good + R"({"tokens":["3","1"],"targets":["1"]})"
              "\n",
       "2", "1 entries but tokens has 2"},
      {"targets not an array", &reverse,
       good + R"({"tokens":["3"],"targets":"3"})"
              "\n",
       "2", "targets: expected an array"},
      {"unknown class", &reverse,
       good + R"({"tokens":["3","1"],"targets":["1","x"]})"
              "\n",
       "2", "targets[1]: unknown class \"x\""},
      {"target wrong type", &reverse,
       good + R"({"tokens":["3","1"],"targets":["1",true]})"
              "\n",
       "2", "targets[1]: expected a string, got a boolean"},
      {"label missing", &majority,
       good_majority + R"({"tokens":["1"],"targets":["1"]})"
                       "\n",
       "2", "unexpected key \"targets\""},
      {"label wrong type", &majority,
       good_majority + R"({"tokens":["1"],"label":1})"
                       "\n",
       "2", "label: expected a string, got a number"},
      {"label unknown", &majority,
       good_majority + good_majority +
           R"({"tokens":["1"],"label":"2"})"
           "\n",
       "3", "label: unknown class \"2\""},
      {"text wrong type", &text,
       good_text + R"({"text":["I","n"]})"
                   "\n",
       "2", "text: expected a string, got an array"},
      {"text empty", &text,
       good_text + R"({"text":""})"
                   "\n",
       "2", "text: empty string"},
      {"text too long", &text, good_text + R"({"text":")" + std::string(513, 'a') + "\"}\n", "2",
       "more than the limit of 512"},
      {"text extra key", &text,
       R"({"text":"a","label":"1"})"
       "\n",
       "1", "unexpected key \"label\""},
      {"text invalid UTF-8", &text, good_text + "{\"text\":\"\xff\"}\n", "2", "invalid UTF-8 (byte 0xff at column 10"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::string message = load_error(dir, c.contents, *c.task);
    CAPTURE(message);
    CHECK(message.find(path + ":" + c.line + ": ") == 0);
    CHECK(message.find(c.detail) != std::string::npos);
  }

  // Whole-file problems name the file.
  std::string empty = load_error(dir, "", reverse);
  CHECK(empty.find(path + ": empty file") == 0);
  std::string too_big = load_error(dir, good + good, reverse, static_cast<int64_t>(good.size()));
  CHECK(too_big.find(path) == 0);
  CHECK(too_big.find("bytes") != std::string::npos);
  CHECK_THROWS_WITH_AS(load_jsonl(dir.sub("missing.jsonl"), reverse),
                       doctest::Contains(dir.sub("missing.jsonl").c_str()), InputError);
  // A file without a final newline and a CRLF file are fine.
  CHECK(load_error(dir, good + good.substr(0, good.size() - 1), reverse).empty());
  CHECK(load_error(dir,
                   R"({"tokens":["3"],"targets":["3"]})"
                   "\r\n",
                   reverse)
            .empty());
}

TEST_CASE("data mlm: BERT masking fractions and targets only at selected positions") {
  Task text = make_text_task(sample_lines());
  const Vocab& vocab = text.input_vocab;
  const int32_t mask_id = vocab.id("[MASK]");
  const int32_t unk_id = vocab.id("[UNK]");
  // 1000 lines of 100 characters; every 10th position is [UNK], which must never be selected.
  Rng data_rng(99);
  Rng mask_rng(5);
  int64_t candidates = 0, selected = 0, masked = 0, replaced = 0, unchanged = 0;
  for (int line = 0; line < 1000; ++line) {
    std::vector<int32_t> tokens(100);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] =
          i % 10 == 9 ? unk_id : 2 + static_cast<int32_t>(data_rng.below(static_cast<uint32_t>(vocab.size() - 2)));
    }
    Example example = mask_tokens(tokens, vocab, MaskConfig{}, mask_rng);
    REQUIRE(example.tokens.size() == tokens.size());
    REQUIRE(example.targets.size() == tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == unk_id) {
        CHECK(example.targets[i] == -1);
        CHECK(example.tokens[i] == unk_id);
        continue;
      }
      ++candidates;
      if (example.targets[i] == -1) {
        REQUIRE(example.tokens[i] == tokens[i]);  // not selected: untouched
        continue;
      }
      REQUIRE(example.targets[i] == tokens[i]);  // the target is the original character
      ++selected;
      if (example.tokens[i] == mask_id) {
        ++masked;
      } else if (example.tokens[i] == tokens[i]) {
        ++unchanged;
      } else {
        REQUIRE_FALSE(vocab.is_special(example.tokens[i]));  // random replacements are ordinary symbols
        ++replaced;
      }
    }
  }
  const double symbols = vocab.size() - vocab.num_specials();
  const double select_fraction = double(selected) / double(candidates);
  const double mask_fraction = double(masked) / double(selected);
  // A random replacement equals the original with probability 1/symbols and then counts as unchanged.
  const double replaced_fraction = double(replaced) / double(selected);
  const double unchanged_fraction = double(unchanged) / double(selected);
  CHECK(std::abs(select_fraction - 0.15) < 0.005);
  CHECK(std::abs(mask_fraction - 0.80) < 0.015);
  CHECK(std::abs(replaced_fraction - 0.10 * (1.0 - 1.0 / symbols)) < 0.01);
  CHECK(std::abs(unchanged_fraction - (0.10 + 0.10 / symbols)) < 0.01);

  // A short line still gets one target.
  Rng rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    Example one = mask_tokens({3, 4}, vocab, MaskConfig{}, rng);
    CHECK(std::count_if(one.targets.begin(), one.targets.end(), [](int32_t t) { return t != -1; }) >= 1);
  }

  // Evaluation masks depend only on the seed.
  std::vector<Example> raw;
  for (const std::string& line : sample_lines()) raw.push_back({text.encode(line), {}});
  std::vector<Example> first = mask_examples(raw, text, MaskConfig{}, 42);
  std::vector<Example> second = mask_examples(raw, text, MaskConfig{}, 42);
  std::vector<Example> other = mask_examples(raw, text, MaskConfig{}, 43);
  bool all_same = true, any_different = false;
  for (size_t i = 0; i < raw.size(); ++i) {
    all_same = all_same && first[i].tokens == second[i].tokens && first[i].targets == second[i].targets;
    any_different = any_different || first[i].targets != other[i].targets;
  }
  CHECK(all_same);
  CHECK(any_different);
  CHECK_THROWS_AS(mask_examples(raw, make_task("reverse"), MaskConfig{}, 1), UsageError);
}

TEST_CASE("data sampler: epochs cover every example once, reshuffled, and resume exactly") {
  Task reverse = make_task("reverse");
  // 103 distinct examples: example i spells 1000 + i.
  std::vector<Example> examples;
  for (int i = 0; i < 103; ++i) {
    Example example;
    example.tokens = reverse.encode(std::to_string(1000 + i));
    example.targets = compute_targets(reverse, example.tokens);
    examples.push_back(example);
  }
  Dataset dataset(reverse, examples);
  CHECK(dataset.size() == 103);
  CHECK(dataset.min_length() == 4);
  CHECK(dataset.max_length() == 4);

  SamplerOptions options;
  options.batch_size = 10;
  options.seed = 3;
  BatchSampler sampler(dataset, options);
  CHECK(sampler.batches_per_epoch() == 11);
  std::vector<std::vector<std::string>> epoch_orders(2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    CHECK(sampler.epoch() == static_cast<uint64_t>(epoch));
    for (int b = 0; b < 11; ++b) {
      Batch batch = sampler.next();
      CHECK(batch.batch_size() == (b < 10 ? 10 : 3));
      for (int64_t s = 0; s < batch.batch_size(); ++s) {
        std::vector<int32_t> tokens(batch.tokens.begin() + batch.offsets[s],
                                    batch.tokens.begin() + batch.offsets[s + 1]);
        epoch_orders[static_cast<size_t>(epoch)].push_back(reverse.input_vocab.decode(tokens, ""));
      }
    }
  }
  CHECK(sampler.epoch() == 2);
  for (const auto& order : epoch_orders) {
    std::set<std::string> unique(order.begin(), order.end());
    CHECK(order.size() == 103);
    CHECK(unique.size() == 103);
  }
  CHECK(epoch_orders[0] != epoch_orders[1]);

  // Unshuffled: file order.
  SamplerOptions in_order = options;
  in_order.shuffle = false;
  BatchSampler ordered(dataset, in_order);
  ordered.next();
  Batch second = ordered.next();
  CHECK(reverse.decode_input({second.tokens.begin(), second.tokens.begin() + second.offsets[1]}) == "1 0 1 0");

  // drop_last: 10 full batches per epoch.
  SamplerOptions drop = options;
  drop.drop_last = true;
  BatchSampler dropping(dataset, drop);
  CHECK(dropping.batches_per_epoch() == 10);
  for (int b = 0; b < 25; ++b) CHECK(dropping.next().batch_size() == 10);
  CHECK(dropping.epoch() == 2);

  // Same seed, same stream; other seed, other stream.
  BatchSampler twin(dataset, options);
  SamplerOptions other_seed = options;
  other_seed.seed = 4;
  BatchSampler stranger(dataset, other_seed);
  BatchSampler fresh(dataset, options);
  CHECK(same_batch(twin.next(), fresh.next()));
  CHECK_FALSE(same_batch(stranger.next(), BatchSampler(dataset, options).next()));

  // Resume: save after 7 batches (mid-epoch), continue 30 batches across epoch boundaries.
  BatchSampler original(dataset, options);
  for (int b = 0; b < 7; ++b) original.next();
  SamplerState saved =
      sampler_state_from_json(nlohmann::json::parse(sampler_state_to_json(original.state()).dump()), "state");
  CHECK(saved == original.state());
  std::vector<Batch> expected;
  for (int b = 0; b < 30; ++b) expected.push_back(original.next());
  BatchSampler resumed(dataset, options);
  resumed.restore(saved);
  for (int b = 0; b < 30; ++b) REQUIRE(same_batch(resumed.next(), expected[static_cast<size_t>(b)]));
  CHECK(resumed.state() == original.state());

  SamplerOptions other_batch = options;
  other_batch.batch_size = 11;
  BatchSampler mismatched(dataset, other_batch);
  CHECK_THROWS_AS(mismatched.restore(saved), InputError);
  CHECK_THROWS_AS(sampler_state_from_json(nlohmann::json{{"seed", 1}}, "ckpt"), InputError);
  SamplerOptions empty_batches = options;
  empty_batches.batch_size = 0;
  CHECK_THROWS_AS(BatchSampler(dataset, empty_batches), UsageError);
}

TEST_CASE("data sampler: masked-LM batches are masked afresh each epoch and resume exactly") {
  Task text = make_text_task(sample_lines());
  std::vector<Example> raw;
  for (const std::string& line : sample_lines()) raw.push_back({text.encode(line), {}});
  Dataset dataset(text, raw);
  SamplerOptions options;
  options.batch_size = 4;
  options.shuffle = false;  // same order every epoch: only the masks differ
  BatchSampler sampler(dataset, options);
  Batch first_epoch = sampler.next();
  Batch second_epoch = sampler.next();
  CHECK(first_epoch.tokens.size() == second_epoch.tokens.size());
  CHECK(first_epoch.targets != second_epoch.targets);
  CHECK(first_epoch.num_targets > 0);
  CHECK(first_epoch.num_targets ==
        std::count_if(first_epoch.targets.begin(), first_epoch.targets.end(), [](int32_t t) { return t != -1; }));

  SamplerState saved = sampler.state();
  std::vector<Batch> expected;
  for (int b = 0; b < 5; ++b) expected.push_back(sampler.next());
  BatchSampler resumed(dataset, options);
  resumed.restore(saved);
  for (int b = 0; b < 5; ++b) CHECK(same_batch(resumed.next(), expected[static_cast<size_t>(b)]));

  // Evaluation batches: fixed masks for a fixed seed, in file order.
  std::vector<Batch> eval_a = ordered_batches(dataset, 3, 7);
  std::vector<Batch> eval_b = ordered_batches(dataset, 3, 7);
  REQUIRE(eval_a.size() == 2);
  CHECK(eval_a[1].batch_size() == 1);
  CHECK(same_batch(eval_a[0], eval_b[0]));
  CHECK(same_batch(eval_a[1], eval_b[1]));
}

TEST_CASE("data generator sampler: lengths in range, seeded, resumable") {
  GeneratorOptions options;
  options.batch_size = 16;
  options.min_len = 5;
  options.max_len = 9;
  options.seed = 8;
  GeneratorSampler sampler(make_task("sort"), options);
  std::set<int64_t> lengths;
  for (int b = 0; b < 10; ++b) {
    Batch batch = sampler.next();
    CHECK(batch.batch_size() == 16);
    for (int64_t s = 0; s < batch.batch_size(); ++s) {
      CHECK(batch.length(s) >= 5);
      CHECK(batch.length(s) <= 9);
      lengths.insert(batch.length(s));
    }
  }
  CHECK(lengths.size() == 5);
  GeneratorState saved = generator_state_from_json(generator_state_to_json(sampler.state()), "state");
  CHECK(saved.batches_drawn == 10);
  Batch expected = sampler.next();
  GeneratorSampler resumed(make_task("sort"), options);
  resumed.restore(saved);
  CHECK(same_batch(resumed.next(), expected));
  GeneratorSampler restarted(make_task("sort"), options);
  CHECK_FALSE(same_batch(restarted.next(), expected));
  CHECK_THROWS_AS(GeneratorSampler(make_text_task(sample_lines()), options), UsageError);
}

TEST_CASE("data buckets: fixed width, cut at the training maximum") {
  std::vector<LengthBucket> buckets = make_length_buckets(64, 8, 20);
  std::vector<std::string> labels;
  for (const LengthBucket& bucket : buckets) labels.push_back(bucket.label() + (bucket.beyond_train_max ? "*" : ""));
  CHECK(labels ==
        std::vector<std::string>{"1-8", "9-16", "17-20", "21-24*", "25-32*", "33-40*", "41-48*", "49-56*", "57-64*"});
  for (int32_t length = 1; length <= 64; ++length) {
    int64_t index = find_bucket(buckets, length);
    REQUIRE(index >= 0);
    CHECK(buckets[static_cast<size_t>(index)].beyond_train_max == (length > 20));
  }
  CHECK(find_bucket(buckets, 0) == -1);
  CHECK(find_bucket(buckets, 65) == -1);

  std::vector<LengthBucket> aligned = make_length_buckets(64, 16, 32);
  REQUIRE(aligned.size() == 4);
  CHECK_FALSE(aligned[1].beyond_train_max);
  CHECK(aligned[2].beyond_train_max);
  std::vector<LengthBucket> unknown = make_length_buckets(10, 4, 0);
  CHECK(unknown.back().label() == "9-10");
  CHECK(std::none_of(unknown.begin(), unknown.end(), [](const LengthBucket& b) { return b.beyond_train_max; }));
  CHECK(make_length_buckets(5, 4, 4).back().label() == "5");
  CHECK_THROWS_AS(make_length_buckets(0, 4, 1), UsageError);
}

TEST_CASE("data shipped task splits: regenerate byte for byte, valid, longer test lengths") {
  TempDir dir;
  const std::string data_dir = std::string(NORMLAB_SOURCE_DIR) + "/data";
  for (const std::string& name : algorithmic_task_names()) {
    CAPTURE(name);
    Task task = make_task(name);
    write_task_splits(task, dir.sub(name));
    for (const char* split : {"train", "valid", "test"}) {
      CAPTURE(split);
      const std::string shipped = data_dir + "/" + name + "/" + split + ".jsonl";
      REQUIRE(fs::exists(shipped));
      CHECK(read_all(shipped) == read_all(dir.sub(name) + "/" + split + ".jsonl"));
      Dataset dataset = Dataset::load(shipped, task);
      for (const Example& example : dataset.examples()) {
        REQUIRE(example.targets == compute_targets(task, example.tokens));
      }
      CHECK(dataset.min_length() == 1);
      CHECK(dataset.max_length() == (std::string(split) == "train" ? 32 : 64));
    }
  }
}

TEST_CASE("data text splits: references dropped, length filter, block split") {
  TempDir dir;
  std::string verses;
  std::vector<std::string> kept;
  for (int i = 0; i < 250; ++i) {
    std::string text = "Verse number " + std::to_string(i) + " of the test.";
    if (i % 50 == 7) text = "Too short.";
    if (text.size() >= 16) kept.push_back(text);
    verses += "Ge1:" + std::to_string(i + 1) + " " + text + " \n";
  }
  write_all(dir.sub("verses.txt"), verses);
  write_text_splits(dir.sub("verses.txt"), dir.sub("out"));
  std::vector<std::string> train = load_text_lines(dir.sub("out/train.jsonl"), 160);
  std::vector<std::string> valid = load_text_lines(dir.sub("out/valid.jsonl"), 160);
  std::vector<std::string> test = load_text_lines(dir.sub("out/test.jsonl"), 160);
  REQUIRE(kept.size() == 245);
  // Blocks of 100 kept verses: 80 train, 10 valid, 10 test; the last, partial block is all train.
  CHECK(train.size() == 80 + 80 + 45);
  CHECK(valid.size() == 20);
  CHECK(test.size() == 20);
  CHECK(train[0] == "Verse number 0 of the test.");
  CHECK(valid[0] == kept[80]);
  CHECK(test[0] == kept[90]);
  CHECK(train[80] == kept[100]);
  CHECK(test.back() == kept[199]);

  write_all(dir.sub("bad.txt"), "Ge1:1 In the beginning God created the heaven.\nNoReference\n");
  CHECK_THROWS_WITH_AS(write_text_splits(dir.sub("bad.txt"), dir.sub("out2")),
                       doctest::Contains((dir.sub("bad.txt") + ":2: ").c_str()), InputError);
  CHECK_THROWS_AS(write_text_splits(dir.sub("missing.txt"), dir.sub("out3")), InputError);
}

TEST_CASE("data shipped kjv splits: load, vocabulary, size, and regenerate when bible is installed") {
  const std::string kjv = std::string(NORMLAB_SOURCE_DIR) + "/data/kjv";
  std::vector<std::string> train_lines = load_text_lines(kjv + "/train.jsonl", 160);
  Task text = make_text_task(train_lines);
  CHECK(text.input_vocab.id("[MASK]") == 0);
  CHECK(text.input_vocab.id("[UNK]") == 1);
  CHECK(text.input_vocab.find("a").has_value());
  CHECK(text.input_vocab.find(" ").has_value());
  CHECK(text.input_vocab.size() > 50);
  int64_t total_bytes = 0;
  for (const char* split : {"train", "valid", "test"}) {
    CAPTURE(split);
    const std::string path = kjv + "/" + split + ".jsonl";
    total_bytes += static_cast<int64_t>(fs::file_size(path));
    Dataset dataset = Dataset::load(path, text);
    CHECK(dataset.size() > 300);
    CHECK(dataset.min_length() >= 16);
    CHECK(dataset.max_length() <= 160);
  }
  CHECK(total_bytes < (int64_t{1} << 20));
  CHECK(train_lines[0] == "In the beginning God created the heaven and the earth.");

  if (!fs::exists("/usr/bin/bible") || !fs::exists("/usr/lib/bible.data")) {
    MESSAGE("bible (Debian bible-kjv) not installed: shipped kjv splits not regenerated");
    return;
  }
  TempDir dir;
  const std::string command = "/usr/bin/bible -f Ge1:1-De34:12 > '" + dir.sub("verses.txt") + "' 2>/dev/null";
  REQUIRE(std::system(command.c_str()) == 0);
  write_text_splits(dir.sub("verses.txt"), dir.sub("kjv"));
  for (const char* split : {"train", "valid", "test"}) {
    CAPTURE(split);
    CHECK(read_all(kjv + "/" + split + ".jsonl") == read_all(dir.sub("kjv") + "/" + split + ".jsonl"));
  }
}

// ---- length regimes (data/regime.hpp): single, bucketed and mixed batches, tokens matched

TEST_CASE("length regime: tokens per batch matched to a mixed batch's mean, names round-trip") {
  CHECK(matched_tokens_per_batch(32, 1, 16) == 272);  // 32 x 8.5
  CHECK(matched_tokens_per_batch(3, 1, 2) == 5);      // 4.5 rounds up
  for (const char* name : {"mixed", "single", "bucketed"}) CHECK(to_string(parse_length_regime(name)) == name);
  CHECK_THROWS_WITH_AS(parse_length_regime("sorted"), doctest::Contains("choose mixed, single, bucketed"), UsageError);
}

TEST_CASE("length regime: single batches hold sequences of length max_len only, nearest to the matched tokens") {
  const Task task = make_task("reverse");
  GeneratorOptions options;
  options.batch_size = 32;
  options.min_len = 1;
  options.max_len = 16;
  options.regime = LengthRegime::single;
  GeneratorSampler sampler(task, options);
  for (int i = 0; i < 5; ++i) {
    const Batch batch = sampler.next();
    CHECK(batch.batch_size() == 17);  // 272 tokens / 16
    CHECK(batch.min_length() == 16);
    CHECK(batch.max_length() == 16);
  }
  options.max_len = 15;  // 32 x 8 = 256 tokens: 17 x 15 = 255 is nearer than 18 x 15 = 270
  GeneratorSampler odd(task, options);
  CHECK(odd.next().num_real_tokens == 255);
}

TEST_CASE("length regime: bucketed batches stay in one bucket and see each length as often as mixed ones") {
  const Task task = make_task("reverse");
  GeneratorOptions options;
  options.batch_size = 16;
  options.min_len = 1;
  options.max_len = 20;  // buckets 1-8, 9-16, 17-20 (the last one cut)
  options.bucket_width = 8;
  options.seed = 3;
  const int64_t tokens = matched_tokens_per_batch(16, 1, 20);  // 168
  std::map<LengthRegime, std::vector<double>> sequences_of_length;
  std::map<LengthRegime, double> mean_tokens;
  const int kBatches = 3000;
  for (LengthRegime regime : {LengthRegime::mixed, LengthRegime::bucketed}) {
    options.regime = regime;
    GeneratorSampler sampler(task, options);
    std::vector<double>& counts = sequences_of_length[regime];
    counts.assign(21, 0.0);
    for (int i = 0; i < kBatches; ++i) {
      const Batch batch = sampler.next();
      mean_tokens[regime] += double(batch.num_real_tokens) / kBatches;
      for (int64_t b = 0; b < batch.batch_size(); ++b) counts[size_t(batch.length(b))] += 1.0 / kBatches;
      if (regime != LengthRegime::bucketed) continue;
      CAPTURE(i);
      CHECK((batch.min_length() - 1) / 8 == (batch.max_length() - 1) / 8);  // one bucket
      // nearest to the matched count: within half of the bucket's longest sequence
      CHECK(std::abs(double(batch.num_real_tokens - tokens)) <= batch.max_length() / 2.0 + 0.5);
    }
  }
  CHECK(mean_tokens[LengthRegime::mixed] == doctest::Approx(tokens).epsilon(0.02));
  CHECK(mean_tokens[LengthRegime::bucketed] == doctest::Approx(tokens).epsilon(0.03));
  // Mixed: 16 / 20 = 0.8 sequences of each length per batch; bucketed the same in expectation.
  for (int length = 1; length <= 20; ++length) {
    CAPTURE(length);
    CHECK(sequences_of_length[LengthRegime::mixed][size_t(length)] == doctest::Approx(0.8).epsilon(0.06));
    CHECK(sequences_of_length[LengthRegime::bucketed][size_t(length)] == doctest::Approx(0.8).epsilon(0.12));
  }
}

TEST_CASE("length regime: mixed batches are drawn exactly as before the regimes existed") {
  const Task task = make_task("majority");
  GeneratorOptions options;
  options.batch_size = 9;
  options.min_len = 2;
  options.max_len = 11;
  options.seed = 17;
  GeneratorSampler sampler(task, options);
  Rng rng(17);  // the original loop: a length, then its example, from one generator
  for (int i = 0; i < 4; ++i) {
    std::vector<Example> examples;
    for (int b = 0; b < 9; ++b) {
      const int32_t length = 2 + static_cast<int32_t>(rng.below(10));
      examples.push_back(generate_example(task, length, rng));
    }
    const Batch expected = pack_batch(examples, task.target_kind);
    const Batch got = sampler.next();
    CHECK(got.tokens == expected.tokens);
    CHECK(got.offsets == expected.offsets);
    CHECK(got.targets == expected.targets);
  }
}
