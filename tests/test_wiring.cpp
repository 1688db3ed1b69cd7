// The trainer's wiring, read back from what a real (tiny) `normlab train` run did, against formulas
// written here: the lr of every step in metrics.jsonl (optim.schedule, warmup_steps, min_lr_ratio),
// which tensors optim.weight_decay reached and by how much (docs/config.md: no decay on biases,
// norm parameters, embeddings), optim.clip_grad_norm's scaling, and the periodic validation in
// eval mode (dropout off, BatchNorm on its running statistics). The optimizer and schedule alone
// are tested in test_optim.cpp; these tests fail when the trainer does not pass a setting on.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "normlab/io/safetensors.hpp"
#include "normlab/nn/module.hpp"
#include "normlab/tensor.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/setup.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

json tiny_run(const std::string& norm = "layernorm") {
  return json{{"model",
               {{"d_model", 16},
                {"heads", 2},
                {"layers", 2},
                {"ffn", 24},
                {"max_len", 16},
                {"norm", norm},
                {"positional", "learned"},
                {"dropout", 0.0}}},
              {"task",
               {{"name", "reverse"},
                {"min_len", 1},
                {"max_len", 8},
                {"eval_max_len", 10},
                {"eval_examples", 24},
                {"bucket_width", 4}}},
              {"optim",
               {{"name", "sgd"},
                {"lr", 0.01},
                {"momentum", 0.0},
                {"weight_decay", 0.0},
                {"schedule", "constant"},
                {"warmup_steps", 0},
                {"clip_grad_norm", 0.0}}},
              {"train",
               {{"steps", 1},
                {"batch_size", 8},
                {"eval_every", 0},
                {"log_every", 1},
                {"diagnostics_every", 0},
                {"checkpoint_every", 0},
                {"threads", 1},
                {"seed", 3}}}};
}

// Trains `config` into dir/name; returns the run directory.
std::string train(const TempDir& dir, const std::string& name, const json& config) {
  const std::string path = dir.write(name + ".json", config.dump());
  const int code =
      run_normlab({"train", "--config", path, "--out", dir.sub(name)}, dir.sub(name + ".out"), dir.sub(name + ".err"));
  INFO(read_text(dir.sub(name + ".err")));
  REQUIRE(code == 0);
  return dir.sub(name);
}

std::vector<json> metrics_lines(const std::string& run) {
  std::vector<json> lines;
  std::istringstream in(read_text(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(json::parse(line));
  return lines;
}

// The model's tensors in a checkpoint (not the optimizer's), by name.
std::map<std::string, std::vector<float>> model_tensors(const std::string& run) {
  const normlab::io::SafetensorsFile file = normlab::io::read_safetensors(run + "/checkpoint.safetensors");
  std::map<std::string, std::vector<float>> out;
  for (const normlab::io::TensorRecord& record : file.tensors) {
    if (record.name.rfind("optim.", 0) == 0) continue;
    out[record.name] = file.floats(record.name, record.shape);
  }
  return out;
}

}  // namespace

TEST_CASE("wiring: the lr of every step in metrics.jsonl follows warmup_cosine with min_lr_ratio, and warmup") {
  TempDir dir("normlab_wiring");
  const double lr = 0.02, min_ratio = 0.25;
  const int64_t warmup = 3, steps = 12;
  json config = tiny_run();
  config["optim"]["lr"] = lr;
  config["optim"]["schedule"] = "warmup_cosine";
  config["optim"]["warmup_steps"] = warmup;
  config["optim"]["min_lr_ratio"] = min_ratio;
  config["train"]["steps"] = steps;
  const std::string cosine = train(dir, "cosine", config);
  config["optim"]["schedule"] = "warmup";
  const std::string flat = train(dir, "warmup", config);

  // Update s = 0, 1, ... (logged as step s + 1): (s + 1) / warmup during warmup, then cosine from 1
  // down to min_lr_ratio at train.steps (or 1 for "warmup").
  auto factor = [&](int64_t s, bool decays) {
    if (s < warmup) return double(s + 1) / double(warmup);
    if (!decays) return 1.0;
    const double progress = double(s - warmup) / double(steps - warmup);
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  };
  for (const auto& [run, decays] : {std::pair{cosine, true}, std::pair{flat, false}}) {
    int64_t seen = 0;
    for (const json& line : metrics_lines(run)) {
      if (line.contains("split")) continue;  // an evaluation record
      const int64_t step = line["step"].get<int64_t>();
      INFO(run << " step " << step);
      CHECK(line["lr"].get<double>() == doctest::Approx(lr * factor(step - 1, decays)).epsilon(1e-6));
      ++seen;
    }
    CHECK(seen == steps);
  }
}

TEST_CASE("wiring: weight decay reaches the weight matrices only, by lr * weight_decay * p (optim.decay_all: all)") {
  TempDir dir("normlab_wiring");
  const double lr = 0.01, wd = 0.5;
  json config = tiny_run();
  const auto plain = model_tensors(train(dir, "plain", config));
  config["optim"]["weight_decay"] = wd;
  const auto decayed = model_tensors(train(dir, "decayed", config));
  config["optim"]["decay_all"] = true;
  const auto all = model_tensors(train(dir, "all", config));
  REQUIRE(plain.size() == decayed.size());

  // docs/config.md: no decay on biases, norm parameters, embeddings (and scalars).
  auto should_decay = [](const std::string& name) {
    const bool weight_matrix = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
                               name.find("norm") == std::string::npos && name.find("embedding") == std::string::npos;
    return weight_matrix || name.find("in_proj_weight") != std::string::npos;
  };
  int decayed_tensors = 0, kept_tensors = 0;
  for (const auto& [name, a] : plain) {
    INFO(name);
    const std::vector<float>& b = decayed.at(name);
    const std::vector<float>& c = all.at(name);
    if (!should_decay(name)) {
      ++kept_tensors;
      CHECK(a == b);  // bit for bit: one SGD step, the same gradient, no decay term
    } else {
      ++decayed_tensors;
    }
    // SGD with L2: p1 = p0 - lr (g + wd p0), so plain - decayed = lr wd p0 ~ lr wd plain.
    for (const auto& [other, expect] : {std::pair{&b, should_decay(name)}, std::pair{&c, true}}) {
      if (!expect) continue;
      int checked = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::fabs(a[i]) < 1e-2) continue;  // too small for the difference to be resolved in float
        CHECK((double(a[i]) - double((*other)[i])) / (lr * wd * double(a[i])) == doctest::Approx(1.0).epsilon(2e-2));
        ++checked;
      }
      // Zero-initialized tensors (biases, beta) cannot show decay after one step; the rest must.
      if (name.find("bias") == std::string::npos) CHECK(checked > 0);
    }
  }
  CHECK(decayed_tensors == 2 * 4 + 1);  // per layer: in_proj, out_proj, linear1, linear2; the head
  CHECK(kept_tensors > 0);
}

