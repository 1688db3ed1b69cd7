// Every entry of the norm registry (nn/norm_registry.hpp) done right: the test a new normalization
// must pass (docs/tour.md, "Add your own normalization"). For each entry with a layer: its forward
// against its plain reference forward, its gradient against finite differences, the names the
// PyTorch loader will build against the layer's state, the config round trip, the compare grid's
// variant names and `normlab help norms --json`. Then ScaleNorm's own property: y * ||x|| / g = x.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "normlab/error.hpp"
#include "normlab/gradcheck.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/nn/norm_registry.hpp"
#include "normlab/rng.hpp"
#include "normlab/study/report.hpp"
#include "normlab/train/config.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::Cli;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

constexpr int64_t kRows = 7, kDim = 6;

// Rows of very different scales and offsets (per-token statistics must not mix), (kRows, kDim).
Tensor registry_test_input(Rng& rng) {
  Tensor x = Tensor::normal({kRows, kDim}, rng);
  float* v = x.data();
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kDim; ++c) v[r * kDim + c] = v[r * kDim + c] * float(1 + 2 * r) + 0.3f * float(r % 3);
  return x;
}

// A new layer with its parameters moved off their init (gamma = 1, beta = 0 would hide a swapped
// or ignored argument).
std::unique_ptr<nn::NormLayer> perturbed_layer(const nn::NormSpec& spec, Rng& rng) {
  std::unique_ptr<nn::NormLayer> layer = spec.make(kDim, 1e-5f);
  for (auto& [name, p] : layer->named_parameters()) {
    const Tensor noise = Tensor::normal(p.shape(), rng);
    for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] += 0.2f * noise.data()[i];
  }
  return layer;
}

std::set<std::string> state_names(const nn::Module& layer, bool parameters) {
  std::set<std::string> names;
  for (const auto& [name, t] : parameters ? layer.named_parameters() : layer.named_buffers()) names.insert(name);
  return names;
}

}  // namespace

TEST_CASE("norm registry: names are unique and every entry is complete") {
  std::set<std::string> names, variants;
  for (const nn::NormEntry& entry : nn::norm_registry()) {
    const nn::NormSpec& spec = entry.spec;
    CAPTURE(spec.name);
    CHECK(names.insert(spec.name).second);
    CHECK(!spec.description.empty());
    CHECK(!spec.formula.empty());
    CHECK(!entry.variants.empty());
    for (const nn::NormVariant& v : entry.variants) CHECK(variants.insert(v.name).second);
    const bool has_layer = spec.name != "none";
    CHECK(bool(spec.make) == has_layer);
    CHECK(bool(spec.reference) == has_layer);
    CHECK(entry.torch.forward.empty() == !has_layer);
    CHECK(spec.symbol.empty() == !has_layer);
    CHECK(nn::find_norm(spec.name) == &entry);
    CHECK(nn::NormKind(spec.name).name() == spec.name);
  }
  CHECK(nn::find_norm("layer_norm") == nullptr);
  CHECK_THROWS_WITH_AS(
      nn::NormKind("layer_norm"),
      "unknown norm 'layer_norm' (choose layernorm, rmsnorm, batchnorm, powernorm, dyt, scalenorm, none)", UsageError);
}

TEST_CASE("norm registry: every layer's forward matches its reference forward") {
  for (const nn::NormEntry& entry : nn::norm_registry()) {
    const nn::NormSpec& spec = entry.spec;
    if (!spec.make) continue;
    CAPTURE(spec.name);
    Rng rng(41, 3);
    auto layer = perturbed_layer(spec, rng);
    const Tensor x = registry_test_input(rng);
    // The reference reads the running statistics before the training forward moves them.
    const std::vector<float> want = spec.reference(*layer, x.data(), kRows, kDim);
    const std::vector<float> got = layer->forward(x).to_vector();
    REQUIRE(got.size() == want.size());
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(double(got[i]) - double(want[i])) / std::max(1.0, std::abs(double(want[i]))));
    CHECK(worst <= 1e-5);
  }
}

TEST_CASE("norm registry: every layer's gradients match finite differences") {
  // Eval mode: PowerNorm's training backward is the paper's approximation, not the derivative, and
  // its training forward moves the statistic it divides by (test_ops_gradcheck covers training).
  for (const nn::NormEntry& entry : nn::norm_registry()) {
    const nn::NormSpec& spec = entry.spec;
    if (!spec.make) continue;
    CAPTURE(spec.name);
    Rng rng(43, 5);
    auto layer = perturbed_layer(spec, rng);
    layer->train(false);
    Tensor x = registry_test_input(rng);
    x.set_requires_grad();
    std::vector<Tensor> inputs{x};
    for (auto& [name, p] : layer->named_parameters()) inputs.push_back(p);  // shares the layer's storage
    const GradcheckResult result =
        gradcheck([&](const std::vector<Tensor>& in) { return layer->forward(in[0]); }, inputs);
    CHECK_MESSAGE(result.ok, result.worst);
    CHECK(result.checked > kRows * kDim);
  }
}

