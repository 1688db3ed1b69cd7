// The encoder: parity with torch.nn.TransformerEncoder(Layer), packed-batch invariance (and its
// failure for BatchNorm), whole-block gradcheck.
#include <doctest/doctest.h>

#include "support.hpp"
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "normlab/autograd.hpp"
#include "encoder_gradcheck.hpp"
#include "normlab/gradcheck.hpp"
#include "normlab/io/npy.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/ops.hpp"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

// Rows of a padded (B, Tmax, d) array that belong to real tokens, packed into (T, d).
std::vector<float> pack(const io::NpyArray& padded, const std::vector<int64_t>& lengths) {
  const int64_t tmax = padded.shape[1], d = padded.shape[2];
  std::vector<float> packed;
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t t = 0; t < lengths[b]; ++t) {
      const float* row = padded.data.data() + (int64_t(b) * tmax + t) * d;
      packed.insert(packed.end(), row, row + d);
    }
  return packed;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets{0};
  for (int64_t len : lengths) offsets.push_back(offsets.back() + len);
  return offsets;
}

}  // namespace

// Tolerances come from the files: PyTorch's own float32 run lands max_abs_diff_f32_vs_f64[key] away
// from the float64 truth, and ours may land at most kGoldenNoiseMultiple times that far from
// PyTorch's float32 (plus one float32 rounding of the largest value). That is ~1e-7 of the values
// here, where the old fixed 1e-3 let a wrong GELU derivative (off by 9e-4) pass.
constexpr double kGoldenNoiseMultiple = 8.0;
constexpr int kEncoderGoldenCases = 14;  // 10 LayerNorm variants + 4 small-variance cases

namespace {

nn::EncoderOptions golden_options(const nlohmann::json& meta) {
  nn::EncoderOptions opts;
  opts.d_model = meta["d_model"];
  opts.num_heads = meta["nhead"];
  opts.dim_feedforward = meta["dim_feedforward"];
  opts.num_layers = meta["num_layers"];
  opts.activation = meta["activation"] == "gelu" ? nn::Activation::gelu : nn::Activation::relu;
  opts.placement = meta["norm_first"].get<bool>() ? nn::Placement::pre : nn::Placement::post;
  opts.norm_eps = meta["layer_norm_eps"];
  opts.final_norm = meta["final_norm"];
  opts.norm = nn::NormKind("layernorm");
  return opts;
}

struct GoldenRun {
  std::vector<float> out, grad_x;
  std::vector<std::pair<std::string, std::vector<float>>> param_grads;
};

// Loads the case's parameters into an encoder built with `opts` and runs forward + backward.
GoldenRun run_golden(const fs::path& dir, const nlohmann::json& meta, const nn::EncoderOptions& opts) {
  nn::TransformerEncoder encoder(opts, 1);
  // Load every parameter by its PyTorch state_dict name: names and shapes must line up exactly.
  auto params = encoder.named_parameters();
  CHECK(params.size() == meta["parameters"].size());
  for (auto& [name, tensor] : params) {
    CAPTURE(name);
    io::NpyArray value = io::read_npy((dir / (name + ".npy")).string());
    REQUIRE(value.shape == tensor.shape());
    std::copy(value.data.begin(), value.data.end(), tensor.data());
  }
  const std::vector<int64_t> lengths = io::read_npy_int((dir / "lengths.npy").string());
  const std::vector<int64_t> offsets = offsets_of(lengths);
  io::NpyArray x_padded = io::read_npy((dir / "x.npy").string());
  const int64_t d = opts.d_model, T = offsets.back();
  Tensor x = Tensor::from_data({T, d}, pack(x_padded, lengths));
  x.set_requires_grad();
  Tensor out = encoder.forward(x, offsets);
  out.backward(Tensor::from_data({T, d}, pack(io::read_npy((dir / "dout.npy").string()), lengths)));
  GoldenRun run{out.to_vector(), x.grad().to_vector(), {}};
  for (auto& [name, tensor] : params) run.param_grads.emplace_back(name, tensor.grad().to_vector());
  return run;
}

// max |got - expected| and its allowance for reference `key` of the case.
std::pair<double, double> golden_error(const nlohmann::json& meta, const std::string& key,
                                       const std::vector<float>& got, const std::vector<float>& expected) {
  REQUIRE(got.size() == expected.size());
  double max_diff = 0.0;
  for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, double(std::abs(got[i] - expected[i])));
  const double noise = meta["max_abs_diff_f32_vs_f64"][key].get<double>();
  const double scale = meta["max_abs_f64"][key].get<double>();
  return {max_diff, kGoldenNoiseMultiple * noise + 0x1p-24 * scale};
}

}  // namespace

