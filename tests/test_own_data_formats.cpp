// Own data as people have it: per-class metrics (a context-blind tagger is not "solved"), CSV /
// TSV / CoNLL / JSONL with extra keys, text normalization, rare words as [UNK], reserved tokens,
// the file size limit, one rule for over-long lines, config paths that are not regular files, and
// `predict --data`.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "normlab/data/formats.hpp"
#include "normlab/data/jsonl.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/study/class_metrics.hpp"
#include "normlab/study/report.hpp"
#include "normlab/train/class_metrics.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/evaluate.hpp"
#include "normlab/train/setup.hpp"
#include "support.hpp"

using namespace normlab;
using nlohmann::json;
using normlab::test::Cli;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

// Tagging where "not" flips the next opinion word: filler words are O, good words POS, bad words
// NEG, and the word after "not" takes the opposite tag. Opinion words are one in ten, a tenth of
// them negated, as in a file of reviews.
struct TaggedToken {
  std::string word, tag, own_tag;  // own_tag: the tag the word has without context
};
std::vector<std::vector<TaggedToken>> negation_sentences(int count) {
  const char* filler[] = {"the", "film", "was", "and", "it", "plot", "really", "story"};
  const char* good[] = {"good", "great", "fine"};
  const char* bad[] = {"bad", "awful", "dull"};
  std::vector<std::vector<TaggedToken>> out;
  uint32_t state = 12345;
  auto next = [&](uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) % n;
  };
  for (int s = 0; s < count; ++s) {
    std::vector<TaggedToken> sentence;
    const int length = 8 + int(next(12));
    for (int t = 0; t < length; ++t) {
      if (next(10) != 0) {
        sentence.push_back({filler[next(8)], "O", "O"});
        continue;
      }
      const bool positive = next(2) == 0;
      const std::string word = positive ? good[next(3)] : bad[next(3)];
      const std::string own = positive ? "POS" : "NEG";
      if (next(10) == 0) {
        sentence.push_back({"not", "O", "O"});
        sentence.push_back({word, positive ? "NEG" : "POS", own});
      } else {
        sentence.push_back({word, own, own});
      }
    }
    out.push_back(sentence);
  }
  return out;
}

// A finished run of `task_name` whose last evaluation has these trained-length numbers.
study::RunResult finished_run(const std::string& task_name, double accuracy, double macro_f1) {
  study::RunResult r;
  r.spec.config.task.name = data::find_task_kind(task_name).value();
  r.finished = true;
  r.loss = {1.1, 0.1};
  r.baseline.uniform_loss = std::log(3.0);
  r.baseline.uniform_accuracy = 1.0 / 3;
  r.planned_steps = 100;
  study::EvalPoint point;
  point.step = 100;
  point.trained.loss = 0.1;
  point.trained.accuracy = accuracy;
  point.trained.macro_f1 = macro_f1;
  point.trained.targets = 1000;
  r.evals.push_back(point);
  return r;
}

}  // namespace

TEST_CASE("class metrics: a vocabulary-sized task stores and writes only the cells that occurred") {
  // 8192 classes (a reverse task over a large vocabulary): a dense matrix would be 8192^2 counts
  // (512 MiB) per length bucket; the evaluation saw a handful of (target, answer) pairs.
  train::Confusion c(8192);
  c.add(7, 7, 3), c.add(7, 8000, 1), c.add(8191, 0, 2);
  CHECK(c.cells.size() == 3);
  CHECK(c.total() == 6);
  const json j = train::class_metrics_json(c, {});
  REQUIRE(j.at("confusion").is_object());
  CHECK(j.at("confusion").at("labels") == 8192);
  CHECK(j.at("confusion").at("cells").size() == 3);
  CHECK(j.dump().size() < 2000);
  CHECK(train::confusion_from_json(j, "x") == c);
  CHECK(j.at("classes").size() == 4);  // 7, 8000, 8191 and 0 occur
  // A cell outside the matrix is refused, naming the place.
  json bad = j;
  bad["confusion"]["cells"].push_back({8192, 0, 1});
  CHECK_THROWS_WITH_AS(train::confusion_from_json(bad, "m.jsonl:3"), doctest::Contains("m.jsonl:3: confusion"),
                       normlab::InputError);
}

