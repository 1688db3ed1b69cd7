// Own data takes the defaults a config leaves out from its files (train/data_defaults.hpp): the
// longest line, the whole validation file, no length buckets, a budget from the data size; the
// built-in tasks keep theirs. And what an evaluation without length buckets says.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "normlab/data/buckets.hpp"
#include "normlab/data/jsonl.hpp"
#include "normlab/error.hpp"
#include "normlab/train/baseline.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/data_defaults.hpp"
#include "normlab/train/evaluate.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;

namespace {

// 70 training lines of 1..7 words, the longest "bad bad bad bad bad bad bad, ok!" (10 tokens with
// punctuation split); 9 validation lines, one of 11 words.
void write_files(const TempDir& dir) {
  std::string train = "id,text,label\n";
  for (int i = 0; i < 70; ++i) {
    std::string text;
    for (int w = 0; w <= i % 7; ++w) text += (w ? " " : "") + std::string(i % 2 ? "good" : "bad");
    train += fmt::format("{},\"{}\",{}\n", i, i == 6 ? text + ", ok!" : text, i % 2 ? "pos" : "neg");
  }
  dir.write("train.csv", train);
  std::string valid = "id,text,label\n";
  for (int i = 0; i < 9; ++i)
    valid += fmt::format("{},{},neg\n", i, i == 4 ? "bad bad bad bad bad bad bad bad bad bad bad" : "bad");
  dir.write("valid.csv", valid);
}

const char* kOwnConfig =
    R"({"task": {"name": "sequence_classification", "train_file": "train.csv", "valid_file": "valid.csv",
                                      "split_punctuation": true},
                             "train": {"batch_size": 8}})";

}  // namespace

TEST_CASE("data defaults: an own-data config without the keys takes them from its files") {
  TempDir dir;
  write_files(dir);
  const train::RunConfig c = train::load_config(dir.write("own.json", kOwnConfig));
  CHECK(c.task.max_len == 10);       // "bad bad bad bad bad bad bad , ok !" with punctuation split
  CHECK(c.task.eval_max_len == 11);  // the validation file's longest line
  CHECK(c.model.max_len == 128);     // long enough already
  CHECK(c.task.eval_examples == 9);  // every validation line
  CHECK(c.task.bucket_width == 0);   // no length buckets
  CHECK(c.train.steps == 10 * 9);    // 10 epochs of ceil(70 / 8) = 9 batches
  CHECK(c.train.eval_every == 10);   // half an epoch (4.5 -> 4), rounded up to a multiple of 10
  // A key the file or --set gives is kept; the data's longest line then drops the longer ones.
  const train::RunConfig set = train::load_config(dir.sub("own.json"), {"task.max_len=4", "train.steps=7"});
  CHECK(set.task.max_len == 4);
  CHECK(set.train.steps == 7);
  CHECK(set.task.eval_max_len == 11);
  dir.write("child.json",
            R"({"base": "own.json", "task": {"eval_examples": 3, "bucket_width": 2}, "model": {"max_len": 10}})");
  const train::RunConfig child = train::load_config(dir.sub("child.json"));
  CHECK(child.task.eval_examples == 3);
  CHECK(child.task.bucket_width == 2);
  CHECK(child.model.max_len == 10);
  CHECK(child.task.max_len == 10);
  CHECK(child.task.eval_max_len == 10);  // capped at the given model.max_len: the 11-word line is dropped
  // The compare's JSON form writes the same numbers in, for the keys the JSON leaves out.
  const nlohmann::json filled = train::with_data_defaults(train::load_config_json(dir.sub("own.json")), "own.json");
  CHECK(filled["task"]["max_len"] == 10);
  CHECK(filled["task"]["eval_examples"] == 9);
  CHECK(filled["train"]["steps"] == 90);
  CHECK_FALSE(filled["train"].contains("seed"));
}

TEST_CASE("data defaults: built-in tasks keep their fixed defaults") {
  TempDir dir;
  const train::RunConfig c = train::load_config(dir.write("reverse.json", R"({"task": {"name": "reverse"}})"));
  const train::RunConfig defaults;
  CHECK(c == defaults);
  CHECK(c.task.max_len == 32);
  CHECK(c.task.eval_examples == 512);
  CHECK(c.task.bucket_width == 8);
  CHECK(c.train.steps == 1000);
  const nlohmann::json same = train::with_data_defaults(nlohmann::json::parse(R"({"task": {"name": "sort"}})"), "x");
  CHECK(same == nlohmann::json::parse(R"({"task": {"name": "sort"}})"));
}

