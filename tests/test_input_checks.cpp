// Input at fault gets exit 2 and a message naming the file and key, never "internal error":
// numbers checked at the precision the code computes in, NUL bytes in paths, non-ASCII text end to
// end, messages that name their file, --set errors that name --set (docs/RELIABILITY.md).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/data/jsonl.hpp"
#include "normlab/data/task.hpp"
#include "normlab/data/vocab.hpp"
#include "normlab/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/trainer.hpp"
#include "input_error.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace normlab;
using normlab::test::error_of;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

std::string config_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  TempDir dir;
  const std::string path = dir.write("x.json", text);
  return error_of([&] { train::load_config(path, overrides); });
}

}  // namespace

TEST_CASE("config: numbers are checked at float32, the precision normlab computes in") {
  CHECK(config_error("{}", {"optim.lr=1e-46"}) ==
        "--set optim.lr=1e-46: optim.lr: must be a number in (0, 10], got 1e-46, which is 0 in float32, the precision "
        "normlab computes in");
  CHECK(config_error("{}", {"optim.eps=1e-300"})
            .find("optim.eps: must be a number in (0, 1], got 1e-300, which is 0 "
                  "in float32") != std::string::npos);
  CHECK(config_error("{}", {"optim.beta1=0.99999999999"}).find("which is 1 in float32") != std::string::npos);
  CHECK(config_error(R"({"model": {"dropout": 0.99999999999}})")
            .find("x.json: model.dropout: must be a number in [0, 1)") != std::string::npos);
  // Subnormal floats lose precision and underflow under a schedule factor: refused as well.
  CHECK(config_error("{}", {"optim.lr=1e-40"}).find("optim.lr: must be a number in (0, 10]") != std::string::npos);
  CHECK(config_error("{}", {"optim.lr=1e-30", "optim.beta2=0.9999999", "model.dropout=0.9999"}).empty());
}

TEST_CASE("config: a NUL byte in a file path is refused, from a file and from --set") {
  TempDir dir;
  dir.write("train.jsonl", "{\"tokens\": [\"1\"], \"targets\": [\"1\"]}\n");
  const std::string path = dir.write("x.json", R"({"task": {"train_file": "train.jsonl\u0000x"}})");
  CHECK(error_of([&] {
          train::load_config(path);
        }).find(path + ": task.train_file: a file path cannot contain a NUL byte") == 0);
  const std::string empty = dir.write("empty.json", "{}");
  const std::string set = "task.train_file=\"" + dir.sub("train.jsonl") + "\\u0000x\"";
  CHECK(error_of([&] {
          train::load_config(empty, {set});
        }).find("--set " + set + ": task.train_file: a file path cannot") == 0);
}

TEST_CASE("config: a cross-field error caused by --set names --set, one in the file names the file") {
  CHECK(config_error("{}", {"model.d_model=65"}) ==
        "--set model.d_model=65: model.d_model: must be divisible by model.heads (got 65 and 4)");
  CHECK(config_error(R"({"model": {"d_model": 65}})", {"train.steps=3"})
            .find("x.json: model.d_model: must be divisible") != std::string::npos);
}

TEST_CASE("jsonl: a symbol with a NUL byte is shown escaped, so the message is whole") {
  const data::Task task = data::make_task("reverse");
  const std::string message =
      error_of([&] { data::parse_jsonl_line(R"({"tokens": ["\u0000"], "targets": ["1"]})", task, "d.jsonl:4"); });
  CHECK(message.find("d.jsonl:4: tokens[0]: unknown symbol \"\\u0000\" for task reverse (known: 0 1 2") == 0);
  CHECK(message.find('\0') == std::string::npos);
}

TEST_CASE("jsonl: lines longer than any example can be are refused before parsing") {
  data::Task task = data::make_task("reverse");
  task.max_seq_len = 16;
  const std::string line = "{\"tokens\": [" + std::string(6000, ' ') + "\"1\"], \"targets\": [\"1\"]}";
  CHECK(data::max_jsonl_line_bytes(16) < int64_t(line.size()));
  CHECK(error_of([&] { data::parse_jsonl_line(line, task, "d.jsonl:1"); }).find("d.jsonl:1: line of") == 0);
}

TEST_CASE("text: UTF-8 characters are tokens of their own - invalid UTF-8 is refused") {
  const data::Task task = data::make_text_task({"καλή μέρα", "abc"});
  // [MASK], [UNK], then the characters in code point order: ' ', a, b, c, έ, ή, α, κ, λ, μ, ρ
  CHECK(task.input_vocab.size() == 2 + 11);
  CHECK(task.input_vocab.token(2) == " ");
  CHECK(task.input_vocab.token(12) == "ρ");
  const std::vector<int32_t> ids = task.encode("μέρα", "--input");
  REQUIRE(ids.size() == 4);
  CHECK(task.decode_input(ids) == "μέρα");
  CHECK(task.encode("ω", "--input") == std::vector<int32_t>{task.input_vocab.id("[UNK]")});
  CHECK(error_of([&] { task.encode("a\xce", "--input"); }) == "--input: invalid UTF-8 (byte 0xce at byte 2)");
  CHECK(error_of([&] { task.encode("\xed\xa0\x80", "--input"); }).find("invalid UTF-8") != std::string::npos);
  CHECK(data::utf8_char_length("\xf0\x9f\x98\x80", 0) == 4);
  CHECK(data::utf8_char_length("\xc0\xaf", 0) == 0);  // overlong "/"
}

