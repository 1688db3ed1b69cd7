// Tests for the trainer: learning, determinism, exact resume, divergence, checkpoint validation,
// evaluation against a reference loop, and loading a run back.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/trainer.hpp"

#include "input_error.hpp"
#include "support.hpp"

using normlab::test::error_of;
using normlab::test::TempDir;

namespace fs = std::filesystem;
using namespace normlab;
using namespace normlab::train;
using nlohmann::json;

namespace {

// A model small enough that a step takes well under a millisecond.
RunConfig tiny_config() {
  RunConfig c;
  c.model.d_model = 16;
  c.model.num_heads = 2;
  c.model.num_layers = 2;
  c.model.dim_feedforward = 32;
  c.model.max_len = 16;
  c.task.name = data::TaskKind::reverse;
  c.task.min_len = 1;
  c.task.max_len = 8;
  c.task.eval_max_len = 12;
  c.task.eval_examples = 32;
  c.task.bucket_width = 4;
  c.optim.lr = 0.01;
  c.optim.warmup_steps = 5;
  c.train.steps = 30;
  c.train.batch_size = 16;
  c.train.eval_every = 10;
  c.train.log_every = 10;
  c.train.diagnostics_every = 5;
  c.train.checkpoint_every = 10;
  c.train.threads = 1;
  check_config(c, "tiny");
  return c;
}

std::vector<json> read_metrics(const std::string& path) {
  std::vector<json> records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) records.push_back(json::parse(line));
  return records;
}

// Records without their wall-clock field, as text: the part that must be bit-identical.
std::vector<std::string> deterministic_lines(const std::string& path) {
  std::vector<std::string> lines;
  for (json record : read_metrics(path)) {
    record.erase("tokens_per_s");
    lines.push_back(record.dump());
  }
  return lines;
}

json summary_without_time(const std::string& path) {
  std::ifstream in(path);
  json summary = json::parse(in);
  summary.erase("wall_time_s");
  summary.erase("timing");
  summary["final_train"].erase("tokens_per_s");
  return summary;
}

TrainSummary train_in(const RunConfig& config, const std::string& dir, TrainLogger* logger = nullptr) {
  Trainer trainer(config, logger);
  trainer.start(dir);
  return trainer.fit();
}

struct CrashAt : TrainLogger {
  int64_t at;
  explicit CrashAt(int64_t step) : at(step) {}
  void step(const StepRecord& record, int64_t) override {
    if (record.step == at) throw std::runtime_error("simulated crash");
  }
};

// Train uninterrupted; train again but crash after the first checkpoint (leaving records past it
// and a torn line), resume; the metrics, summary and final weights must match exactly.
void check_resume_matches(const RunConfig& config) {
  TempDir dir;
  const std::string straight = dir.sub("straight"), resumed = dir.sub("resumed");
  train_in(config, straight);

  CrashAt crash(config.train.checkpoint_every + 4);
  CHECK_THROWS_AS(train_in(config, resumed, &crash), std::runtime_error);
  {
    std::ofstream torn(RunPaths(resumed).metrics, std::ios::app);
    torn << "{\"step\": " << config.train.checkpoint_every + 5 << ", \"loss\": 1.2";
  }
  {
    Trainer trainer(config);
    trainer.resume(resumed);
    CHECK(trainer.step() == config.train.checkpoint_every);
    trainer.fit();
  }
  const std::vector<std::string> a = deterministic_lines(RunPaths(straight).metrics);
  const std::vector<std::string> b = deterministic_lines(RunPaths(resumed).metrics);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("line " << i + 1);
    CHECK(a[i] == b[i]);
  }
  CHECK(summary_without_time(RunPaths(straight).summary) == summary_without_time(RunPaths(resumed).summary));
  io::SafetensorsFile fa = io::read_safetensors(RunPaths(straight).checkpoint);
  io::SafetensorsFile fb = io::read_safetensors(RunPaths(resumed).checkpoint);
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    INFO(fa.tensors[i].name);
    CHECK(fa.tensors[i].name == fb.tensors[i].name);
    CHECK(fa.tensors[i].bytes == fb.tensors[i].bytes);
  }
}

}  // namespace