TEST_CASE("data defaults: bucket_width 0 is one bucket of every length, counted as trained") {
  const std::vector<data::LengthBucket> one = data::make_length_buckets(26, 0, 20);
  REQUIRE(one.size() == 1);
  CHECK(one[0].min_len == 1);
  CHECK(one[0].max_len == 26);
  CHECK_FALSE(one[0].beyond_train_max);
  CHECK(data::make_length_buckets(26, 8, 20).size() == 5);  // 1-8 9-16 17-20 21-24* 25-26*
  CHECK_THROWS_AS(data::make_length_buckets(26, -1, 20), UsageError);
  // The bucketed regime needs a width.
  TempDir dir;
  CHECK_THROWS_WITH_AS(train::load_config(
                           dir.write("b.json", R"({"task": {"length_regime": "bucketed", "bucket_width": 0}})")),
                       doctest::Contains("task.bucket_width: the bucketed length regime"), InputError);
}

TEST_CASE("data defaults: an evaluation without length buckets speaks of held-out figures only") {
  train::EvalMetrics m;
  train::BucketMetrics all;
  all.bucket = {1, 26, false};
  all.sequences = all.targets = 4;
  m.buckets = {all};
  m.trained.sequences = m.trained.targets = 4;
  m.trained.loss = 0.5;
  m.trained.accuracy = 0.75;
  m.trained.sequence_accuracy = 0.75;
  m.trained.majority_accuracy = 0.5;
  m.trained.confusion = train::Confusion(2);
  m.trained.confusion.add(0, 0, 2);
  m.trained.confusion.add(1, 1);
  m.trained.confusion.add(1, 0);
  m.uniform_loss = 0.6931;
  m.uniform_accuracy = 0.5;
  CHECK_FALSE(train::has_length_buckets(m));
  // F1: class 0 2/(2 + 0.5 * 1) = 0.8, class 1 1/(1 + 0.5 * 1) = 0.6667; macro 0.7333.
  CHECK(train::describe_groups(m) ==
        "held-out: loss 0.5000, accuracy 0.7500, macro-F1 0.7333 (majority-label baseline 0.5000); chance: loss "
        "0.6931, accuracy 0.5000");
  m.buckets.push_back({{27, 30, true}});
  CHECK(train::has_length_buckets(m));
  CHECK(train::describe_groups(m).rfind("trained lengths", 0) == 0);
}

TEST_CASE("data defaults: held-out intervals of a confusion matrix, by hand") {
  train::Confusion c(2);
  c.add(0, 0, 40);
  c.add(1, 1, 40);
  c.add(0, 1, 10);
  c.add(1, 0, 10);
  const train::HeldOutScore s = train::held_out_score(c);
  CHECK(s.examples == 100);
  CHECK(s.accuracy == doctest::Approx(0.8));
  // Wilson at 80/100: 0.8 ± ... = [0.7112, 0.8666].
  CHECK(s.accuracy_low == doctest::Approx(0.7112).epsilon(1e-3));
  CHECK(s.accuracy_high == doctest::Approx(0.8666).epsilon(1e-3));
  CHECK(s.macro_f1 == doctest::Approx(0.8));
  CHECK(s.macro_f1_low < 0.8);
  CHECK(s.macro_f1_high > 0.8);
  CHECK(s.macro_f1_high - s.macro_f1_low < 0.25);
  CHECK(train::held_out_score(c).macro_f1_low == s.macro_f1_low);  // a fixed seed: the same interval
  CHECK(train::held_out_score(train::Confusion(2)).examples == 0);
}