TEST_CASE("mlm_text on Greek text: train, then predict --json prints valid UTF-8") {
  TempDir dir("normlab_test_greek");
  std::string lines;
  for (int i = 0; i < 40; ++i) lines += "{\"text\": \"Εν αρχή ην ο λόγος, και ο λόγος ην προς τον θεόν.\"}\n";
  dir.write("train.jsonl", lines);
  dir.write("valid.jsonl", "{\"text\": \"και ο λόγος ην\"}\n");
  const std::string config = dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 64},
    "task": {"name": "mlm_text", "train_file": "train.jsonl", "valid_file": "valid.jsonl", "min_len": 1,
             "max_len": 64, "eval_max_len": 64, "eval_examples": 4},
    "train": {"steps": 3, "batch_size": 4, "eval_every": 0, "checkpoint_every": 0, "threads": 1}
  })");
  const std::string run = dir.sub("run");
  REQUIRE(run_normlab({"train", "--config", config, "--out", run}, dir.sub("o"), dir.sub("e")) == 0);
  const int code =
      run_normlab({"predict", "--run", run, "--input", "ο λ[MASK]γος", "--json"}, dir.sub("p.json"), dir.sub("pe"));
  INFO(read_text(dir.sub("pe")));
  REQUIRE(code == 0);
  const nlohmann::json out = nlohmann::json::parse(read_text(dir.sub("p.json")));
  CHECK(out["input"] == "ο λ[MASK]γος");
  CHECK(out["read_as"].size() == 7);
  // The vocabulary (and so the checkpoint's characters) holds whole characters.
  train::LoadedRun loaded = train::load_run(run);
  CHECK(loaded.task.input_vocab.find("λ").has_value());
  CHECK(!loaded.task.input_vocab.find("\xce").has_value());

  // A checkpoint whose characters are empty, torn UTF-8 or whose train_max_len is absurd: InputError
  // naming the file (never the data code's UsageError, an internal error).
  const std::string checkpoint = run + "/checkpoint.safetensors";
  const io::SafetensorsFile original = io::read_safetensors(checkpoint);
  auto with_metadata = [&](const std::string& key, const std::string& value) {
    std::map<std::string, std::string> metadata = original.metadata;
    metadata[key] = value;
    io::write_safetensors(checkpoint, metadata, original.tensors);
    return error_of([&] { train::load_run(run); });
  };
  CHECK(with_metadata("task_characters", "[]") == checkpoint + ": metadata 'task_characters' is empty");
  CHECK(with_metadata("task_characters", "[206]").find(checkpoint + ": metadata 'task_characters': invalid UTF-8") ==
        0);
  CHECK(with_metadata("train_max_len", "99999999999").find(checkpoint + ": metadata 'train_max_len' must be at most") ==
        0);
}

TEST_CASE("messages name their file: model.vocab_size on mlm_text names the training file") {
  TempDir dir;
  dir.write("train.jsonl", "{\"text\": \"abcdef\"}\n");
  const std::string path = dir.write("x.json", R"({"model": {"vocab_size": 3},
    "task": {"name": "mlm_text", "train_file": "train.jsonl", "valid_file": "train.jsonl", "max_len": 8, "eval_max_len": 8}})");
  const train::RunConfig config = train::load_config(path);
  CHECK(error_of([&] { train::Trainer trainer(config); }).find("(the characters of " + dir.sub("train.jsonl")) !=
        std::string::npos);
}

TEST_CASE("messages name their file: a training file that shrank before a resume") {
  TempDir dir;
  std::string lines;
  for (int i = 0; i < 40; ++i) lines += "{\"tokens\": [\"1\", \"2\"], \"targets\": [\"2\", \"1\"]}\n";
  const std::string data = dir.write("train.jsonl", lines);
  const std::string path = dir.write("x.json", R"({"model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 16},
    "task": {"train_file": "train.jsonl", "max_len": 8, "eval_max_len": 8, "eval_examples": 8},
    "train": {"steps": 4, "batch_size": 8, "eval_every": 0, "checkpoint_every": 2}})");
  const train::RunConfig config = train::load_config(path);
  {
    train::Trainer trainer(config);
    trainer.start(dir.sub("run"));
    trainer.fit();
  }
  dir.write("train.jsonl", lines.substr(0, lines.size() / 2));
  train::RunConfig longer = config;
  longer.train.steps = 8;
  // The data fingerprint names the file first; accepted, the sampler's state cannot go on either.
  {
    train::Trainer trainer(longer);
    CHECK(error_of([&] { trainer.resume(dir.sub("run")); }).find(data + " (task.train_file): its content changed") ==
          0);
  }
  train::Trainer trainer(longer);
  CHECK(error_of([&] {
          trainer.resume(dir.sub("run"), /*accept_changed_data=*/true);
        }).find(dir.sub("run") + "/checkpoint.safetensors: metadata 'sampler': saved for 40 examples") == 0);
}

TEST_CASE("train: an output path through a file names the file (not 'Success')") {
  TempDir dir;
  dir.write("runs", "not a directory");
  const std::string config = dir.write("c.json", R"({"train": {"steps": 1}})");
  const int code =
      run_normlab({"train", "--config", config, "--out", dir.sub("runs") + "/x"}, dir.sub("o"), dir.sub("e"));
  CHECK(code == 2);
  CHECK(read_text(dir.sub("e")) == "normlab: error: " + dir.sub("runs") + "/x: cannot create the run directory: " +
                                       dir.sub("runs") + " is a file, not a directory\n");
}

TEST_CASE("bench gemm: a shape that would run for hours is refused with the estimate and a hint") {
  TempDir dir;
  const int code =
      run_normlab({"bench", "gemm", "--shape", "8192,8192,8192", "--threads", "1"}, dir.sub("o"), dir.sub("e"));
  const std::string message = read_text(dir.sub("e"));
  INFO(message);
  CHECK(code == 2);
  CHECK(message.find("would take at least") != std::string::npos);
  CHECK(message.find("fewer --repeats") != std::string::npos);
}
