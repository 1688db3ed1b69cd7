// Data-defined tasks (vocabulary and labels from the training file), the learning rate across a
// resume that changes train.steps, and the messages a new user meets.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "normlab/data/jsonl.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/setup.hpp"
#include "normlab/train/trainer.hpp"
#include "support.hpp"

using namespace normlab;
using namespace normlab::train;
using nlohmann::json;
using normlab::test::Cli;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Shift-by-one over color words: target[i] = token[i-1], "<s>" first. Lengths 1..max_len.
std::string shift_lines(int count, int max_len, unsigned seed) {
  const char* colors[] = {"red", "green", "blue", "gold"};
  std::string text;
  for (int i = 0; i < count; ++i) {
    const int length = 1 + int((seed + 7u * unsigned(i)) % unsigned(max_len));
    std::string tokens, targets = "<s>";
    std::string previous;
    for (int t = 0; t < length; ++t) {
      const std::string word = colors[(seed + 3u * unsigned(i) + 5u * unsigned(t) + unsigned(t * t)) % 4u];
      tokens += (t ? " " : "") + word;
      if (t > 0) targets += " " + previous;
      previous = word;
    }
    text += fmt::format("{{\"tokens\": \"{}\", \"targets\": \"{}\"}}\n", tokens, targets);
  }
  return text;
}

RunConfig shift_config(const TempDir& dir) {
  RunConfig c;
  c.model.d_model = 16;
  c.model.num_heads = 2;
  c.model.num_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.max_len = 16;
  c.task.name = data::TaskKind::token_classification;
  c.task.train_file = dir.write("train.jsonl", shift_lines(64, 6, 1));
  c.task.valid_file = dir.write("valid.jsonl", shift_lines(24, 9, 2));
  c.task.min_len = 1;
  c.task.max_len = 6;
  c.task.eval_max_len = 9;
  c.task.eval_examples = 24;
  c.task.bucket_width = 3;
  c.optim.lr = 0.01;
  c.optim.warmup_steps = 2;
  c.train.steps = 8;
  c.train.batch_size = 8;
  c.train.eval_every = 4;
  c.train.checkpoint_every = 4;
  c.train.threads = 1;
  check_config(c, "shift");
  return c;
}