TEST_CASE("data defaults: a file to predict is read in the task's format, labels optional") {
  data::Task task = data::make_data_task(data::TaskKind::sequence_classification, {"bad", "good"}, {"neg", "pos"});
  std::vector<data::InputRecord> records;
  auto collect = [&](data::InputRecord&& r) { records.push_back(std::move(r)); };
  data::for_each_input_record("text,label\n\"good, bad\",pos\nbad,\n", "a.csv", task, nullptr, collect);
  REQUIRE(records.size() == 2);
  CHECK(records[0].text == "good, bad");
  CHECK(records[0].labels == std::vector<std::optional<std::string>>{"pos"});
  CHECK(records[0].where == "a.csv:2");
  CHECK_FALSE(records[1].labels.has_value());
  records.clear();
  data::for_each_input_record("id,text\n1,good\n", "b.csv", task, nullptr, collect);
  REQUIRE(records.size() == 1);
  CHECK_FALSE(records[0].labels.has_value());
  records.clear();
  data::for_each_input_record("{\"tokens\": [\"good\", \"bad\"]}\n{\"tokens\": \"bad\", \"label\": \"neg\"}\n",
                              "c.jsonl", task, nullptr, collect);
  REQUIRE(records.size() == 2);
  CHECK(records[0].text == "good bad");
  CHECK(records[1].labels == std::vector<std::optional<std::string>>{"neg"});
  CHECK_THROWS_WITH_AS(data::for_each_input_record("label\npos\n", "d.csv", task, nullptr, collect),
                       doctest::Contains("d.csv:1: no column \"text\""), InputError);
  CHECK_THROWS_WITH_AS(data::for_each_input_record("{\"label\": \"pos\"}\n", "e.jsonl", task, nullptr, collect),
                       doctest::Contains("e.jsonl:1: missing key \"tokens\""), InputError);
}

TEST_CASE("data defaults: an own-data compare answers with macro-F1, accuracy and the baseline") {
  TempDir dir;
  write_files(dir);
  dir.write("own.json", R"({"model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32},
    "task": {"name": "sequence_classification", "train_file": "train.csv", "valid_file": "valid.csv"},
    "optim": {"lr": 0.01, "warmup_steps": 1}, "train": {"batch_size": 8, "threads": 1}})");
  dir.write("compare.json", R"({"base": "own.json", "set": {"train.steps": 4, "train.eval_every": 2},
    "grid": {"variants": ["none", "pre-ln"], "seeds": [0, 1]}})");
  const normlab::test::Cli out = normlab::test::run_normlab(dir, fmt::format("compare --config {} --out {}",
                                                                             dir.sub("compare.json"), dir.sub("out")));
  REQUIRE_MESSAGE(out.code == 0, out.err);
  const nlohmann::json summary = nlohmann::json::parse(normlab::test::read_text(dir.sub("out/summary.json")));
  const std::vector<std::string> verdict = summary.at("verdict").get<std::vector<std::string>>();
  REQUIRE(verdict.size() == 3);
  CHECK(verdict[0].rfind("Held-out macro-F1 and accuracy at each variant's best rate (mean over 2 seeds [95% CI], each "
                         "run's best checkpoint (best.safetensors, kept on held-out loss; ",
                         0) == 0);
  CHECK(verdict[0].find("none (no normalization) ") != std::string::npos);
  CHECK(verdict[0].find("; the bag-of-words baseline ") != std::string::npos);
  CHECK(verdict[1].rfind("Against the baseline (macro-F1 of every seed's run on the same examples): ", 0) == 0);
  CHECK(verdict[2].rfind("Macro-F1 against the best variant, paired by seed: the best is ", 0) == 0);
  CHECK((verdict[2].find(" by ") != std::string::npos));  // a difference with its direction
  // The report says which checkpoint its figures come from, and no phrase reads as a variant's name.
  const std::string report = normlab::test::read_text(dir.sub("out/report.md"));
  CHECK(report.find("The Answer's accuracy and macro-F1 come from each run's best checkpoint") != std::string::npos);
  CHECK(report.find("## Against the baseline") != std::string::npos);
  CHECK(report.find("| baseline (bag of words) |") != std::string::npos);
  CHECK(report.find("at none") == std::string::npos);
  // The runs were resolved from the data: every validation line, no length buckets.
  const nlohmann::json config =
      nlohmann::json::parse(normlab::test::read_text(dir.sub("out/runs/none_lr0.01_L1_warmup_s0/config.json")));
  CHECK(config["task"]["eval_examples"] == 9);
  CHECK(config["task"]["bucket_width"] == 0);
  CHECK(config["train"]["steps"] == 4);
}
