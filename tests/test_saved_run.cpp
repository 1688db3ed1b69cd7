// A data-defined run loaded back from its checkpoint alone: the vocabulary, labels and majority
// label come from the metadata, and each malformed one is an InputError naming the checkpoint.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "normlab/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/train/saved_run.hpp"
#include "input_error.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::error_of;
using normlab::test::run_normlab;
using normlab::test::TempDir;
namespace fs = std::filesystem;

TEST_CASE("saved run: a data task's vocabulary, labels and majority label come from the checkpoint, checked") {
  TempDir dir("normlab_saved_run");
  std::string train;
  for (int i = 0; i < 24; ++i)
    train += fmt::format("{{\"tokens\": \"{}\", \"label\": \"{}\"}}\n", i % 3 ? "good day" : "bad day",
                         i % 3 ? "pos" : "neg");
  dir.write("train.jsonl", train);
  const std::string config = dir.write("config.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
    "task": {"name": "sequence_classification", "train_file": "train.jsonl", "valid_file": "train.jsonl",
             "max_len": 4, "eval_max_len": 4, "eval_examples": 8},
    "train": {"steps": 2, "batch_size": 8, "eval_every": 0, "threads": 1}})");
  const std::string run = dir.sub("run");
  REQUIRE(run_normlab({"train", "--config", config, "--out", run}, dir.sub("o"), dir.sub("e")) == 0);
  fs::remove(dir.sub("train.jsonl"));  // not needed to load the run

  const train::LoadedRun loaded = train::load_run(run);
  CHECK(loaded.task.input_vocab.find("good").has_value());
  CHECK(loaded.task.num_classes() == 2);
  REQUIRE(loaded.task.output_vocab.find("pos").has_value());
  CHECK(loaded.baselines.majority_label == *loaded.task.output_vocab.find("pos"));  // 16 of 24 lines

  const std::string checkpoint = run + "/checkpoint.safetensors";
  const io::SafetensorsFile original = io::read_safetensors(checkpoint);
  auto with_metadata = [&](const std::string& key, const std::string& value) {
    std::map<std::string, std::string> metadata = original.metadata;
    metadata[key] = value;
    io::write_safetensors(checkpoint, metadata, original.tensors);
    return error_of([&] { train::load_run(run); });
  };
  // Each malformed entry: one line that starts with the checkpoint and names the entry.
  auto names = [&](const std::string& message, const std::string& what) {
    INFO(message);
    CHECK(message.rfind(checkpoint + ": metadata", 0) == 0);
    CHECK(message.find(what) != std::string::npos);
  };
  const std::string vocabulary = original.metadata.at("vocabulary");
  CHECK(with_metadata("vocabulary", R"(["good", "[UNK]"])") ==
        checkpoint + ": metadata 'vocabulary' must start with \"[PAD]\", \"[UNK]\"");
  names(with_metadata("vocabulary", R"(["[PAD]", "[UNK]"])"),  // nothing after the specials
        "metadata 'vocabulary' must be a non-empty array of strings");
  with_metadata("vocabulary", vocabulary);
  // Named once: "CKPT: metadata 'labels' ...", not "CKPT: metadata: CKPT: metadata 'labels' ...".
  CHECK(with_metadata("labels", R"({"pos": 1})") ==
        checkpoint + ": metadata 'labels' must be a non-empty array of strings");
  names(with_metadata("labels", R"(["pos", 3])"), "metadata 'labels' must be a non-empty array of strings");
  names(with_metadata("labels", R"(["pos", "pos"])"), "pos");  // the data code's check of the labels
  CHECK(with_metadata("labels", R"(["neg", "pos"])").empty());
  CHECK(with_metadata("majority_label", "maybe") ==
        checkpoint + ": metadata 'majority_label' \"maybe\" is not one of the task's labels");
}