TEST_CASE("class metrics: precision, recall, F1, macro-F1 and balanced accuracy of a known matrix") {
  train::Confusion c(3);
  // rows: target; columns: predicted. Class 2 never occurs and is never answered: left out.
  c.add(0, 0, 5), c.add(0, 1, 1), c.add(1, 0, 2), c.add(1, 1, 3);
  const std::vector<train::ClassMetrics> m = train::class_metrics(c);
  CHECK(m[0].precision == doctest::Approx(5.0 / 7));
  CHECK(m[0].recall == doctest::Approx(5.0 / 6));
  CHECK(m[1].precision == doctest::Approx(3.0 / 4));
  CHECK(m[1].recall == doctest::Approx(3.0 / 5));
  const double f0 = 2 * (5.0 / 7) * (5.0 / 6) / (5.0 / 7 + 5.0 / 6), f1 = 2 * 0.75 * 0.6 / 1.35;
  CHECK(train::macro_f1(c) == doctest::Approx((f0 + f1) / 2));
  CHECK(train::balanced_accuracy(c) == doctest::Approx((5.0 / 6 + 0.6) / 2));
  // A class the model answers but that never occurs counts with F1 0: class 0 now has precision
  // and recall 5/7, class 1 keeps its F1, class 2 adds F1 0 (0.460; leaving it out would give 0.690).
  c.add(0, 2);  // target 0 answered as 2
  CHECK(train::macro_f1(c) == doctest::Approx((5.0 / 7 + f1 + 0.0) / 3));
  CHECK(train::macro_f1(c) == doctest::Approx(0.460).epsilon(1e-3));
  // JSON round trip of the matrix; the classes carry the names.
  const json j = train::class_metrics_json(c, {"neg", "pos", "odd"});
  CHECK(train::confusion_from_json(j, "x") == c);
  CHECK(j.at("classes").size() == 3);
  CHECK(j.at("classes")[1].at("label") == "pos");
  CHECK_THROWS_AS(train::confusion_from_json(json{{"confusion", {{1, 2}, {3}}}}, "rec"), InputError);
  CHECK(train::describe_class_metrics(c, {"neg", "pos", "odd"}).find("macro-F1") != std::string::npos);
}

TEST_CASE("class metrics: a context-blind tagger on 'not'-flipped data is not solved, an exact one is") {
  train::Confusion blind(3), exact(3);  // labels: 0 NEG, 1 O, 2 POS
  auto id = [](const std::string& tag) { return tag == "NEG" ? 0 : tag == "O" ? 1 : 2; };
  int64_t correct = 0, total = 0, flipped = 0, flipped_right = 0;
  for (const auto& sentence : negation_sentences(400)) {
    for (const TaggedToken& t : sentence) {
      blind.add(id(t.tag), id(t.own_tag));  // answers each word by its own class, ignoring "not"
      exact.add(id(t.tag), id(t.tag));
      correct += t.tag == t.own_tag;
      ++total;
      if (t.tag != t.own_tag) ++flipped, flipped_right += 0;
    }
  }
  const double accuracy = double(correct) / double(total);
  REQUIRE(flipped > 20);
  CHECK(flipped_right == 0);                  // the positions that need the previous word: all wrong
  CHECK(accuracy >= study::kSolvedAccuracy);  // accuracy alone would call it solved
  const double f1 = train::macro_f1(blind);
  CHECK(f1 < study::kSolvedAccuracy);  // macro-F1 sees the opinion classes' errors
  CHECK(train::macro_f1(exact) == doctest::Approx(1.0));

  CHECK(study::classify(finished_run("token_classification", accuracy, f1)) == study::Outcome::learned);
  CHECK(study::classify(finished_run("token_classification", 1.0, 1.0)) == study::Outcome::solved);
  // Built-in tasks keep being judged by accuracy alone.
  CHECK(study::classify(finished_run("reverse", accuracy, f1)) == study::Outcome::solved);

  // The same through an evaluation record as the trainer writes it and the report reads it.
  TempDir dir;
  train::EvalMetrics m;
  train::BucketMetrics bucket;
  bucket.bucket = {1, 20, false};
  bucket.sequences = 400;
  bucket.targets = total;
  bucket.loss = 0.1;
  bucket.accuracy = accuracy;
  bucket.confusion = blind;
  m.buckets = {bucket};
  m.trained = train::group_metrics(m.buckets, false, false);
  m.confusion = blind;
  m.labels = {"NEG", "O", "POS"};
  m.sequences = 400, m.targets = total, m.loss = 0.1, m.accuracy = accuracy;
  m.uniform_loss = std::log(3.0), m.uniform_accuracy = 1.0 / 3;
  json record = train::to_json(m);
  record["step"] = 100;
  record["split"] = "valid";
  CHECK(record.at("trained").at("macro_f1").get<double>() == doctest::Approx(f1));
  CHECK(record.at("trained").at("classes").size() == 3);
  dir.write("metrics.jsonl",
            json{{"step", 100}, {"loss", 0.1}, {"accuracy", 0.98}}.dump() + "\n" + record.dump() + "\n");
  dir.write("summary.json", R"({"steps": 100})");
  study::RunSpec spec;
  spec.variant = "pre-ln";
  spec.config.task.name = data::TaskKind::token_classification;
  spec.config.train.steps = 100;
  const study::RunResult read = study::read_run(spec, dir.path.string());
  CHECK(read.final_trained().macro_f1 == doctest::Approx(f1));
  CHECK(read.evals.back().trained_confusion == blind);
  CHECK(read.evals.back().labels == std::vector<std::string>{"NEG", "O", "POS"});
  CHECK(study::classify(read) == study::Outcome::learned);
}