TEST_CASE(
    "wiring: clip_grad_norm scales the whole gradient to the clip norm - the logged grad_norm is before clipping") {
  TempDir dir("normlab_wiring");
  json config = tiny_run();
  const auto once = model_tensors(train(dir, "once", config));  // p0 - lr g
  config["optim"]["lr"] = 0.02;
  const auto twice = model_tensors(train(dir, "twice", config));  // p0 - 2 lr g
  config["optim"]["lr"] = 0.01;
  const double clip = 0.05;
  config["optim"]["clip_grad_norm"] = clip;
  const std::string clipped_run = train(dir, "clipped", config);
  const auto clipped = model_tensors(clipped_run);  // p0 - lr g clip / |g|
  const double norm_once = metrics_lines(dir.sub("once"))[0]["grad_norm"].get<double>();
  const double norm_clipped = metrics_lines(clipped_run)[0]["grad_norm"].get<double>();
  CHECK(norm_clipped == norm_once);
  REQUIRE(norm_once > 4 * clip);
  // (once - clipped) / (once - twice) = (1 - clip / |g|) / -1 ... written as the scale itself:
  // once - clipped = lr g (clip/|g| - 1),  twice - once = -lr g  =>  ratio = 1 - clip/|g|.
  const double expected = 1.0 - clip / norm_once;
  int checked = 0;
  for (const auto& [name, a] : once) {
    for (size_t i = 0; i < a.size(); ++i) {
      const double step = double(a[i]) - double(twice.at(name)[i]);  // lr g
      if (std::fabs(step) < 1e-4) continue;
      INFO(name << "[" << i << "]");
      CHECK((double(clipped.at(name)[i]) - double(a[i])) / step == doctest::Approx(expected).epsilon(2e-2));
      ++checked;
    }
  }
  CHECK(checked > 20);
}