TEST_CASE("encoder: matches torch.nn.TransformerEncoder outputs and every gradient (golden files)") {
  const fs::path root = fs::path(NORMLAB_TEST_DATA_DIR) / "encoder";
  REQUIRE(fs::is_directory(root));
  int cases = 0, small_variance_cases = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    const fs::path dir = entry.path();
    CAPTURE(dir.filename().string());
    nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
    const nn::EncoderOptions opts = golden_options(meta);
    const GoldenRun run = run_golden(dir, meta, opts);
    const std::vector<int64_t> lengths = io::read_npy_int((dir / "lengths.npy").string());
    auto check = [&](const std::string& key, const std::vector<float>& got, const std::vector<float>& expected) {
      CAPTURE(key);
      const auto [error, tolerance] = golden_error(meta, key, got, expected);
      CAPTURE(error);
      CAPTURE(tolerance);
      CHECK(error <= tolerance);
      if (std::getenv("NORMLAB_SHOW_ERRORS"))
        MESSAGE(fmt::format("{} {}: error {:.2e}, tolerance {:.2e}", dir.filename().string(), key, error, tolerance));
    };
    const std::vector<float> expected_out = pack(io::read_npy((dir / "out.npy").string()), lengths);
    check("out", run.out, expected_out);
    check("grad.x", run.grad_x, pack(io::read_npy((dir / "grad.x.npy").string()), lengths));
    for (const auto& [name, grad] : run.param_grads)
      check("grad." + name, grad, io::read_npy((dir / ("grad." + name + ".npy")).string()).data);

    if (meta.value("small_variance", false)) {
      // The other eps must miss the reference by far more than the tolerance: the test can see eps.
      nn::EncoderOptions other = opts;
      other.norm_eps = opts.norm_eps > 1e-8f ? 1e-12f : 1e-5f;
      const GoldenRun wrong = run_golden(dir, meta, other);
      const auto [error, tolerance] = golden_error(meta, "out", wrong.out, expected_out);
      CAPTURE(error);
      CAPTURE(tolerance);
      CHECK(error > 1000.0 * tolerance);
      CHECK(error > 0.05);
      ++small_variance_cases;
    }
    ++cases;
  }
  CHECK(cases == kEncoderGoldenCases);
  CHECK(small_variance_cases == 4);
}

namespace {
// A sequence's outputs and input gradients, computed inside a batch with its neighbours.
struct SeqResult {
  std::vector<float> out, grad;
};

// dropout: the step and the global index of the batch's first sequence (dropout masks are keyed on
// them), for a training forward with opts.dropout > 0.
SeqResult run_in_batch(nn::TransformerEncoder& encoder, const std::vector<std::vector<float>>& seqs, size_t which,
                       int64_t d, const std::vector<float>& weights, const nn::DropoutStep& dropout = {}) {
  std::vector<float> packed;
  std::vector<int64_t> offsets{0};
  for (const auto& s : seqs) {
    packed.insert(packed.end(), s.begin(), s.end());
    offsets.push_back(offsets.back() + int64_t(s.size()) / d);
  }
  Tensor x = Tensor::from_data({offsets.back(), d}, packed);
  x.set_requires_grad();
  Tensor out = encoder.forward(x, offsets, nullptr, dropout);
  // Loss touches only sequence `which`, weighted by fixed random numbers.
  std::vector<float> g(size_t(out.numel()), 0.0f);
  std::copy(weights.begin(), weights.end(), g.begin() + offsets[which] * d);
  out.backward(Tensor::from_data(out.shape(), g));
  SeqResult r;
  const std::vector<float> all = out.to_vector(), all_grad = x.grad().to_vector();
  r.out.assign(all.begin() + offsets[which] * d, all.begin() + offsets[which + 1] * d);
  r.grad.assign(all_grad.begin() + offsets[which] * d, all_grad.begin() + offsets[which + 1] * d);
  return r;
}

// The batch-mates tests' data, (len, d) sequences drawn from rng: a target of 6 tokens, a batch
// of four with the target second, and the loss weights of the target's 6 x d outputs.
struct BatchMates {
  std::vector<float> target;
  std::vector<std::vector<float>> batch;
  std::vector<float> weights;
};
BatchMates batch_mates(int64_t d, Rng& rng) {
  auto random_seq = [&](int64_t len) { return Tensor::normal({len, d}, rng).to_vector(); };
  BatchMates m;
  m.target = random_seq(6);
  m.batch = {random_seq(11), m.target, random_seq(2), random_seq(17)};
  m.weights = Tensor::normal({6, d}, rng).to_vector();
  return m;
}

// Their encoder: 4 heads, 2 layers, feed-forward 32.
nn::EncoderOptions batch_mates_options(int64_t d, nn::NormKind norm, nn::Placement placement,
                                       nn::ResidualKind residual = "plain") {
  nn::EncoderOptions opts;
  opts.d_model = d;
  opts.num_heads = 4;
  opts.num_layers = 2;
  opts.dim_feedforward = 32;
  opts.norm = norm;
  opts.placement = placement;
  opts.residual = residual;
  return opts;
}

// Every norm with the plain sum, and each other residual scheme once: (norm, residual scheme).
const std::vector<std::pair<nn::NormKind, nn::ResidualKind>>& block_kinds() {
  static const std::vector<std::pair<nn::NormKind, nn::ResidualKind>> kinds =
      {{"layernorm", "plain"}, {"rmsnorm", "plain"},   {"dyt", "plain"},           {"none", "rezero"},
       {"none", "plain"},      {"batchnorm", "plain"}, {"layernorm", "layerscale"}};
  return kinds;
}
}  // namespace