TEST_CASE("formats: CSV with a header, quoted commas and newlines, extra columns - TSV - CoNLL") {
  TempDir dir;
  data::Task schema = data::make_data_task(data::TaskKind::sequence_classification, {"w"}, {"l"});
  dir.write("a.csv",
            "id,review,stars,sentiment\n1,\"Great, really\",5,pos\n2,\"two\nlines "
            "\"\"quoted\"\"\",1,neg\r\n3,plain,3,pos\n\n");
  schema.file.text_field = "review";
  schema.file.label_field = "sentiment";
  std::vector<data::StringExample> rows = data::load_string_examples(dir.sub("a.csv"), schema);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].tokens == std::vector<std::string>{"Great,", "really"});
  CHECK(rows[1].tokens == std::vector<std::string>{"two", "lines", "\"quoted\""});
  CHECK(*rows[1].labels[0] == "neg");
  schema.text = {true, true};  // task.lowercase, task.split_punctuation
  rows = data::load_string_examples(dir.sub("a.csv"), schema);
  CHECK(rows[0].tokens == std::vector<std::string>{"great", ",", "really"});
  // Errors name the file and the record's line.
  dir.write("b.csv", "id,review,sentiment\n1,ok,pos\n2,\"never closed,neg\n");
  CHECK_THROWS_WITH_AS(data::load_string_examples(dir.sub("b.csv"), schema),
                       doctest::Contains("b.csv:3: a quoted field"), InputError);
  dir.write("c.csv", "id,review,sentiment\n1,ok,pos\n2,too,many,fields\n");
  CHECK_THROWS_WITH_AS(data::load_string_examples(dir.sub("c.csv"), schema), doctest::Contains("c.csv:3: 4 fields"),
                       InputError);
  dir.write("d.csv", "id,text,sentiment\n1,ok,pos\n");
  CHECK_THROWS_WITH_AS(data::load_string_examples(dir.sub("d.csv"), schema),
                       doctest::Contains("d.csv:1: no column \"review\""), InputError);
  // TSV: tabs, no quoting.
  dir.write("e.tsv", "review\tsentiment\n\"so\" good\tpos\n");
  rows = data::load_string_examples(dir.sub("e.tsv"), schema);
  CHECK(rows[0].tokens == std::vector<std::string>{"\"", "so", "\"", "good"});
  // JSONL: extra keys are ignored, the named ones read.
  dir.write("f.jsonl", R"({"id": 7, "review": "Fine film", "sentiment": "pos", "source": "web"})"
                       "\n");
  rows = data::load_string_examples(dir.sub("f.jsonl"), schema);
  CHECK(rows[0].tokens == std::vector<std::string>{"fine", "film"});
  // CoNLL for tagging: token first, tag last, blank lines between sentences, comments skipped.
  data::Task tagging = data::make_data_task(data::TaskKind::token_classification, {"w"}, {"l"});
  dir.write("g.conll", "-DOCSTART- O\n\n# a comment\nNot x B-NEG\ngood x I-NEG\n\nfine O\n");
  tagging.text.lowercase = true;
  rows = data::load_string_examples(dir.sub("g.conll"), tagging);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].tokens == std::vector<std::string>{"not", "good"});
  CHECK(*rows[0].labels[1] == "I-NEG");
  dir.write("h.conll", "one B\nlonely\n");
  CHECK_THROWS_WITH_AS(data::load_string_examples(dir.sub("h.conll"), tagging), doctest::Contains("h.conll:2:"),
                       InputError);
  CHECK_THROWS_WITH_AS(data::load_string_examples(dir.sub("g.conll"), schema), doctest::Contains("CoNLL"), InputError);
  // CSV tags for tagging: one per word.
  dir.write("i.csv", "text,tags\nred blue,A B\nred,A B\n");
  CHECK_THROWS_WITH_AS(data::load_string_examples(dir.sub("i.csv"), tagging),
                       doctest::Contains("i.csv:3: tags: 2 tags"), InputError);
}

