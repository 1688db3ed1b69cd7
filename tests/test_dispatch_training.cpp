// A short training run on every kernel path this CPU has (NORMLAB_ISA=generic|avx2|avx512): the
// same seed and thread count must write the same metrics.jsonl (every loss, accuracy and gradient
// norm; only tokens_per_s differs) and a checkpoint with the same tensor bytes.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "isa_support.hpp"
#include "support.hpp"

using nlohmann::json;
using normlab::test::read_text;
using normlab::test::TempDir;

namespace {

// metrics.jsonl without the one field that measures time.
std::vector<json> metrics_without_timing(const std::string& path) {
  std::vector<json> lines;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) {
    json record = json::parse(line);
    record.erase("tokens_per_s");
    lines.push_back(record);
  }
  return lines;
}

// A safetensors file split into its JSON header, with the trainer's timing fields removed, and its
// tensor bytes.
struct Checkpoint {
  json header;
  std::string tensors;
};
Checkpoint read_checkpoint(const std::string& path) {
  const std::string bytes = read_text(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; i--) header_size = (header_size << 8) | uint8_t(bytes[size_t(i)]);
  REQUIRE(bytes.size() >= 8 + header_size);
  Checkpoint checkpoint{json::parse(bytes.substr(8, header_size)), bytes.substr(8 + header_size)};
  json trainer = json::parse(checkpoint.header["__metadata__"]["trainer"].get<std::string>());
  trainer.erase("wall_time_s");
  trainer.erase("timing");
  trainer["last_record"].erase("tokens_per_s");
  checkpoint.header["__metadata__"]["trainer"] = trainer;
  return checkpoint;
}

int train_on(const std::string& isa, const std::string& config, const std::string& out, const TempDir& dir) {
  const std::string command = "NORMLAB_ISA=" + isa + " \"" + NORMLAB_BINARY + "\" train --config \"" + config +
                              "\" --out \"" + out + "\" --threads 2 >\"" + dir.sub("log.txt") + "\" 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("train: the same run on every kernel path writes identical losses and checkpoints") {
  TempDir dir;
  // GELU (erfc, exp), dropout, post-LN LayerNorm, attention (softmax), cross-entropy; then DyT
  // (tanh) pre-norm with a final norm; then qk-norm and z-loss. Two threads, so the parallel
  // reductions run too.
  const std::vector<std::string> configs =
      {dir.write("layernorm.json", R"({
  "model": {"d_model": 16, "heads": 2, "layers": 2, "ffn": 48, "max_len": 16, "activation": "gelu",
            "dropout": 0.1, "norm": "layernorm", "placement": "post"},
  "task": {"name": "reverse", "min_len": 1, "max_len": 10, "eval_max_len": 12, "eval_examples": 16, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 6, "batch_size": 8, "eval_every": 3, "log_every": 1, "diagnostics_every": 3,
            "checkpoint_every": 6, "seed": 7}
})"),
       dir.write("dyt.json", R"({
  "model": {"d_model": 16, "heads": 4, "layers": 1, "ffn": 32, "max_len": 16, "activation": "gelu",
            "norm": "dyt", "placement": "pre", "final_norm": true},
  "task": {"name": "reverse", "min_len": 1, "max_len": 10, "eval_max_len": 12, "eval_examples": 16, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 4, "batch_size": 8, "eval_every": 4, "log_every": 1, "checkpoint_every": 4, "seed": 3}
})"),
       // qk-norm (LayerNorm over each head's 4 features) with no other normalization, z-loss, and
       // the diagnostics (attention statistics, log Z, update ratios) at every step.
       dir.write("qk_norm.json", R"({
  "model": {"d_model": 16, "heads": 4, "layers": 2, "ffn": 32, "max_len": 16, "norm": "none", "qk_norm": "layernorm",
            "norm_eps": 1e-6},
  "task": {"name": "reverse", "min_len": 1, "max_len": 10, "eval_max_len": 12, "eval_examples": 16, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2, "z_loss": 0.001},
  "train": {"steps": 4, "batch_size": 8, "eval_every": 4, "log_every": 1, "diagnostics_every": 1,
            "checkpoint_every": 4, "seed": 5}
})")};
  const std::vector<normlab::kernels::Isa> isas = normlab::test::available_isas();
  for (size_t c = 0; c < configs.size(); c++) {
    const std::string reference_run = dir.sub("run" + std::to_string(c) + "_generic");
    REQUIRE(train_on("generic", configs[c], reference_run, dir) == 0);
    const std::vector<json> reference = metrics_without_timing(reference_run + "/metrics.jsonl");
    const Checkpoint reference_checkpoint = read_checkpoint(reference_run + "/checkpoint.safetensors");
    REQUIRE(reference.size() >= 4);
    REQUIRE(reference_checkpoint.tensors.size() > 1000);
    for (normlab::kernels::Isa isa : isas) {
      if (isa == normlab::kernels::Isa::generic) continue;
      const std::string name = normlab::kernels::isa_name(isa);
      INFO(configs[c] << " on " << name);
      const std::string run = dir.sub("run" + std::to_string(c) + "_" + name);
      REQUIRE(train_on(name, configs[c], run, dir) == 0);
      const std::vector<json> got = metrics_without_timing(run + "/metrics.jsonl");
      REQUIRE(got.size() == reference.size());
      for (size_t i = 0; i < got.size(); i++) {
        INFO("metrics line " << i + 1);
        CHECK(got[i] == reference[i]);
      }
      const Checkpoint checkpoint = read_checkpoint(run + "/checkpoint.safetensors");
      CHECK(checkpoint.header == reference_checkpoint.header);
      CHECK(checkpoint.tensors == reference_checkpoint.tensors);  // parameters and Adam moments
    }
  }
}