TEST_CASE("trainer: loss decreases on reverse") {
  TempDir dir;
  RunConfig config = tiny_config();
  config.model.d_model = 32;
  config.model.dim_feedforward = 64;
  config.train.steps = 100;
  config.train.checkpoint_every = 0;
  config.train.eval_every = 0;
  config.optim.lr = 0.005;
  TrainSummary summary = train_in(config, dir.sub("run"));
  CHECK(!summary.diverged);
  CHECK(summary.steps == 100);
  std::vector<json> records = read_metrics(RunPaths(dir.sub("run")).metrics);
  double first = 0, last = 0;
  int steps = 0;
  for (const json& r : records) {
    if (r.contains("split")) continue;
    ++steps;
    const int64_t step = r["step"];
    if (step <= 10) first += r["loss"].get<double>() / 10;
    if (step > 90) last += r["loss"].get<double>() / 10;
  }
  CHECK(steps == 100);
  MESSAGE("mean loss of steps 1-10: " << first << ", of steps 91-100: " << last);
  CHECK(first > 2.0);  // about ln(10) at the start
  CHECK(last < first - 0.5);
  // The one evaluation (at the end) agrees with the summary.
  REQUIRE(summary.final_valid);
  CHECK(*summary.final_valid_step == 100);
  CHECK(summary.final_valid->loss < first);
}

TEST_CASE("trainer: the same config, seed and threads give bit-identical metrics") {
  TempDir dir;
  RunConfig config = tiny_config();
  config.model.dropout = 0.1;  // dropout masks must be reproducible too
  train_in(config, dir.sub("a"));
  train_in(config, dir.sub("b"));
  const std::vector<std::string> a = deterministic_lines(RunPaths(dir.sub("a")).metrics);
  CHECK(a == deterministic_lines(RunPaths(dir.sub("b")).metrics));
  CHECK(summary_without_time(RunPaths(dir.sub("a")).summary) == summary_without_time(RunPaths(dir.sub("b")).summary));
  // 30 steps and evaluations at 10, 20, 30.
  CHECK(a.size() == 33);

  // Another seed changes the run.
  config.train.seed = 1;
  train_in(config, dir.sub("c"));
  CHECK(a != deterministic_lines(RunPaths(dir.sub("c")).metrics));
}

TEST_CASE("trainer: metrics records carry diagnostics at step 1 and every diagnostics_every steps") {
  TempDir dir;
  RunConfig config = tiny_config();
  train_in(config, dir.sub("run"));
  int evals = 0;
  for (const json& r : read_metrics(RunPaths(dir.sub("run")).metrics)) {
    const int64_t step = r["step"];
    if (r.contains("split")) {
      ++evals;
      CHECK(r["split"] == "valid");
      CHECK(step % 10 == 0);
      int64_t count = 0;
      for (const json& b : r["buckets"]) {
        count += b["count"].get<int64_t>();
        // lengths 9-12 lie beyond the training maximum of 8
        CHECK(b["beyond_train"] == (b["min_len"].get<int>() > 8));
      }
      CHECK(count == 32);
      continue;
    }
    for (const char* key : {"loss", "accuracy", "lr", "grad_norm", "tokens_per_s"}) CHECK(r.contains(key));
    const bool diagnostics = step == 1 || step % 5 == 0;  // step 1: the initial weights
    CHECK(r.contains("residual_rms") == diagnostics);
    CHECK(r.contains("layer_grad_norms") == diagnostics);
    if (diagnostics) {
      CHECK(r["residual_rms"].size() == 2);
      CHECK(r["layer_grad_norms"].size() == 2);
      CHECK(r["layer_grad_norms"][0].get<double>() > 0);
    }
  }
  CHECK(evals == 3);
  std::ifstream in(RunPaths(dir.sub("run")).config);
  CHECK(config_from_json(json::parse(in), "config.json") == config);
}

TEST_CASE("trainer: resume after a crash reproduces the uninterrupted run (generated data, dropout)") {
  RunConfig config = tiny_config();
  config.model.dropout = 0.1;
  check_resume_matches(config);
}

TEST_CASE("trainer: resume after a crash reproduces the uninterrupted run (file data across epochs)") {
  RunConfig config = tiny_config();
  config.task.name = data::TaskKind::majority;
  config.task.train_file = std::string(NORMLAB_SOURCE_DIR) + "/data/majority/train.jsonl";
  config.task.max_len = 4;          // about 250 examples: 16 batches per epoch, so the run crosses epochs
  config.model.norm = "batchnorm";  // running statistics are buffers that must come back too
  config.model.placement = normlab::nn::Placement::post;
  check_resume_matches(config);
}