TEST_CASE("text: lowercase and punctuation splitting apply to files and to predict's input alike") {
  std::vector<std::string> words;
  data::split_words("Good, BAD!  don't [UNK]", {true, true}, words);
  CHECK(words == std::vector<std::string>{"good", ",", "bad", "!", "don", "'", "t", "[UNK]"});
  data::Task task = data::make_data_task(data::TaskKind::sequence_classification, {"bad", "good", ","}, {"neg", "pos"});
  task.text = {true, true};
  const std::vector<int32_t> ids = task.encode("Good, weird [PAD]");
  // [PAD] typed by a user is an unknown word, never the padding id 0.
  CHECK(ids == std::vector<int32_t>{*task.input_vocab.find("good"), *task.input_vocab.find(","), 1, 1});
}

TEST_CASE("own data: task.min_count reads rare training tokens as [UNK] - reserved tokens are counted, never padding") {
  TempDir dir;
  dir.write("train.jsonl",
            "{\"tokens\": \"good good rare\", \"label\": \"pos\"}\n"
            "{\"tokens\": \"bad bad [PAD] good\", \"label\": \"neg\"}\n");
  data::Task schema = data::make_data_task(data::TaskKind::sequence_classification, {"w"}, {"l"});
  const data::VocabularyCounts counts = data::count_vocabulary(dir.sub("train.jsonl"), schema);
  CHECK(counts.tokens.at("good") == 3);
  CHECK(counts.tokens.count("[PAD]") == 0);
  const data::Task task = data::make_data_task(data::TaskKind::sequence_classification, counts, 2);
  CHECK_FALSE(task.input_vocab.find("rare").has_value());
  data::LoadStats stats;
  const std::vector<data::Example> examples =
      data::load_jsonl(dir.sub("train.jsonl"), task, data::kMaxJsonlBytes, nullptr, &stats);
  CHECK(examples[0].tokens[2] == 1);  // "rare": trained as [UNK]
  CHECK(examples[1].tokens[2] == 1);  // "[PAD]" in the data: [UNK], not 0
  CHECK(stats.reserved == 1);
  CHECK(stats.unknown == 1);
  CHECK_THROWS_WITH_AS(data::make_data_task(data::TaskKind::sequence_classification, counts, 9),
                       doctest::Contains("task.min_count 9"), InputError);
  train::FileUse use;
  use.lines = use.used = 2;
  use.reserved = 1;
  CHECK(use.describe().find("reserved") != std::string::npos);
}