TEST_CASE("encoder: a sequence's result does not depend on its batch-mates, except with BatchNorm") {
  const int64_t d = 16;
  Rng rng(3);
  const auto [target, batch, weights] = batch_mates(d, rng);

  for (const auto& [kind, residual] : block_kinds()) {
    for (nn::Placement placement : {nn::Placement::post, nn::Placement::pre}) {
      CAPTURE(nn::to_string(kind));
      CAPTURE(residual.name());
      CAPTURE(int(placement));
      nn::TransformerEncoder encoder(batch_mates_options(d, kind, placement, residual), 11);
      if (residual == nn::ResidualKind("rezero"))  // alpha = 0 would make every block the identity
        for (auto& [name, t] : encoder.named_parameters())
          if (name.ends_with("resweight")) t.data()[0] = 0.5f;
      SeqResult alone = run_in_batch(encoder, {target}, 0, d, weights);
      SeqResult batched = run_in_batch(encoder, batch, 1, d, weights);
      const double out_diff = normlab::test::relative_max_error(batched.out, alone.out, 1e-12);
      const double grad_diff = normlab::test::relative_max_error(batched.grad, alone.grad, 1e-12);
      if (kind == nn::NormKind("batchnorm")) {
        // Batch statistics mix the sequences: the same tokens get different outputs.
        CHECK(out_diff > 1e-2);
        CHECK(grad_diff > 1e-2);
      } else {
        CHECK(out_diff < 1e-5);
        CHECK(grad_diff < 1e-5);
      }
    }
  }
}

TEST_CASE("encoder: BatchNorm in eval mode uses running statistics, so batch-mates stop mattering") {
  const int64_t d = 8;
  nn::EncoderOptions opts;
  opts.d_model = d;
  opts.num_heads = 2;
  opts.num_layers = 1;
  opts.dim_feedforward = 16;
  opts.norm = nn::NormKind("batchnorm");
  opts.placement = nn::Placement::post;
  nn::TransformerEncoder encoder(opts, 5);
  Rng rng(4);
  Tensor a = Tensor::normal({5, d}, rng), b = Tensor::normal({9, d}, rng);
  encoder.forward(a, {0, 5});  // one training step's worth of running-average update
  encoder.eval();
  NoGradGuard no_grad;
  std::vector<float> alone = encoder.forward(a, {0, 5}).to_vector();
  std::vector<float> both_data = a.to_vector();
  std::vector<float> bv = b.to_vector();
  both_data.insert(both_data.end(), bv.begin(), bv.end());
  std::vector<float> both = encoder.forward(Tensor::from_data({14, d}, both_data), {0, 5, 14}).to_vector();
  both.resize(alone.size());
  CHECK(normlab::test::relative_max_error(both, alone, 1e-12) < 1e-6);
}

TEST_CASE("encoder: whole-block gradcheck for every norm kind, residual scheme and placement") {
  const int64_t d = 8;
  for (const auto& [kind, residual] : block_kinds()) {
    for (nn::Placement placement : {nn::Placement::post, nn::Placement::pre}) {
      CAPTURE(nn::to_string(kind));
      CAPTURE(residual.name());
      CAPTURE(int(placement));
      nn::EncoderOptions opts;
      opts.d_model = d;
      opts.num_heads = 2;
      opts.num_layers = 1;
      opts.dim_feedforward = 12;
      opts.norm = kind;
      opts.placement = placement;
      opts.residual = residual;
      opts.activation = nn::Activation::gelu;
      opts.norm_eps = 1e-5f;
      auto encoder = std::make_shared<nn::TransformerEncoder>(opts, 21);
      std::vector<Tensor> inputs;
      Rng rng(8);
      Tensor x = Tensor::normal({7, d}, rng);
      x.set_requires_grad();
      inputs.push_back(x);
      for (auto& [name, t] : encoder->named_parameters()) {
        if (name.ends_with("resweight")) t.data()[0] = 0.5f;
        inputs.push_back(t);
      }
      normlab::test::check_encoder_gradients(encoder, inputs);
    }
  }
}

