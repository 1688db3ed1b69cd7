#pragma once
// The checkpoint fuzz target: Trainer::load_checkpoint on a fuzzed checkpoint.safetensors, shared by
// fuzz/fuzz_checkpoint.cpp and tests/test_fuzz_regressions.cpp (see fuzz/fuzz_inputs.hpp for the
// contract). Unlike the other targets it needs the whole library: the model, the optimizer and the
// samplers that a checkpoint restores.
//
// Input layout, by the first byte:
//   'M'    the rest is a JSON object merged into the metadata of a valid checkpoint of a tiny run
//          (tensors kept): a string value replaces the key, null removes it, any other JSON value
//          is stored as its JSON text. This reaches the metadata checks (config, step, sampler,
//          dropout_rng, trainer state) without having to rebuild a valid file byte by byte.
//          A rest that is not a JSON object is skipped.
//   other  the rest is the checkpoint file itself.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_inputs.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/parallel.hpp"
#include "normlab/train/trainer.hpp"

namespace normlab::fuzz {

// A tiny run on generated data, with dropout on.
inline train::RunConfig checkpoint_run_config() {
  train::RunConfig config;
  config.model.d_model = 8;
  config.model.num_heads = 2;
  config.model.num_layers = 1;
  config.model.dim_feedforward = 16;
  config.model.dropout = 0.1;
  config.model.max_len = 16;
  config.task.name = normlab::data::TaskKind::reverse;
  config.task.min_len = 1;
  config.task.max_len = 8;
  config.task.eval_max_len = 8;
  config.task.eval_examples = 4;
  config.task.bucket_width = 4;
  config.train.steps = 4;
  config.train.batch_size = 2;
  config.train.eval_every = 0;
  config.train.log_every = 1;
  config.train.diagnostics_every = 0;
  config.train.checkpoint_every = 0;
  config.train.threads = 1;
  train::check_config(config, "fuzz checkpoint config");
  return config;
}

// The bytes of a valid checkpoint of that run after one step; built once per process.
inline const std::string& reference_checkpoint(const Scratch& scratch) {
  static const std::string bytes = [&scratch] {
    set_num_threads(1);
    train::Trainer trainer(checkpoint_run_config());
    trainer.train_step(trainer.next_batch(), false);
    const std::string path = scratch.path("reference.safetensors");
    trainer.save_checkpoint(path);
    return io::read_file(path, size_t{1} << 26);
  }();
  return bytes;
}

// The checkpoint file an input describes, or false if a metadata-mode input is not a JSON object.
inline bool checkpoint_bytes(std::string_view input, const Scratch& scratch, std::string* out) {
  if (input.empty() || input[0] != 'M') {
    *out = std::string(input.empty() ? input : input.substr(1));
    return true;
  }
  const nlohmann::json changes = nlohmann::json::parse(input.substr(1), nullptr, /*allow_exceptions=*/false);
  if (changes.is_discarded() || !changes.is_object()) return false;
  const io::SafetensorsFile reference =
      io::read_safetensors(scratch.write("reference-copy.safetensors", reference_checkpoint(scratch)));
  std::map<std::string, std::string> metadata = reference.metadata;
  for (const auto& [key, value] : changes.items()) {
    if (value.is_null()) {
      metadata.erase(key);
    } else {
      metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  *out = io::serialize_safetensors(metadata, reference.tensors);
  return true;
}

// Loads the checkpoint into a fresh trainer of the tiny run; one that loads must save and load again.
inline Outcome run_checkpoint(std::string_view input, const Scratch& scratch) {
  std::string bytes;
  if (!checkpoint_bytes(input, scratch, &bytes)) return Outcome::rejected;
  const std::string path = scratch.write("checkpoint.safetensors", bytes);
  set_num_threads(1);
  train::Trainer trainer(checkpoint_run_config());
  const Outcome outcome = expect_clean({path}, [&] { trainer.load_checkpoint(path); });
  if (outcome == Outcome::accepted) {
    const std::string copy_path = scratch.path("copy.safetensors");
    trainer.save_checkpoint(copy_path);
    train::Trainer again(checkpoint_run_config());
    again.load_checkpoint(copy_path);
    require(again.step() == trainer.step(), "checkpoint round trip changed the step");
  }
  return outcome;
}

}  // namespace normlab::fuzz