TEST_CASE("own data: one rule for over-long lines (skip and count), the size limit, paths that are not files") {
  TempDir dir;
  std::string long_line = "{\"tokens\": \"";
  for (int i = 0; i < 5000; ++i) long_line += i ? " good" : "good";
  long_line += "\", \"label\": \"pos\"}\n";
  const std::string lines =
      "{\"tokens\": \"good\", \"label\": \"pos\"}\n{\"tokens\": \"bad bad bad\", \"label\": \"neg\"}\n";
  dir.write("train.jsonl", lines + long_line);
  dir.write("valid.jsonl", long_line + lines);
  dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 8},
    "task": {"name": "sequence_classification", "train_file": "train.jsonl", "valid_file": "valid.jsonl",
             "max_len": 2, "eval_max_len": 8, "bucket_width": 4},
    "optim": {"lr": 0.01, "warmup_steps": 1},
    "train": {"steps": 2, "batch_size": 2, "eval_every": 0, "threads": 1}})");
  const Cli train = run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("config.json"), dir.sub("run")));
  REQUIRE(train.code == 0);
  CHECK(train.err.find("used 1 of 3 lines: 2 longer than task.max_len 2") != std::string::npos);
  CHECK(train.err.find("used 2 of 3 lines: 1 longer than task.eval_max_len 8") != std::string::npos);
  dir.write("eval.jsonl",
            lines + "{\"tokens\": \"good good good good good good good good good\", \"label\": \"pos\"}\n" + long_line);
  const Cli eval = run_normlab(dir, fmt::format("eval --run {} --data {}", dir.sub("run"), dir.sub("eval.jsonl")));
  CHECK(eval.code == 0);
  CHECK(eval.out.find("used 2 of 4 lines: 2 longer than model.max_len 8") != std::string::npos);
  // The size limit names the key that raises it.
  const Cli small = run_normlab(dir, fmt::format("train --config {} --out {} --set task.max_file_mb=1",
                                                 dir.sub("config.json"), dir.sub("run2")));
  CHECK(small.code == 0);
  std::string big;
  while (big.size() < (size_t(1) << 20) + 10) big += lines;
  dir.write("big.jsonl", big);
  const Cli refused =
      run_normlab(dir, fmt::format("train --config {} --out {} --set task.max_file_mb=1 --set task.train_file={}",
                                   dir.sub("config.json"), dir.sub("run3"), dir.sub("big.jsonl")));
  CHECK(refused.code == 2);
  CHECK(refused.err.find("task.max_file_mb 1") != std::string::npos);
  // A directory or a FIFO as a data path: not "no such file".
  std::filesystem::create_directory(dir.path / "folder");
  const Cli folder = run_normlab(dir, fmt::format("train --config {} --out {} --set task.train_file={}",
                                                  dir.sub("config.json"), dir.sub("run4"), dir.sub("folder")));
  CHECK(folder.code == 2);
  CHECK(folder.err.find("task.train_file: not a regular file (a directory)") != std::string::npos);
  REQUIRE(::mkfifo(dir.sub("fifo").c_str(), 0600) == 0);
  const Cli fifo = run_normlab(dir, fmt::format("train --config {} --out {} --set task.valid_file={}",
                                                dir.sub("config.json"), dir.sub("run5"), dir.sub("fifo")));
  CHECK(fifo.code == 2);
  CHECK(fifo.err.find("not a regular file (a FIFO)") != std::string::npos);
  // A base that cannot be read is named as the base.
  dir.write("child.json", R"({"base": "missing.json", "train": {"steps": 3}})");
  const Cli base = run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("child.json"), dir.sub("run6")));
  CHECK(base.code == 2);
  CHECK(base.err.find("child.json: base \"missing.json\": ") != std::string::npos);
  // Own-data keys on a built-in task, punctuation splitting for tagging: refused with the key.
  const Cli builtin =
      run_normlab(dir, fmt::format("train --config {} --out {} --set task.name=reverse --set task.train_file=null "
                                   "--set task.valid_file=null --set task.lowercase=true",
                                   dir.sub("config.json"), dir.sub("run7")));
  CHECK(builtin.code == 2);
  CHECK(builtin.err.find("task.lowercase: applies to your own data") != std::string::npos);
}