TEST_CASE("encoder: parameter names follow PyTorch's state_dict - diagnostics have one entry per layer") {
  nn::ModelOptions opts;
  opts.encoder.num_layers = 3;
  opts.encoder.placement = nn::Placement::pre;
  opts.positional = nn::Positional::learned;
  nn::EncoderModel model(opts);
  std::vector<std::string> names;
  for (auto& [name, t] : model.named_parameters()) names.push_back(name);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("layers.0.self_attn.in_proj_weight"));
  CHECK(has("layers.0.self_attn.in_proj_bias"));
  CHECK(has("layers.2.self_attn.out_proj.weight"));
  CHECK(has("layers.1.linear1.weight"));
  CHECK(has("layers.1.linear2.bias"));
  CHECK(has("layers.0.norm1.weight"));
  CHECK(has("layers.0.norm2.bias"));
  CHECK(has("norm.weight"));
  CHECK(has("embedding.weight"));
  CHECK(has("pos_embedding.weight"));
  CHECK(has("head.weight"));
  for (auto& [name, t] : model.named_parameters())
    if (name.ends_with("norm1.weight")) CHECK(t.to_vector() == std::vector<float>(64, 1.0f));  // gamma = 1

  nn::Diagnostics diag;
  Tensor logits = model.forward({1, 2, 3, 4, 5}, {0, 2, 5}, &diag);
  CHECK(logits.shape() == Shape{5, opts.num_classes});
  CHECK(diag.residual_rms.size() == 3);
  ops::cross_entropy(logits, {1, 2, 3, -1, 0}).backward();
  std::vector<double> norms = nn::per_layer_grad_norms(model, 3);
  REQUIRE(norms.size() == 3);
  for (double n : norms) CHECK(n > 0.0);
}

TEST_CASE(
    "encoder with dropout: in a training forward a sequence's output does not depend on its batch-mates - eval is the "
    "identity") {
  const int64_t d = 16;
  Rng rng(5);
  const auto [target, batch, weights] = batch_mates(d, rng);
  // The target among other batch-mates, second again.
  const std::vector<std::vector<float>> other_batch{Tensor::normal({3, d}, rng).to_vector(), target,
                                                    Tensor::normal({9, d}, rng).to_vector()};

  for (nn::Placement placement : {nn::Placement::post, nn::Placement::pre}) {
    CAPTURE(int(placement));
    nn::EncoderOptions opts = batch_mates_options(d, nn::NormKind("layernorm"), placement);
    opts.dropout = 0.3f;
    nn::TransformerEncoder encoder(opts, 11);
    // The target is sequence 1 of the global batch in each case.
    const SeqResult batched = run_in_batch(encoder, batch, 1, d, weights, {7, 0});
    const SeqResult mates = run_in_batch(encoder, other_batch, 1, d, weights, {7, 0});
    const SeqResult alone = run_in_batch(encoder, {target}, 0, d, weights, {7, 1});
    CHECK(normlab::test::relative_max_error(batched.out, alone.out, 1e-12) < 1e-5);
    CHECK(normlab::test::relative_max_error(batched.grad, alone.grad, 1e-12) < 1e-5);
    CHECK(normlab::test::relative_max_error(mates.out, alone.out, 1e-12) < 1e-5);
    CHECK(normlab::test::relative_max_error(mates.grad, alone.grad, 1e-12) < 1e-5);
    // Another global index or another step: other masks, another output.
    CHECK(normlab::test::relative_max_error(run_in_batch(encoder, {target}, 0, d, weights, {7, 0}).out, alone.out,
                                            1e-12) > 1e-2);
    CHECK(normlab::test::relative_max_error(run_in_batch(encoder, {target}, 0, d, weights, {8, 1}).out, alone.out,
                                            1e-12) > 1e-2);

    // Eval mode: no dropout, the same output as the same weights with dropout = 0.
    opts.dropout = 0.0f;
    nn::TransformerEncoder no_dropout(opts, 11);
    encoder.eval();
    CHECK(run_in_batch(encoder, batch, 1, d, weights, {7, 0}).out ==
          run_in_batch(no_dropout, batch, 1, d, weights, {7, 0}).out);
  }
}