TEST_CASE("wiring: the trainer validates in eval mode - dropout off, BatchNorm on its running statistics") {
  TempDir dir("normlab_wiring");
  json config = tiny_run("batchnorm");
  config["model"]["dropout"] = 0.3;
  config["optim"]["name"] = "adamw";
  config["optim"]["lr"] = 0.003;
  config["train"]["steps"] = 20;
  config["train"]["eval_every"] = 10;
  const std::string run = train(dir, "run", config);
  double logged = -1.0;
  for (const json& line : metrics_lines(run))
    if (line.value("split", "") == "valid" && line["step"] == 20) logged = line["loss"].get<double>();
  REQUIRE(logged > 0.0);

  // The same loss from the checkpoint, each validation sequence run alone through the model in
  // eval mode (set here): in eval mode a sequence's logits do not depend on its batch-mates.
  normlab::train::LoadedRun loaded = normlab::train::load_run(run);
  loaded.model->eval();
  const normlab::data::Dataset valid = normlab::train::load_valid_set(loaded.config, loaded.task);
  REQUIRE(valid.size() > 0);
  double loss_sum = 0.0;
  int64_t targets = 0;
  for (int64_t i = 0; i < valid.size(); ++i) {
    const normlab::data::Example& example = valid[i];
    const std::vector<int64_t> offsets{0, int64_t(example.tokens.size())};
    const normlab::Tensor logits = loaded.model->forward(example.tokens, offsets);  // (len, V)
    const int64_t V = logits.size(1);
    for (size_t row = 0; row < example.targets.size(); ++row) {
      if (example.targets[row] < 0) continue;
      const float* z = logits.data() + int64_t(row) * V;
      double max = z[0], sum = 0.0;
      for (int64_t v = 1; v < V; ++v) max = std::max(max, double(z[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - max);
      loss_sum += max + std::log(sum) - double(z[example.targets[row]]);
      ++targets;
    }
  }
  CHECK(logged == doctest::Approx(loss_sum / double(targets)).epsilon(1e-5));
}

namespace {

// Every tensor of a checkpoint, the optimizer's included, by name.
std::map<std::string, std::vector<float>> all_tensors(const std::string& run) {
  const normlab::io::SafetensorsFile file = normlab::io::read_safetensors(run + "/checkpoint.safetensors");
  std::map<std::string, std::vector<float>> out;
  for (const normlab::io::TensorRecord& record : file.tensors)
    out[record.name] = file.floats(record.name, record.shape);
  return out;
}

}  // namespace

TEST_CASE("wiring: Adam's beta1, beta2 and eps and SGD's momentum, read back from one- and two-step runs") {
  TempDir dir("normlab_wiring");
  const double lr = 0.01, beta1 = 0.8, beta2 = 0.95;
  json config = tiny_run();
  config["optim"]["name"] = "adam";
  config["optim"]["lr"] = lr;
  config["optim"]["beta1"] = beta1;
  config["optim"]["beta2"] = beta2;
  config["optim"]["eps"] = 1e-8;
  const auto sharp = all_tensors(train(dir, "sharp", config));
  const double eps = 1e-3;
  config["optim"]["eps"] = eps;
  const auto soft = all_tensors(train(dir, "soft", config));
  // After one step: m = (1 - beta1) g, v = (1 - beta2) g^2, so m^2 / v = (1 - beta1)^2 / (1 - beta2)
  // whatever g is; and the step is lr g / (|g| + eps) (bias-corrected m and v are g and g^2).
  int checked = 0;
  for (const auto& [name, m] : sharp) {
    if (name.rfind("optim.exp_avg.", 0) != 0) continue;
    const std::string param = name.substr(std::string("optim.exp_avg.").size());
    const std::vector<float>& v = sharp.at("optim.exp_avg_sq." + param);
    for (size_t i = 0; i < m.size(); ++i) {
      const double g = double(m[i]) / (1.0 - beta1);
      if (std::fabs(g) < 1e-3) continue;
      INFO(param << "[" << i << "]");
      CHECK(double(m[i]) * double(m[i]) / double(v[i]) ==
            doctest::Approx((1 - beta1) * (1 - beta1) / (1 - beta2)).epsilon(1e-3));
      const double expected = lr * g * (1.0 / (std::fabs(g) + 1e-8) - 1.0 / (std::fabs(g) + eps));  // soft - sharp
      CHECK(double(soft.at(param)[i]) - double(sharp.at(param)[i]) ==
            doctest::Approx(expected).epsilon(2e-2).scale(1e-6));
      ++checked;
    }
  }
  CHECK(checked > 20);

  // SGD, dampening 0: buf1 = g1, and a second step with momentum mu moves the weights lr mu g1 further
  // than one without (the first step, and so the second gradient, is the same in both).
  const double mu = 0.9;
  json sgd = tiny_run();
  sgd["optim"]["momentum"] = mu;
  const auto one = all_tensors(train(dir, "one", sgd));
  sgd["train"]["steps"] = 2;
  const auto with = all_tensors(train(dir, "with", sgd));
  sgd["optim"]["momentum"] = 0.0;
  const auto without = all_tensors(train(dir, "without", sgd));
  checked = 0;
  for (const auto& [name, buffer] : one) {
    if (name.rfind("optim.momentum_buffer.", 0) != 0) continue;
    const std::string param = name.substr(std::string("optim.momentum_buffer.").size());
    for (size_t i = 0; i < buffer.size(); ++i) {
      if (std::fabs(buffer[i]) < 1e-2) continue;
      INFO(param << "[" << i << "]");
      CHECK(double(with.at(param)[i]) - double(without.at(param)[i]) ==
            doctest::Approx(-lr * mu * double(buffer[i])).epsilon(2e-2));
      ++checked;
    }
  }
  CHECK(checked > 20);
}