TEST_CASE("own data: the reviews example config reads its CSV with the text options") {
  const train::RunConfig config = train::load_config(std::string(NORMLAB_SOURCE_DIR) + "/configs/reviews.json");
  const data::Task task = train::build_task(config);
  CHECK(task.text.lowercase);
  CHECK(task.output_vocab.tokens() == std::vector<std::string>{"mixed", "negative", "positive"});
  CHECK(task.input_vocab.find(",").has_value());
  CHECK_FALSE(task.input_vocab.find("Great").has_value());
  train::FileUse use;
  const auto train_set = train::load_train_set(config, task, nullptr, &use);
  REQUIRE(train_set);
  CHECK(use.unknown > 0);  // product names seen once: the [UNK] row is trained
}

TEST_CASE("predict --lines: one JSON line (or CSV row) per input, as typed, with unknown words and errors") {
  TempDir dir;
  dir.write("train.csv", "id,text,label\n1,\"Good, good!\",pos\n2,Bad film,neg\n3,good film,pos\n4,bad bad,neg\n");
  dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 8},
    "task": {"name": "sequence_classification", "train_file": "train.csv", "valid_file": "train.csv",
             "lowercase": true, "split_punctuation": true, "max_len": 8, "eval_max_len": 8, "bucket_width": 4},
    "optim": {"lr": 0.01, "warmup_steps": 1},
    "train": {"steps": 3, "batch_size": 2, "eval_every": 0, "threads": 1}})");
  REQUIRE(run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("config.json"), dir.sub("run"))).code ==
          0);
  dir.write("inputs.txt", "GOOD film, zebra!\n\none two three four five six seven eight nine\nbad\n");
  const Cli out = run_normlab(dir, fmt::format("predict --run {} --lines {} --batch-size 2", dir.sub("run"),
                                               dir.sub("inputs.txt")));
  REQUIRE(out.code == 0);
  std::vector<json> rows;
  size_t start = 0;
  while (start < out.out.size()) {
    const size_t end = out.out.find('\n', start);
    rows.push_back(json::parse(out.out.substr(start, end - start)));
    start = end + 1;
  }
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].at("input") == "GOOD film, zebra!");
  CHECK(rows[0].at("unknown") == 1);
  CHECK(rows[0].at("read_as") == json{"good", "film", ",", "[UNK]", "!"});
  // Every class's probability by name, summing to 1; the label's is "probability".
  const json& all = rows[0].at("probabilities");
  REQUIRE(all.size() == 2);
  CHECK(all.at("neg").get<double>() + all.at("pos").get<double>() == doctest::Approx(1.0).epsilon(1e-3));
  CHECK(all.at(rows[0].at("label").get<std::string>()) == rows[0].at("probability"));
  CHECK(rows[1].contains("error"));
  CHECK(rows[2].at("error").get<std::string>().find("model.max_len 8") != std::string::npos);
  CHECK(rows[3].at("line") == 4);
  // The same shape from a one-input predict, and CSV from standard input: a column per class.
  const Cli one = run_normlab(dir, fmt::format("predict --run {} --input \"bad\" --json", dir.sub("run")));
  const json single = json::parse(one.out);
  CHECK(single.at("label") == rows[3].at("label"));
  CHECK(single.at("read_as") == json{"bad"});
  CHECK(single.at("probabilities") == rows[3].at("probabilities"));
  const Cli csv = run_normlab(dir, fmt::format("predict --run {} --lines - --format csv < {}", dir.sub("run"),
                                               dir.sub("inputs.txt")));
  CHECK(csv.code == 0);
  CHECK(csv.out.rfind("line,input,unknown,read_as,label,probability,p_neg,p_pos,error\n1,\"GOOD film, zebra!\",1,",
                      0) == 0);
  const Cli neither = run_normlab(dir, fmt::format("predict --run {}", dir.sub("run")));
  CHECK(neither.code == 2);
  // --data reads the task's format: a text file is refused with a pointer to --lines.
  const Cli text = run_normlab(dir, fmt::format("predict --run {} --data {}", dir.sub("run"), dir.sub("inputs.txt")));
  CHECK(text.code == 2);
  CHECK(text.err.find("for one raw input a line use --lines") != std::string::npos);
  const Cli bench = run_normlab(dir, fmt::format("bench predict --run {} --repeats 1 --json", dir.sub("run")));
  CHECK(bench.code == 0);
  CHECK(json::parse(bench.out).at("inputs") == 4);
}