std::vector<json> records(const std::string& metrics) {
  std::vector<json> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("own data: the vocabulary is [PAD], [UNK], then the training file's tokens in byte order") {
  std::vector<data::StringExample> examples(2);
  examples[0].tokens = {"the", "cat", "sat"};
  examples[0].labels = {std::string("neg")};
  examples[1].tokens = {"a", "cat"};
  examples[1].labels = {std::string("pos")};
  const data::Task task = data::make_data_task(data::TaskKind::sequence_classification, examples);
  CHECK(task.input_vocab.tokens() == std::vector<std::string>{"[PAD]", "[UNK]", "a", "cat", "sat", "the"});
  CHECK(task.output_vocab.tokens() == std::vector<std::string>{"neg", "pos"});
  CHECK(task.target_kind == data::TargetKind::per_sequence);
  CHECK_FALSE(task.has_generator());
  // Unknown words become [UNK]; whitespace separates words, never characters.
  CHECK(task.encode("the dog  sat", "--input") == std::vector<int32_t>{5, 1, 4});
  CHECK_THROWS_AS(task.encode("   ", "--input"), InputError);
  // No rule: compute_targets refuses.
  CHECK_THROWS_AS(data::compute_targets(task, {2, 3}), UsageError);
  // A label the training file lacks is an error naming the line; an unknown token is [UNK].
  const data::Example e = data::parse_jsonl_line(R"({"tokens": ["a", "zebra"], "label": "pos"})", task, "v.jsonl:3");
  CHECK(e.tokens == std::vector<int32_t>{2, 1});
  CHECK(e.targets == std::vector<int32_t>{1});
  try {
    data::parse_jsonl_line(R"({"tokens": "a", "label": "meh"})", task, "v.jsonl:4");
    FAIL("expected an InputError");
  } catch (const InputError& error) {
    CHECK(std::string(error.what()).find("v.jsonl:4: label: label \"meh\" does not occur in the training file") == 0);
  }
  CHECK_THROWS_AS(data::parse_jsonl_line(R"({"tokens": ["a b"], "label": "pos"})", task, "v.jsonl:5"), InputError);
}

TEST_CASE("own data: a token_classification run saves its vocabulary - eval and predict need no data file") {
  TempDir dir;
  RunConfig config = shift_config(dir);
  config.task.label = "shift-by-one";
  {
    Trainer trainer(config);
    trainer.start(dir.sub("run"));
    trainer.fit();
  }
  const json vocab = json::parse(read_text(dir.sub("run/vocab.json")));
  CHECK(vocab.at("tokens") == json{"[PAD]", "[UNK]", "blue", "gold", "green", "red"});
  CHECK(vocab.at("labels") == json{"<s>", "blue", "gold", "green", "red"});
  const io::SafetensorsFile header = io::read_safetensors_header(dir.sub("run/checkpoint.safetensors"));
  CHECK(json::parse(header.metadata.at("vocabulary")) == vocab.at("tokens"));
  CHECK(json::parse(header.metadata.at("labels")) == vocab.at("labels"));
  // The data files are gone: the checkpoint alone describes the task.
  fs::remove(*config.task.train_file);
  LoadedRun run = load_run(dir.sub("run"));
  CHECK(run.task.name == "token_classification");
  CHECK(run.task.output_vocab.tokens() == std::vector<std::string>{"<s>", "blue", "gold", "green", "red"});
  const Prediction p = predict(run, "red purple blue");
  CHECK(p.tokens == std::vector<int32_t>{5, 1, 2});
  CHECK(p.predicted.size() == 3);
  CHECK_FALSE(p.expected.has_value());
  // The CLI prints labels and no rule's answer, and names the task by its label.
  const Cli cli = run_normlab(dir, fmt::format("predict --run {} --input \"red purple blue\"", dir.sub("run")));
  CHECK(cli.code == 0);
  CHECK(cli.out.find("predicted: ") != std::string::npos);
  CHECK(cli.out.find("expected") == std::string::npos);
  const Cli json_cli = run_normlab(dir, fmt::format("predict --run {} --input \"gold\" --json", dir.sub("run")));
  CHECK(json::parse(json_cli.out).at("task") == "shift-by-one");
}

TEST_CASE("own data: a sequence_classification run from the CLI logs its files and the lines it used") {
  TempDir dir;
  std::string train, valid;
  for (int i = 0; i < 40; ++i) {
    const int length = 1 + i % 8;  // 1..8; task.max_len 6 drops lengths 7 and 8
    std::string words;
    int good = 0;
    for (int t = 0; t < length; ++t) {
      const bool g = (i + t) % 3 == 0;
      good += g;
      words += std::string(t ? " " : "") + (g ? "good" : "bad");
    }
    (i < 30 ? train : valid) +=
        fmt::format("{{\"tokens\": \"{}\", \"label\": \"{}\"}}\n", words, 2 * good > length ? "pos" : "neg");
  }
  // A trailing blank line is accepted.
  dir.write("train.jsonl", train + "\n");
  dir.write("valid.jsonl", valid);
  dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
    "task": {"name": "sequence_classification", "train_file": "train.jsonl", "valid_file": "valid.jsonl",
             "max_len": 6, "eval_max_len": 8, "eval_examples": 10, "bucket_width": 4},
    "optim": {"lr": 0.01, "warmup_steps": 2},
    "train": {"steps": 4, "batch_size": 8, "eval_every": 0, "threads": 1}})");
  const Cli train_cli =
      run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("config.json"), dir.sub("run")));
  REQUIRE(train_cli.code == 0);
  CHECK(train_cli.err.find("task " + fs::path(dir.path).filename().string() +
                           "/train.jsonl (sequence_classification") != std::string::npos);
  // Of the 30 training lines, lengths 7 and 8 (i = 6, 7, 14, 15, 22, 23) are longer than 6.
  CHECK(train_cli.err.find("used 24 of 30 lines: 6 longer than task.max_len 6") != std::string::npos);
  CHECK(train_cli.out.find("trained lengths") != std::string::npos);
  const Cli eval_cli = run_normlab(dir, fmt::format("eval --run {}", dir.sub("run")));
  CHECK(eval_cli.code == 0);
  CHECK(eval_cli.out.find("trained lengths") != std::string::npos);
  CHECK(eval_cli.out.find("unseen lengths") != std::string::npos);
  const Cli predict_cli = run_normlab(dir, fmt::format("predict --run {} --input \"good good bad\"", dir.sub("run")));
  CHECK(predict_cli.code == 0);
  CHECK(predict_cli.out.find("label:") != std::string::npos);
  CHECK(predict_cli.out.find("expected") == std::string::npos);
  // An unknown label in the validation file is exit 2 with the line.
  dir.write("valid.jsonl", valid + "{\"tokens\": \"good\", \"label\": \"meh\"}\n");
  const Cli bad = run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("config.json"), dir.sub("run2")));
  CHECK(bad.code == 2);
  CHECK(bad.err.find("valid.jsonl:11: label: label \"meh\" does not occur in the training file") != std::string::npos);
}

