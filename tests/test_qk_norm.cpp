// qk-norm (model.qk_norm) and z-loss (optim.z_loss): parity with PyTorch (golden files from
// scripts/golden/qk_norm.py), finite-difference gradients, and qk-norm's place in the model.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>

#include "normlab/error.hpp"
#include "encoder_gradcheck.hpp"
#include "normlab/gradcheck.hpp"
#include "normlab/io/npy.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/ops.hpp"
#include "normlab/rng.hpp"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

// Ours may land at most this many times PyTorch's own float32-vs-float64 gap away from PyTorch's
// float32 values (plus one float32 rounding of the largest value), as in test_encoder.cpp.
constexpr double kGoldenNoiseMultiple = 8.0;

std::pair<double, double> golden_error(const nlohmann::json& meta, const std::string& key,
                                       const std::vector<float>& got, const std::vector<float>& expected) {
  REQUIRE(got.size() == expected.size());
  double max_diff = 0.0;
  for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, double(std::abs(got[i] - expected[i])));
  const double noise = meta["max_abs_diff_f32_vs_f64"][key].get<double>();
  const double scale = meta["max_abs_f64"][key].get<double>();
  return {max_diff, kGoldenNoiseMultiple * noise + 0x1p-24 * scale};
}

nn::QkNorm qk_norm_named(const std::string& name) {
  for (const auto& [value, text] : nn::kQkNormNames)
    if (name == text) return value;
  FAIL("unknown qk_norm " << name);
  return nn::QkNorm::none;
}

Tensor param(const Shape& shape, uint64_t seed, float scale = 1.0f, float shift = 0.0f) {
  Rng rng(seed);
  Tensor t = Tensor::normal(shape, rng, shift, scale);
  t.set_requires_grad();
  return t;
}

}  // namespace

TEST_CASE("qk-norm: one encoder stack matches PyTorch's outputs and every gradient (golden files)") {
  const fs::path root = fs::path(NORMLAB_TEST_DATA_DIR) / "qk_norm";
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory() || entry.path().filename() == "z_loss") continue;
    const fs::path dir = entry.path();
    CAPTURE(dir.filename().string());
    const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
    nn::EncoderOptions opts;
    opts.d_model = meta["d_model"];
    opts.num_heads = meta["nhead"];
    opts.num_layers = meta["num_layers"];
    opts.dim_feedforward = meta["dim_feedforward"];
    opts.norm = nn::NormKind(meta["norm"].get<std::string>());
    opts.placement = meta["placement"] == "post" ? nn::Placement::post : nn::Placement::pre;
    opts.final_norm = false;
    opts.norm_eps = meta["norm_eps"];
    opts.qk_norm = qk_norm_named(meta["qk_norm"]);
    nn::TransformerEncoder encoder(opts, 1);
    auto params = encoder.named_parameters();
    // The same names, in the same order, as the PyTorch module's state_dict.
    std::vector<std::string> names;
    for (auto& [name, tensor] : params) names.push_back(name);
    CHECK(names == meta["parameters"].get<std::vector<std::string>>());
    for (auto& [name, tensor] : params) {
      io::NpyArray value = io::read_npy((dir / (name + ".npy")).string());
      REQUIRE(value.shape == tensor.shape());
      std::copy(value.data.begin(), value.data.end(), tensor.data());
    }
    std::vector<int64_t> offsets{0};
    for (int64_t length : meta["lengths"].get<std::vector<int64_t>>()) offsets.push_back(offsets.back() + length);
    const int64_t T = offsets.back(), d = opts.d_model;
    Tensor x = Tensor::from_data({T, d}, io::read_npy((dir / "x.npy").string()).data);
    x.set_requires_grad();
    Tensor out = encoder.forward(x, offsets);
    out.backward(Tensor::from_data({T, d}, io::read_npy((dir / "dout.npy").string()).data));
    auto check = [&](const std::string& key, const std::vector<float>& got) {
      CAPTURE(key);
      const auto [error, tolerance] = golden_error(meta, key, got, io::read_npy((dir / (key + ".npy")).string()).data);
      CAPTURE(error);
      CHECK(error <= tolerance);
    };
    check("out", out.to_vector());
    check("grad.x", x.grad().to_vector());
    for (auto& [name, tensor] : params) check("grad." + name, tensor.grad().to_vector());
    ++cases;
  }
  CHECK(cases == 4);
}

