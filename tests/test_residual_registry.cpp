// Every entry of the residual registry (nn/residual_registry.hpp) done right: the test a new residual scheme
// must pass (docs/tour.md, "Add your own residual scheme"). For each scheme: the sum against its
// formula on known numbers, its gradient against finite differences at both sublayers, the names
// the PyTorch loader builds against the scheme's tensors, the config round trip, its compare-grid
// names and `normlab help norms --json`. Then LayerScale's own facts: lambda starts at 0.1 in every
// feature, each sublayer has its own, and x + diag(lambda) * f on numbers worked out by hand.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "normlab/error.hpp"
#include "normlab/gradcheck.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/nn/residual_registry.hpp"
#include "normlab/nn/variants.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/rng.hpp"
#include "normlab/train/config.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::Cli;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

constexpr int64_t kTokens = 5, kDim = 4;

// A scheme with its tensors moved off their init (0 for ReZero would hide an ignored f).
std::unique_ptr<nn::ResidualScheme> perturbed_scheme(const nn::ResidualSpec& spec, Rng& rng) {
  std::unique_ptr<nn::ResidualScheme> scheme = spec.make(kDim);
  for (auto& [name, p] : scheme->named_parameters()) {
    const Tensor noise = Tensor::normal(p.shape(), rng);
    for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] += 0.5f + 0.2f * noise.data()[i];
  }
  return scheme;
}

// The scheme's sum x + scale_k * f in double from its own tensors: no tensor is a scale of 1, one
// tensor serves both sublayers (ReZero's alpha), two are one per sublayer (LayerScale's lambda_k);
// a tensor of one element is a scalar, else one value per feature. The PyTorch sum names it too.
std::vector<double> expected_sum(const nn::ResidualEntry& entry, const nn::ResidualScheme& scheme, const Tensor& x,
                                 const Tensor& f, int sublayer) {
  const nn::NamedTensors params = scheme.named_parameters();
  REQUIRE(params.size() <= 2);
  const Tensor* scale = nullptr;
  if (!params.empty()) {
    const auto& [name, tensor] = params[params.size() == 1 ? 0 : size_t(sublayer)];
    scale = &tensor;
    CHECK(entry.torch.sums[size_t(sublayer)].find(name) != std::string::npos);
  }
  std::vector<double> y(size_t(x.numel()));
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t c = 0; c < kDim; ++c) {
      const double s = scale == nullptr ? 1.0 : double(scale->data()[scale->numel() == 1 ? 0 : c]);
      y[size_t(t * kDim + c)] = double(x.data()[t * kDim + c]) + s * double(f.data()[t * kDim + c]);
    }
  return y;
}

}  // namespace

TEST_CASE("residual registry: names are unique and every entry is complete") {
  std::set<std::string> names;
  for (const nn::ResidualEntry& entry : nn::residual_registry()) {
    const nn::ResidualSpec& spec = entry.spec;
    CAPTURE(spec.name);
    CHECK(names.insert(spec.name).second);
    CHECK(nn::find_norm(spec.name) == nullptr);  // the two axes never share a name
    CHECK(!spec.description.empty());
    CHECK(!spec.formula.empty());
    CHECK(spec.sum.find("{}") != std::string::npos);
    REQUIRE(bool(spec.make));
    CHECK(entry.torch.sums.size() == 2);
    CHECK(nn::find_residual(spec.name) == &entry);
    CHECK(nn::ResidualKind(spec.name).name() == spec.name);
  }
  CHECK(names.count("plain") == 1);
  CHECK_THROWS_WITH_AS(nn::ResidualKind("re_zero"),
                       "unknown residual scheme 're_zero' (choose plain, rezero, layerscale)", UsageError);
}