TEST_CASE("trainer: a NaN stops the run and is recorded as divergence") {
  TempDir dir;
  RunConfig config = tiny_config();
  Trainer trainer(config);
  trainer.start(dir.sub("run"));
  for (auto& [name, tensor] : trainer.model().named_parameters()) {
    if (name == "head.bias") tensor.data()[0] = std::numeric_limits<float>::quiet_NaN();
  }
  TrainSummary summary = trainer.fit();
  CHECK(summary.diverged);
  CHECK(summary.diverged_at_step == 1);
  CHECK(summary.steps == 0);
  std::vector<json> records = read_metrics(RunPaths(dir.sub("run")).metrics);
  REQUIRE(records.size() == 1);
  CHECK(records[0]["diverged"] == true);
  CHECK(records[0]["loss"].is_null());
  std::ifstream in(RunPaths(dir.sub("run")).summary);
  json written = json::parse(in);
  CHECK(written["diverged"] == true);
  CHECK(written["diverged_at_step"] == 1);
  // No update was applied and no checkpoint of the broken state was written.
  CHECK(!fs::exists(RunPaths(dir.sub("run")).checkpoint));
}

// A NaN the forward drops but the backward spreads: one hidden unit of layer 0's FFN with NaN
// weights has NaN pre-activations, which ReLU turns to 0 (the loss stays finite), while dX = dH W1
// multiplies those NaN weights by the unit's zero gradients. With clipping off (the update then
// takes the norm in its own pass when the backward found every gradient finite) and on, the step
// is recorded as diverged with the norm NaN, and changes no parameter and no optimizer state.
TEST_CASE("trainer: a non-finite gradient under a finite loss updates nothing") {
  for (double clip : {0.0, 1.0}) {
    INFO("clip_grad_norm " << clip);
    RunConfig config = tiny_config();
    config.optim.name = normlab::optim::OptimizerKind::adam;
    config.optim.clip_grad_norm = clip;
    Trainer trainer(config);
    const StepRecord first = trainer.train_step(trainer.next_batch(), false);  // Adam's state is not zero now
    REQUIRE(!first.diverged);
    CHECK(std::isfinite(first.grad_norm));
    REQUIRE(trainer.step() == 1);
    bool poisoned = false;
    for (auto& [name, tensor] : trainer.model().named_parameters()) {
      if (name != "layers.0.linear1.weight") continue;
      const int64_t d_model = tensor.shape()[1];
      for (int64_t c = 0; c < d_model; c++) tensor.data()[c] = std::numeric_limits<float>::quiet_NaN();  // row 0
      poisoned = true;
    }
    REQUIRE(poisoned);
    std::vector<std::vector<float>> before;
    for (const auto& [name, tensor] : trainer.model().named_parameters())
      before.emplace_back(tensor.data(), tensor.data() + tensor.numel());
    std::vector<std::vector<float>> state_before;
    for (const auto& [name, tensor] : trainer.optimizer().state())
      state_before.emplace_back(tensor.data(), tensor.data() + tensor.numel());

    const StepRecord record = trainer.train_step(trainer.next_batch(), false);
    CHECK(std::isfinite(record.loss));
    CHECK(record.diverged);
    CHECK(std::isnan(record.grad_norm));
    CHECK(trainer.step() == 1);
    CHECK(trainer.optimizer().step_count() == 1);
    size_t k = 0;
    for (const auto& [name, tensor] : trainer.model().named_parameters()) {
      INFO(name);
      CHECK(std::memcmp(tensor.data(), before[k].data(), sizeof(float) * before[k].size()) == 0);
      k++;
    }
    k = 0;
    for (const auto& [name, tensor] : trainer.optimizer().state()) {
      INFO(name);
      CHECK(std::memcmp(tensor.data(), state_before[k].data(), sizeof(float) * state_before[k].size()) == 0);
      k++;
    }
  }
}