TEST_CASE("z-loss: value and gradient match PyTorch's logsumexp(logits)^2 over rows with a target (golden file)") {
  const fs::path dir = fs::path(NORMLAB_TEST_DATA_DIR) / "qk_norm" / "z_loss";
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
  std::vector<int64_t> shape;
  io::NpyArray logits_file = io::read_npy((dir / "logits.npy").string());
  std::vector<int32_t> targets;
  for (int64_t t : io::read_npy_int((dir / "targets.npy").string(), &shape)) targets.push_back(int32_t(t));
  Tensor logits = Tensor::from_data(logits_file.shape, logits_file.data);
  logits.set_requires_grad();
  Tensor z = ops::z_loss(logits, targets);
  const double expected = meta["z_loss"].get<double>();
  CHECK(std::abs(double(z.item()) - expected) <=
        8.0 * meta["max_abs_diff_f32_vs_f64"]["z_loss"].get<double>() + 0x1p-23 * std::abs(expected));
  z.backward();
  const auto [error, tolerance] = golden_error(meta, "grad.logits", logits.grad().to_vector(),
                                               io::read_npy((dir / "grad.logits.npy").string()).data);
  CHECK(error <= tolerance);
  // Ignored rows get no gradient at all.
  for (int64_t v = 0; v < logits.size(1); ++v) CHECK(logits.grad().to_vector()[size_t(2 * logits.size(1) + v)] == 0.0f);
}

TEST_CASE("z-loss: a hand-computed value - log Z of [0, 0] is log 2, of [100, 100] is 100 + log 2, all ignored is 0") {
  Tensor logits = Tensor::from_data({3, 2}, {0.0f, 0.0f, 100.0f, 100.0f, 5.0f, -5.0f});
  const double ln2 = std::log(2.0);
  const double expected = (ln2 * ln2 + (100.0 + ln2) * (100.0 + ln2)) / 2.0;  // row 2 ignored
  CHECK(double(ops::z_loss(logits, {0, 1, -1}).item()) == doctest::Approx(expected).epsilon(1e-6));
  CHECK(ops::z_loss(logits, {-1, -1, -1}).item() == 0.0f);
}

TEST_CASE("gradcheck: narrow_columns, cat_columns and z_loss") {
  using Inputs = std::vector<Tensor>;
  auto check = [](const std::function<Tensor(const Inputs&)>& f, Inputs inputs) {
    GradcheckResult r = gradcheck(f, std::move(inputs));
    INFO(r.worst);
    CHECK(r.checked > 0);
    CHECK(r.ok);
  };
  Tensor a = param({4, 9}, 1);
  check([](const Inputs& in) { return ops::narrow_columns(in[0], 3, 4); }, {a});
  check([](const Inputs& in) { return ops::cat_columns({in[0], in[1], in[0]}); }, {param({3, 2}, 2), param({3, 5}, 3)});
  check([](const Inputs& in) { return ops::z_loss(in[0], {1, -1, 0, 4, 2}); }, {param({5, 6}, 4, 2.0f, 1.0f)});
  // Through the whole qkv split: narrow three thirds and put them back.
  check(
      [](const Inputs& in) {
        return ops::cat_columns(
            {ops::narrow_columns(in[0], 0, 3), ops::narrow_columns(in[0], 3, 3), ops::narrow_columns(in[0], 6, 3)});
      },
      {a});
  CHECK_THROWS_AS(ops::narrow_columns(a, 7, 3), UsageError);
  CHECK_THROWS_AS(ops::cat_columns({a, param({3, 2}, 5)}), UsageError);
}