TEST_CASE("residual registry: every scheme's sum is x + scale * f, at both sublayers") {
  for (const nn::ResidualEntry& entry : nn::residual_registry()) {
    CAPTURE(entry.spec.name);
    Rng rng(51, 2);
    auto scheme = perturbed_scheme(entry.spec, rng);
    const Tensor x = Tensor::normal({kTokens, kDim}, rng), f = Tensor::normal({kTokens, kDim}, rng);
    for (int sublayer : {0, 1}) {
      CAPTURE(sublayer);
      const std::vector<float> got = scheme->add(x, f, sublayer).to_vector();
      const std::vector<double> want = expected_sum(entry, *scheme, x, f, sublayer);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("residual registry: every scheme's gradients match finite differences") {
  for (const nn::ResidualEntry& entry : nn::residual_registry()) {
    CAPTURE(entry.spec.name);
    Rng rng(53, 4);
    auto scheme = perturbed_scheme(entry.spec, rng);
    for (int sublayer : {0, 1}) {
      CAPTURE(sublayer);
      Tensor x = Tensor::normal({kTokens, kDim}, rng), f = Tensor::normal({kTokens, kDim}, rng);
      x.set_requires_grad();
      f.set_requires_grad();
      std::vector<Tensor> inputs{x, f};
      for (auto& [name, p] : scheme->named_parameters()) inputs.push_back(p);  // shares the scheme's storage
      const GradcheckResult result =
          gradcheck([&](const std::vector<Tensor>& in) { return scheme->add(in[0], in[1], sublayer); }, inputs);
      CHECK_MESSAGE(result.ok, result.worst);
      CHECK(result.checked >= 2 * kTokens * kDim);
    }
  }
}

TEST_CASE("residual registry: the PyTorch mapping names exactly the scheme's tensors, as the block's own") {
  for (const nn::ResidualEntry& entry : nn::residual_registry()) {
    CAPTURE(entry.spec.name);
    auto scheme = entry.spec.make(kDim);
    std::set<std::string> mapped, own;
    for (const nn::TorchTensor& t : entry.torch.tensors) {
      CHECK(!t.init.empty());
      CHECK(t.parameter);
      mapped.insert(t.name);
    }
    for (const auto& [name, t] : scheme->named_parameters()) own.insert(name);
    CHECK(mapped == own);
    CHECK(scheme->named_buffers().empty());
    // In a model they are the block's: layers.N.<name>, ahead of the sublayers' tensors.
    nn::EncoderOptions options;
    options.d_model = 8;
    options.num_heads = 2;
    options.num_layers = 2;
    options.dim_feedforward = 16;
    options.residual = entry.spec.name;
    nn::TransformerEncoder encoder(options, 3);
    const nn::NamedTensors params = encoder.named_parameters();
    size_t at = 0;
    for (const auto& [name, t] : entry.spec.make(8)->named_parameters()) {
      REQUIRE(at < params.size());
      CHECK(params[at].first == "layers.0." + name);
      CHECK(params[at].second.shape() == t.shape());
      ++at;
    }
    CHECK(params[at].first == "layers.0.self_attn.in_proj_weight");
  }
}

TEST_CASE("residual registry: model.residual takes every name, and model.norm \"rezero\" reads as two axes") {
  for (const std::string& name : nn::residual_names()) {
    CAPTURE(name);
    train::RunConfig config;
    train::apply_override(config, "model.residual=" + name);
    CHECK(config.model.residual.name() == name);
    const nlohmann::json written = train::to_json(config);
    CHECK(written["model"]["residual"] == name);
    const train::RunConfig back = train::config_from_json(written, "round trip", ".", false);
    CHECK(back == config);
  }
  train::RunConfig legacy;
  train::apply_override(legacy, "model.norm=rezero");
  CHECK(legacy.model.norm.name() == "none");
  CHECK(legacy.model.residual.name() == "rezero");
  CHECK(train::to_json(legacy)["model"]["norm"] == "none");
  CHECK(train::to_json(legacy)["model"]["residual"] == "rezero");
  train::RunConfig config;
  CHECK_THROWS_AS(train::apply_override(config, "model.residual=layer_scale"), InputError);
}

TEST_CASE("residual registry: every scheme's variant maps back to its norm, placement and scheme") {
  for (const nn::ResidualEntry& entry : nn::residual_registry()) {
    for (const nn::ResidualVariant& v : entry.variants) {
      CAPTURE(v.name);
      const nn::Variant* found = nn::find_variant(v.name);
      REQUIRE(found != nullptr);
      CHECK(found->residual == entry.spec.name);
      CHECK(nn::variant_of(v.norm, v.placement, entry.spec.name) == v.name);
      const std::string block = nn::block_formula(v.norm, v.placement, true, entry.spec.name);
      CHECK(block.find(fmt::format(fmt::runtime(entry.spec.sum), "f(")) != std::string::npos);
    }
  }
  // the names users typed before the schemes had their own key
  CHECK(nn::variant_of("rezero", "post") == "rezero");
  CHECK(nn::variant_of("none", "pre", "rezero") == "rezero");
  CHECK(nn::block_formula("rezero", "pre", true) ==
        "x = x + alpha * f(x) (ReZero, alpha = 0 at init; no normalization)");
  CHECK(nn::block_formula("layernorm", "pre", true, "layerscale") ==
        "x = x + lambda * f(LN(x)) (pre-norm, final LN after the stack; LayerScale, lambda = 0.1 at init)");
}

TEST_CASE("residual registry: normlab help norms --json lists every scheme with its PyTorch mapping") {
  TempDir dir("normlab_help_residuals");
  const Cli cli = run_normlab(dir, "help norms --json");
  REQUIRE(cli.code == 0);
  const nlohmann::json listed = nlohmann::json::parse(cli.out);
  std::vector<std::string> names;
  for (const nlohmann::json& scheme : listed.at("residuals")) {
    names.push_back(scheme.at("name"));
    const nn::ResidualEntry* entry = nn::find_residual(names.back());
    REQUIRE(entry != nullptr);
    CHECK(scheme.at("torch").at("sums") == entry->torch.sums);
    CHECK(scheme.at("torch").at("tensors").size() == entry->torch.tensors.size());
  }
  CHECK(names == nn::residual_names());
  const Cli text = run_normlab(dir, "help norms");
  for (const nn::ResidualEntry& entry : nn::residual_registry())
    CHECK(text.out.find(entry.spec.formula) != std::string::npos);
}

TEST_CASE("LayerScale: lambda is 0.1 in every feature at init, one per sublayer, never decayed") {
  const nn::ResidualEntry* entry = nn::find_residual("layerscale");
  REQUIRE(entry != nullptr);
  auto scheme = entry->spec.make(3);
  nn::NamedTensors params = scheme->named_parameters();  // handles on the scheme's own tensors
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "gamma_1");  // CaiT's names
  CHECK(params[1].first == "gamma_2");
  for (const auto& [name, gamma] : params) {
    REQUIRE(gamma.shape() == Shape{3});
    for (int64_t c = 0; c < 3; ++c) CHECK(gamma.data()[c] == 0.1f);
    CHECK(optim::no_decay_name("layers.0." + name, gamma));
  }
  // x + diag(lambda_k) * f by hand: x = [[1, 2, 3], [-1, 0, 4]], f = [[10, 20, 30], [5, -5, 1]],
  // lambda_1 = [0.5, 0.25, 2], lambda_2 = [1, -1, 0]
  const float lambda_1[] = {0.5f, 0.25f, 2.0f}, lambda_2[] = {1.0f, -1.0f, 0.0f};
  std::copy_n(lambda_1, 3, params[0].second.data());
  std::copy_n(lambda_2, 3, params[1].second.data());
  const Tensor x = Tensor::from_data({2, 3}, {1, 2, 3, -1, 0, 4});
  const Tensor f = Tensor::from_data({2, 3}, {10, 20, 30, 5, -5, 1});
  CHECK(scheme->add(x, f, 0).to_vector() == std::vector<float>{6, 7, 63, 1.5f, -1.25f, 6});
  CHECK(scheme->add(x, f, 1).to_vector() == std::vector<float>{11, -18, 3, 4, 5, 4});
}