TEST_CASE("trainer: a huge learning rate without normalization diverges") {
  TempDir dir;
  RunConfig config = tiny_config();
  config.model.norm = "none";
  config.optim.name = normlab::optim::OptimizerKind::sgd;
  config.optim.lr = 10;
  config.optim.schedule = normlab::optim::ScheduleKind::constant;
  config.optim.clip_grad_norm = 0;
  config.train.steps = 200;
  TrainSummary summary = train_in(config, dir.sub("run"));
  CHECK(summary.diverged);
  REQUIRE(summary.diverged_at_step);
  MESSAGE("diverged at step " << *summary.diverged_at_step);
  CHECK(summary.steps == *summary.diverged_at_step - 1);
  std::vector<json> records = read_metrics(RunPaths(dir.sub("run")).metrics);
  CHECK(records.back()["diverged"] == true);
  CHECK(records.back()["step"] == *summary.diverged_at_step);
}

TEST_CASE("trainer: loading a checkpoint validates every tensor name and shape") {
  TempDir dir;
  RunConfig config = tiny_config();
  config.train.steps = 3;
  train_in(config, dir.sub("run"));
  const std::string good = RunPaths(dir.sub("run")).checkpoint;
  io::SafetensorsFile file = read_checkpoint(good);

  auto rewritten = [&](const std::function<void(std::vector<io::TensorRecord>&)>& edit) {
    std::vector<io::TensorRecord> tensors = file.tensors;
    edit(tensors);
    const std::string path = dir.sub("bad.safetensors");
    io::write_safetensors(path, file.metadata, tensors);
    return error_of([&] {
      Trainer trainer(config);
      trainer.load_checkpoint(path);
    });
  };
  auto find = [](std::vector<io::TensorRecord>& tensors, const std::string& name) -> io::TensorRecord& {
    for (io::TensorRecord& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  };

  std::string transposed = rewritten([&](auto& t) { find(t, "layers.0.linear1.weight").shape = {16, 32}; });
  CHECK(transposed.find("tensor 'layers.0.linear1.weight'") != std::string::npos);
  CHECK(transposed.find("expected shape [32, 16] got [16, 32]") != std::string::npos);

  std::string missing = rewritten([&](auto& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](const io::TensorRecord& r) { return r.name == "norm.weight"; }),
            t.end());
  });
  CHECK(missing.find("'norm.weight'") != std::string::npos);

  std::string extra = rewritten([&](auto& t) {
    float value = 1.0f;
    t.push_back(io::make_f32("layers.7.extra", {1}, &value));
  });
  CHECK(extra.find("tensor 'layers.7.extra' is not part of the model") != std::string::npos);

  std::string optimizer = rewritten([&](auto& t) { find(t, "optim.exp_avg.head.bias").shape = {2, 5}; });
  CHECK(optimizer.find("optim.exp_avg.head.bias") != std::string::npos);

  // A checkpoint of another model: the config in its metadata says which key differs.
  RunConfig wider = config;
  wider.model.d_model = 32;
  std::string other = error_of([&] {
    Trainer trainer(wider);
    trainer.load_checkpoint(good);
  });
  CHECK(other.find("model.d_model: cannot change on resume (the run has 16, requested 32)") != std::string::npos);

  // The intact checkpoint loads and restores the step.
  Trainer trainer(config);
  trainer.load_checkpoint(good);
  CHECK(trainer.step() == 3);
}

TEST_CASE("trainer: a run directory with a checkpoint is not overwritten - resume needs one") {
  TempDir dir;
  RunConfig config = tiny_config();
  config.train.steps = 2;
  train_in(config, dir.sub("run"));
  std::string refused = error_of([&] { train_in(config, dir.sub("run")); });
  CHECK(refused.find("already holds a run") != std::string::npos);
  std::string missing = error_of([&] {
    Trainer trainer(config);
    trainer.resume(dir.sub("missing"));
  });
  CHECK(missing.find("no such run directory") != std::string::npos);
  std::filesystem::create_directories(dir.sub("empty"));
  std::string nothing = error_of([&] {
    Trainer trainer(config);
    trainer.resume(dir.sub("empty"));
  });
  CHECK(nothing.find("no checkpoint.safetensors to resume from") != std::string::npos);
  // Resuming with more steps continues from step 2.
  config.train.steps = 4;
  Trainer trainer(config);
  trainer.resume(dir.sub("run"));
  TrainSummary summary = trainer.fit();
  CHECK(summary.steps == 4);
  std::vector<json> records = read_metrics(RunPaths(dir.sub("run")).metrics);
  std::vector<int64_t> steps;
  for (const json& r : records)
    if (!r.contains("split")) steps.push_back(r["step"]);
  CHECK(steps == std::vector<int64_t>{1, 2, 3, 4});
}