TEST_CASE("norm registry: the PyTorch mapping names exactly the layer's parameters and buffers") {
  for (const nn::NormEntry& entry : nn::norm_registry()) {
    const nn::NormSpec& spec = entry.spec;
    if (!spec.make) continue;
    CAPTURE(spec.name);
    auto layer = spec.make(kDim, 1e-5f);
    std::set<std::string> parameters, buffers;
    for (const nn::TorchTensor& t : entry.torch.tensors) {
      CHECK(!t.init.empty());
      (t.parameter ? parameters : buffers).insert(t.name);
      // the forward expression uses every parameter (buffers may serve only training's backward)
      if (t.parameter) CHECK(entry.torch.forward.find(t.name) != std::string::npos);
    }
    CHECK(parameters == state_names(*layer, true));
    CHECK(buffers == state_names(*layer, false));
  }
}

TEST_CASE("norm registry: model.norm takes every name and writes it back unchanged") {
  for (const std::string& name : nn::norm_names()) {
    CAPTURE(name);
    train::RunConfig config;
    train::apply_override(config, "model.norm=" + name);
    CHECK(config.model.norm.name() == name);
    const nlohmann::json written = train::to_json(config);
    CHECK(written["model"]["norm"] == name);
    const train::RunConfig back = train::config_from_json(written, "round trip", ".", false);
    CHECK(back == config);
    CHECK(train::to_json(back).dump() == written.dump());
  }
}

TEST_CASE("norm registry: every variant is a compare-grid name that maps back to its norm and placement") {
  for (const nn::NormEntry& entry : nn::norm_registry()) {
    const nn::NormSpec& spec = entry.spec;
    for (const nn::NormVariant& v : entry.variants) {
      CAPTURE(v.name);
      const study::Variant* found = study::find_variant(v.name);
      REQUIRE(found != nullptr);
      CHECK(found->norm == spec.name);
      CHECK(found->residual == "plain");
      CHECK(study::variant_of(spec.name, v.placement) == v.name);
      const std::string block = study::block_formula(spec.name, v.placement, true);
      if (spec.make) CHECK(block.find(spec.symbol + "(") != std::string::npos);
    }
  }
}

TEST_CASE("norm registry: normlab help norms --json lists every entry with its PyTorch mapping") {
  TempDir dir("normlab_help_norms");
  const Cli cli = run_normlab(dir, "help norms --json");
  REQUIRE(cli.code == 0);
  const nlohmann::json listed = nlohmann::json::parse(cli.out);
  std::vector<std::string> names;
  for (const nlohmann::json& norm : listed.at("norms")) {
    names.push_back(norm.at("name"));
    const nn::NormEntry* entry = nn::find_norm(names.back());
    REQUIRE(entry != nullptr);
    CHECK(norm.at("torch").at("forward") == entry->torch.forward);
    CHECK(norm.at("torch").at("tensors").size() == entry->torch.tensors.size());
    CHECK(norm.at("layer") == bool(entry->spec.make));
  }
  CHECK(names == nn::norm_names());
  CHECK(run_normlab(dir, "help norms --yaml").code == 2);
  const Cli text = run_normlab(dir, "help norms");
  const Cli train_help = run_normlab(dir, "train --help");
  for (const nn::NormEntry& entry : nn::norm_registry()) {
    CAPTURE(entry.spec.name);
    CHECK(text.out.find(entry.spec.formula) != std::string::npos);
    CHECK(train_help.out.find(entry.spec.name) != std::string::npos);
  }
}

TEST_CASE("ScaleNorm: every token comes out with length g, and y * ||x|| / g gives x back") {
  const nn::NormEntry* entry = nn::find_norm("scalenorm");
  REQUIRE(entry != nullptr);
  auto layer = entry->spec.make(kDim, 1e-12f);
  const auto params = layer->named_parameters();
  REQUIRE(params.size() == 1);  // one learned scalar for the whole layer, no per-feature gain
  Tensor g = params[0].second;
  REQUIRE(g.numel() == 1);
  CHECK(g.data()[0] == doctest::Approx(std::sqrt(double(kDim))));  // the paper's init
  g.data()[0] = 1.7f;
  Rng rng(47, 1);
  const Tensor x = registry_test_input(rng);
  const std::vector<float> y = layer->forward(x).to_vector();
  for (int64_t r = 0; r < kRows; ++r) {
    CAPTURE(r);
    double x_norm = 0.0, y_norm = 0.0;
    for (int64_t c = 0; c < kDim; ++c) {
      x_norm += double(x.data()[r * kDim + c]) * x.data()[r * kDim + c];
      y_norm += double(y[r * kDim + c]) * y[r * kDim + c];
    }
    x_norm = std::sqrt(x_norm);
    CHECK(std::sqrt(y_norm) == doctest::Approx(1.7).epsilon(1e-6));
    for (int64_t c = 0; c < kDim; ++c)
      CHECK(y[r * kDim + c] * x_norm / 1.7 == doctest::Approx(x.data()[r * kDim + c]).epsilon(1e-5));
  }
}