TEST_CASE("predict --data reads the task's own CSV and JSONL: only the text field is input, labels are scored") {
  TempDir dir;
  dir.write("train.csv", "id,text,label\n1,good film,pos\n2,bad film,neg\n3,good good,pos\n4,bad bad,neg\n");
  dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32},
    "task": {"name": "sequence_classification", "train_file": "train.csv", "valid_file": "train.csv"},
    "optim": {"lr": 0.01, "warmup_steps": 1},
    "train": {"steps": 3, "batch_size": 2, "eval_every": 0, "threads": 1}})");
  REQUIRE(run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("config.json"), dir.sub("run"))).code ==
          0);
  // The label column is never read as input: "pos" would otherwise be an [UNK] word of the input.
  dir.write("test.csv", "id,text,label\nk-1,good film,pos\nk-2,bad bad,neg\nk-3,film,\n");
  const Cli out = run_normlab(dir, fmt::format("predict --run {} --data {}", dir.sub("run"), dir.sub("test.csv")));
  REQUIRE_MESSAGE(out.code == 0, out.err);
  std::vector<json> rows;
  for (size_t start = 0; start < out.out.size();) {
    const size_t end = out.out.find('\n', start);
    rows.push_back(json::parse(out.out.substr(start, end - start)));
    start = end + 1;
  }
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].at("line") == 2);  // the record's line in the file, after the header
  CHECK(rows[0].at("input") == "good film");
  CHECK(rows[0].at("read_as") == json{"good", "film"});
  CHECK(rows[0].at("expected") == "pos");
  CHECK_FALSE(rows[2].contains("expected"));  // an empty label cell: predicted, not scored
  // Scored against the two labels it has: accuracy is 0, 1/2 or 1.
  const size_t at = out.err.find("against the labels of 2 of them: accuracy ");
  REQUIRE(at != std::string::npos);
  const double accuracy = std::stod(out.err.substr(at + 43, 6));
  CHECK((accuracy == 0.0 || accuracy == 0.5 || accuracy == 1.0));
  // CSV out: an "expected" column beside one column per class.
  const Cli csv =
      run_normlab(dir, fmt::format("predict --run {} --data {} --format csv", dir.sub("run"), dir.sub("test.csv")));
  CHECK(
      csv.out.rfind("line,input,unknown,read_as,label,probability,p_neg,p_pos,expected,error\n2,good film,0,good film,",
                    0) == 0);
  // A file without the label column, and JSONL without the label key: predicted, nothing scored.
  dir.write("plain.csv", "text\ngood film\n");
  const Cli plain = run_normlab(dir, fmt::format("predict --run {} --data {}", dir.sub("run"), dir.sub("plain.csv")));
  CHECK(plain.code == 0);
  CHECK(plain.err.find("against the labels") == std::string::npos);
  dir.write("plain.jsonl", "{\"tokens\": \"bad film\", \"id\": 9}\n");
  const Cli jsonl = run_normlab(dir, fmt::format("predict --run {} --data {}", dir.sub("run"), dir.sub("plain.jsonl")));
  CHECK(jsonl.code == 0);
  CHECK(json::parse(jsonl.out).at("read_as") == json{"bad", "film"});
  // Bad input: one line naming the file and line, exit 2.
  dir.write("unknown.csv", "text,label\ngood,pos\nbad,maybe\n");
  const Cli unknown =
      run_normlab(dir, fmt::format("predict --run {} --data {}", dir.sub("run"), dir.sub("unknown.csv")));
  CHECK(unknown.code == 2);
  CHECK(unknown.err == "normlab: error: " + dir.sub("unknown.csv") +
                           ":3: label \"maybe\" is not one of the run's classes (neg pos)\n");
  dir.write("nocolumn.csv", "words,label\ngood,pos\n");
  const Cli column =
      run_normlab(dir, fmt::format("predict --run {} --data {}", dir.sub("run"), dir.sub("nocolumn.csv")));
  CHECK(column.code == 2);
  CHECK(column.err.find(dir.sub("nocolumn.csv") + ":1: no column \"text\"") != std::string::npos);
}