TEST_CASE("trainer: truncate_metrics keeps whole lines up to the checkpoint step") {
  TempDir dir;
  const std::string path = dir.sub("metrics.jsonl");
  {
    std::ofstream out(path);
    out << "{\"step\":1}\n{\"step\":2}\n{\"step\":2,\"split\":\"valid\"}\n{\"step\":3}\n{\"step\":4}\n{\"step\":5,\"lo";
  }
  const std::string kept = "{\"step\":1}\n{\"step\":2}\n{\"step\":2,\"split\":\"valid\"}\n";
  CHECK(truncate_metrics(path, 2) == static_cast<int64_t>(kept.size()));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == kept);
  // Only the torn line goes when everything else is before the step.
  {
    std::ofstream out(path);
    out << "{\"step\":1}\n{\"step\":2}\n{\"step\":3";
  }
  truncate_metrics(path, 10);
  CHECK(read_metrics(path).size() == 2);
}

TEST_CASE("trainer: evaluation matches a float64 reference loop over single sequences") {
  RunConfig config = tiny_config();
  Trainer trainer(config);
  for (int i = 0; i < 5; ++i) trainer.train_step(trainer.next_batch(), false);
  EvalMetrics metrics = *trainer.evaluate_valid();
  CHECK(trainer.model().is_training());  // evaluation restores the mode

  nn::EncoderModel& model = trainer.model();
  model.eval();
  NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t targets = 0, correct = 0, sequences_correct = 0;
  for (const data::Example& example : trainer.valid_set().examples()) {
    const int64_t T = static_cast<int64_t>(example.tokens.size());
    Tensor logits = model.forward(example.tokens, {0, T});  // one sequence: (T, V)
    const int64_t V = logits.size(1);
    bool all_right = true;
    for (int64_t t = 0; t < T; ++t) {
      const float* z = logits.data() + t * V;
      double max = z[0];
      int64_t argmax = 0;
      for (int64_t v = 1; v < V; ++v) {
        if (z[v] > max) max = z[v], argmax = v;
      }
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - max);
      loss_sum += std::log(sum) + max - double(z[example.targets[size_t(t)]]);
      ++targets;
      const bool right = argmax == example.targets[size_t(t)];
      correct += right;
      all_right = all_right && right;
    }
    sequences_correct += all_right;
  }
  model.train();
  CHECK(metrics.targets == targets);
  CHECK(metrics.sequences == trainer.valid_set().size());
  CHECK(metrics.loss == doctest::Approx(loss_sum / double(targets)).epsilon(1e-5));
  CHECK(metrics.accuracy == doctest::Approx(double(correct) / double(targets)));
  CHECK(metrics.sequence_accuracy == doctest::Approx(double(sequences_correct) / double(metrics.sequences)));
  int64_t bucket_sequences = 0, bucket_targets = 0;
  for (const BucketMetrics& b : metrics.buckets) {
    bucket_sequences += b.sequences;
    bucket_targets += b.targets;
  }
  CHECK(bucket_sequences == metrics.sequences);
  CHECK(bucket_targets == metrics.targets);
}

TEST_CASE("trainer: a saved run loads back for evaluation and prediction") {
  TempDir dir;
  RunConfig config = tiny_config();
  TrainSummary summary = train_in(config, dir.sub("run"));
  LoadedRun run = load_run(dir.sub("run"));
  CHECK(run.step == 30);
  CHECK(run.train_max_len == 8);
  CHECK(run.config == config);
  RunEvaluation evaluation = evaluate_run(run, std::nullopt);
  REQUIRE(summary.final_valid);
  CHECK(evaluation.metrics.loss == summary.final_valid->loss);  // same weights, same batches: exact
  CHECK(evaluation.metrics.accuracy == summary.final_valid->accuracy);

  Prediction p = predict(run, "1 2 3");
  CHECK(p.tokens.size() == 3);
  CHECK(p.predicted.size() == 3);
  REQUIRE(p.expected);
  CHECK(run.task.decode_targets(*p.expected) == "3 2 1");
  for (float probability : p.probability) CHECK((probability > 0 && probability <= 1));
  CHECK(error_of([&] { predict(run, "1 2 x"); }).find("unknown symbol") != std::string::npos);
  CHECK(error_of([&] { predict(run, std::string(40, '1')); }).find("longer than this model's model.max_len 16") !=
        std::string::npos);
  CHECK(error_of([&] { load_run(dir.sub("nothing")); }).find("no such run directory") != std::string::npos);
}