TEST_CASE("own data: the shipped example configs load and name their data") {
  const RunConfig sentiment = load_config(std::string(NORMLAB_SOURCE_DIR) + "/configs/sentiment.json");
  CHECK(sentiment.task.name == data::TaskKind::sequence_classification);
  CHECK(task_title(sentiment) == "sentiment");
  const RunConfig shift = load_config(std::string(NORMLAB_SOURCE_DIR) + "/configs/shift.json");
  const data::Task task = build_task(shift);
  CHECK(task.output_vocab.find("<s>").has_value());
  RunConfig unlabeled = shift;
  unlabeled.task.label.reset();
  CHECK(task_title(unlabeled) == "shift/train.jsonl");
}

TEST_CASE("resume: a cosine schedule continued under a new train.steps has no jump") {
  optim::ScheduleOptions s;
  s.name = normlab::optim::ScheduleKind::warmup_cosine;
  s.warmup_steps = 10;
  s.total_steps = 100;
  s.min_lr_ratio = 0.1f;
  // Half-way: the continuation starts at the multiplier reached and decays to the floor at 300.
  const optim::ScheduleOptions longer = optim::extend_schedule(s, 50, 300);
  CHECK(optim::lr_factor(longer, 50) == optim::lr_factor(s, 50));
  CHECK(optim::lr_factor(longer, 300) == doctest::Approx(0.1f));
  for (int64_t step = 50; step < 300; ++step)
    CHECK(optim::lr_factor(longer, step + 1) <= optim::lr_factor(longer, step));
  // Finished: the extension stays at the floor.
  const optim::ScheduleOptions finished = optim::extend_schedule(s, 100, 200);
  CHECK(optim::lr_factor(finished, 150) == doctest::Approx(0.1f));
  // Same total: nothing changes.
  CHECK(optim::extend_schedule(s, 50, 100).restart_step == -1);
}

TEST_CASE("resume: extending a finished run keeps the lr continuous at the seam (metrics.jsonl)") {
  TempDir dir;
  RunConfig config = shift_config(dir);
  config.train.steps = 20;
  config.optim.min_lr_ratio = 0.2;
  {
    Trainer trainer(config);
    trainer.start(dir.sub("run"));
    trainer.fit();
  }
  const Cli cli = run_normlab(dir, fmt::format("train --resume {} --set train.steps=3e1", dir.sub("run")));
  REQUIRE(cli.code == 0);
  CHECK(cli.err.find("lr schedule: train.steps is now 30") != std::string::npos);
  std::vector<double> lr(31, -1.0);
  for (const json& r : records(dir.sub("run/metrics.jsonl")))
    if (!r.contains("split")) lr[r.at("step").get<size_t>()] = r.at("lr").get<double>();
  const double floor = config.optim.lr * config.optim.min_lr_ratio;
  // Past the warmup the lr never rises, and from the seam on it stays at the floor.
  for (int step = 3; step < 30; ++step) CHECK(lr[size_t(step) + 1] <= lr[size_t(step)]);
  CHECK(lr[21] == doctest::Approx(floor).epsilon(1e-6));
  CHECK(std::fabs(lr[21] - lr[20]) <= std::fabs(lr[20] - lr[19]));
  CHECK(lr[30] == doctest::Approx(floor).epsilon(1e-6));
}

TEST_CASE("messages: integral floats are integers - a run config may build on a base") {
  RunConfig c;
  apply_override(c, "train.steps=1e3");
  CHECK(c.train.steps == 1000);
  apply_override(c, "train.batch_size=8.0");
  CHECK(c.train.batch_size == 8);
  CHECK_THROWS_AS(apply_override(c, "train.steps=1.5"), InputError);
  TempDir dir;
  fs::create_directories(dir.path / "sub");
  dir.write("sub/data.jsonl", "{\"tokens\": \"a\", \"label\": \"x\"}\n");
  dir.write("sub/base.json", R"({"model": {"d_model": 32}, "task": {"name": "sequence_classification",
      "train_file": "data.jsonl", "valid_file": "data.jsonl"}, "train": {"steps": 7}})");
  dir.write("mine.json", R"({"base": "sub/base.json", "train": {"steps": 9}, "task": {"label": "mine"}})");
  const RunConfig mine = load_config(dir.sub("mine.json"));
  CHECK(mine.model.d_model == 32);
  CHECK(mine.train.steps == 9);
  CHECK(*mine.task.label == "mine");
  CHECK(*mine.task.train_file == fs::path(dir.sub("sub/data.jsonl")).lexically_normal().string());
}