TEST_CASE("qk-norm: whole-block gradcheck for each qk_norm, each placement and with no normalization elsewhere") {
  for (nn::QkNorm qk_norm : {nn::QkNorm::layernorm, nn::QkNorm::rmsnorm}) {
    for (nn::NormKind kind : {nn::NormKind("layernorm"), nn::NormKind("none")}) {
      for (nn::Placement placement : {nn::Placement::post, nn::Placement::pre}) {
        CAPTURE(nn::to_string(qk_norm));
        CAPTURE(kind.name());
        CAPTURE(nn::to_string(placement));
        nn::EncoderOptions opts;
        opts.d_model = 8;
        opts.num_heads = 2;
        opts.num_layers = 1;
        opts.dim_feedforward = 12;
        opts.norm = kind;
        opts.placement = placement;
        opts.norm_eps = 1e-5f;
        opts.qk_norm = qk_norm;
        opts.activation = nn::Activation::gelu;  // smooth: no ReLU kink inside the finite-difference step
        auto encoder = std::make_shared<nn::TransformerEncoder>(opts, 21);
        std::vector<Tensor> inputs{param({7, 8}, 8)};
        for (auto& [name, t] : encoder->named_parameters()) {
          if (name.find("_norm.") != std::string::npos) {  // gammas and betas away from 1 and 0
            Rng rng(name.size());
            for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] += 0.2f * rng.normal();
          }
          inputs.push_back(t);
        }
        normlab::test::check_encoder_gradients(encoder, inputs);
      }
    }
  }
}

TEST_CASE("qk-norm: named like timm's Attention, (head_dim) each, drawing nothing from the initial weights' stream") {
  nn::EncoderOptions plain;
  plain.d_model = 16;
  plain.num_heads = 4;
  nn::EncoderOptions with = plain;
  with.qk_norm = nn::QkNorm::layernorm;
  nn::TransformerEncoder a(plain, 3), b(with, 3);
  std::map<std::string, Tensor> extra;
  for (auto& [name, t] : b.named_parameters()) extra[name] = t;
  for (auto& [name, t] : a.named_parameters()) {
    CAPTURE(name);
    REQUIRE(extra.count(name) == 1);
    CHECK(t.to_vector() == extra[name].to_vector());  // the other weights are the same draws
    extra.erase(name);
  }
  std::vector<std::string> names;
  for (auto& [name, t] : extra) {
    names.push_back(name);
    CHECK(t.shape() == Shape{4});
  }
  CHECK(names == std::vector<std::string>{"layers.0.self_attn.k_norm.bias", "layers.0.self_attn.k_norm.weight",
                                          "layers.0.self_attn.q_norm.bias", "layers.0.self_attn.q_norm.weight",
                                          "layers.1.self_attn.k_norm.bias", "layers.1.self_attn.k_norm.weight",
                                          "layers.1.self_attn.q_norm.bias", "layers.1.self_attn.q_norm.weight"});
  with.qk_norm = nn::QkNorm::rmsnorm;
  nn::TransformerEncoder c(with, 3);
  CHECK(c.named_parameters().size() == a.named_parameters().size() + 4);  // a weight each, no bias
}

TEST_CASE("qk-norm: every query and key the attention sees has zero mean and unit variance per head") {
  nn::EncoderOptions opts;
  opts.d_model = 8;
  opts.num_heads = 2;
  opts.num_layers = 1;
  opts.norm_eps = 1e-6f;
  opts.qk_norm = nn::QkNorm::layernorm;
  nn::TransformerEncoder encoder(opts, 5);
  nn::Diagnostics diag;
  Rng rng(4);
  encoder.forward(Tensor::normal({5, 8}, rng, 0.0f, 3.0f), {0, 2, 5}, &diag);
  REQUIRE(diag.attention_qkv.size() == 1);
  const Tensor& qkv = diag.attention_qkv[0];
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t head = 0; head < 4; ++head) {  // q heads 0, 1 and k heads 0, 1: columns 4 head .. 4 head + 3
      double mean = 0.0, sq = 0.0;
      for (int64_t c = 0; c < 4; ++c) mean += qkv.data()[t * 24 + head * 4 + c] / 4.0;
      for (int64_t c = 0; c < 4; ++c) sq += std::pow(qkv.data()[t * 24 + head * 4 + c] - mean, 2) / 4.0;
      CHECK(std::abs(mean) < 1e-6);
      CHECK(sq == doctest::Approx(1.0).epsilon(1e-4));
    }
}