TEST_CASE("trainer: step records carry the batch composition, which the length regime shapes") {
  TempDir dir;
  RunConfig config = tiny_config();
  config.train.steps = 6;
  config.train.eval_every = 0;
  for (const char* regime : {"mixed", "single", "bucketed"}) {
    CAPTURE(regime);
    config.task.length_regime = data::parse_length_regime(regime);
    const std::string run = dir.sub(regime);
    train_in(config, run);
    int steps = 0;
    for (const json& r : read_metrics(RunPaths(run).metrics)) {
      if (r.contains("split")) continue;
      ++steps;
      const int64_t tokens = r.at("tokens"), sequences = r.at("sequences");
      const int64_t shortest = r.at("shortest"), longest = r.at("longest");
      CHECK(1 <= shortest);
      CHECK(shortest <= longest);
      CHECK(longest <= 8);
      CHECK(sequences * shortest <= tokens);
      CHECK(tokens <= sequences * longest);
      if (std::string(regime) == "mixed") CHECK(sequences == 16);
      if (std::string(regime) == "single") CHECK((shortest == 8 && sequences == 9));          // 16 x 4.5 = 72 tokens
      if (std::string(regime) == "bucketed") CHECK((shortest - 1) / 4 == (longest - 1) / 4);  // one bucket of 4
      const StepRecord back = step_record_from_json(r, "metrics.jsonl");
      CHECK(back.tokens == tokens);
      CHECK(back.longest == longest);
    }
    CHECK(steps == 6);
  }
  // Batches of generated data only: a training file is read in shuffled batches of sequences.
  config.task.length_regime = data::LengthRegime::bucketed;
  config.task.train_file = std::string(NORMLAB_SOURCE_DIR) + "/configs/reverse.json";
  CHECK_THROWS_WITH_AS(check_config(config, "c.json"), doctest::Contains("c.json: task.length_regime: \"bucketed\""),
                       InputError);
}

TEST_CASE("trainer: a step's metrics.jsonl line is record_line(to_json(record)) byte for byte") {
  using normlab::train::StepRecord;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  StepRecord plain;
  plain.step = 7;
  plain.loss = 1.25;
  plain.accuracy = 0.5;
  plain.lr = 3e-4;
  plain.grad_norm = 0.1 + 0.2;
  plain.tokens = 144;
  plain.sequences = 32;
  plain.shortest = 1;
  plain.longest = 8;
  plain.tokens_per_s = 81234.56789;
  StepRecord full = plain;  // every optional field, non-finite values among them
  full.step = 50;
  full.residual_rms = {1.0, nan, 2.5e-12};
  full.layer_grad_norms = {0.5, inf, 1e300};
  full.attention_max_logit = {3.0, -inf};
  full.attention_entropy_mean = {0.69314718055994529, 1.0 / 3.0};
  full.attention_entropy_min = {0.0, 1e-7};
  full.update_ratio = {1e-3, nan};
  full.log_z_mean = 2.0;
  full.log_z_max_abs = nan;
  full.z_loss = 4e-4;
  StepRecord diverged = plain;
  diverged.loss = nan;
  diverged.grad_norm = nan;
  diverged.diverged = true;
  for (const StepRecord& record : {plain, full, diverged}) {
    const std::string line = normlab::train::step_record_line(record);
    CAPTURE(line);
    CHECK(line == normlab::train::record_line(normlab::train::to_json(record)));
  }
  CHECK(normlab::train::step_record_line(plain) ==
        R"({"step":7,"accuracy":0.5,"grad_norm":0.30000000000000004,"longest":8,"loss":1.25,"lr":0.0003,)"
        R"("sequences":32,"shortest":1,"tokens":144,"tokens_per_s":81234.56789})");
}
