// Every norm kind, the position table and the whole EncoderModel against PyTorch (golden files from
// scripts/golden/norms.py in tests/data/norms).
//
// The references are PyTorch's float64 results from the same float32 inputs; each file also records
// how far PyTorch's own float32 run of the same computation lands from them ("noise"). We accept
// max |normlab - float64| <= kNoiseMultiple * noise + one float32 rounding of the largest value:
// normlab's float32 is allowed to be a few times noisier than PyTorch's, not 1000 times.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "normlab/io/safetensors.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/nn/layers.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/nn/norm_registry.hpp"
#include "normlab/nn/residual_registry.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/setup.hpp"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

constexpr double kNoiseMultiple = 8.0;

fs::path golden_dir() { return fs::path(NORMLAB_TEST_DATA_DIR) / "norms"; }

struct Golden {
  io::SafetensorsFile file;
  nlohmann::json meta;
  std::set<std::string> compared;  // reference keys checked so far

  explicit Golden(const std::string& name)
      : file(io::read_safetensors((golden_dir() / (name + ".safetensors")).string())),
        meta(nlohmann::json::parse(file.metadata.at("meta"))) {}

  const io::TensorRecord& record(const std::string& name) const {
    const io::TensorRecord* r = file.find(name);
    if (r == nullptr) FAIL("no tensor '" << name << "' in " << file.path);
    return *r;
  }
  std::vector<float> f32(const std::string& name) const { return file.floats(name, record(name).shape); }
  std::vector<double> f64(const std::string& name) const {
    const io::TensorRecord& r = record(name);
    REQUIRE(r.dtype == "F64");
    std::vector<double> v(r.bytes.size() / sizeof(double));
    std::memcpy(v.data(), r.bytes.data(), r.bytes.size());
    return v;
  }
  Tensor tensor(const std::string& name) const { return Tensor::from_data(record(name).shape, f32(name)); }

  // One reference: normlab's float32 values against PyTorch's float64 ones.
  void check(const std::string& ref_key, const std::vector<float>& got) {
    CAPTURE(file.path);
    CAPTURE(ref_key);
    const std::vector<double> expected = f64(ref_key);
    REQUIRE(got.size() == expected.size());
    double max_diff = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(double(got[i]) - expected[i]));
      max_ref = std::max(max_ref, std::abs(expected[i]));
    }
    const double noise = meta.at("noise").at(ref_key).get<double>();
    const double tolerance = kNoiseMultiple * noise + 0x1p-24 * max_ref;
    CAPTURE(noise);
    CAPTURE(max_ref);
    CHECK(max_diff <= tolerance);
    if (std::getenv("NORMLAB_SHOW_ERRORS"))
      MESSAGE(fmt::format("{} {}: error {:.2e} = {:.2f} x noise {:.2e} (max {:.2e})", file.path, ref_key, max_diff,
                          noise > 0 ? max_diff / noise : 0.0, noise, max_ref));
    compared.insert(ref_key);
  }

  // Every reference in the file was looked at.
  void check_all_compared() const {
    int refs = 0;
    for (const io::TensorRecord& r : file.tensors)
      if (r.name.rfind("ref.", 0) == 0) {
        ++refs;
        CHECK_MESSAGE(compared.count(r.name) == 1, file.path << ": reference " << r.name << " was never compared");
      }
    CHECK(refs == int(compared.size()));
  }
};

// Copies every "param.<name>" of the file into the module's parameter of that name; the two name
// sets must be equal.
void load_parameters(const Golden& g, const nn::Module& module) {
  std::set<std::string> in_file;
  for (const io::TensorRecord& r : g.file.tensors)
    if (r.name.rfind("param.", 0) == 0) in_file.insert(r.name.substr(6));
  std::set<std::string> in_module;
  for (auto& [name, t] : module.named_parameters()) {
    CAPTURE(name);
    in_module.insert(name);
    REQUIRE(in_file.count(name) == 1);
    REQUIRE(g.record("param." + name).shape == t.shape());
    const std::vector<float> v = g.f32("param." + name);
    Tensor handle = t;
    std::copy(v.begin(), v.end(), handle.data());
  }
  CHECK(in_file == in_module);
}

std::vector<std::string> golden_names(const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(golden_dir())) {
    const std::string stem = entry.path().stem().string();
    if (entry.path().extension() == ".safetensors" && stem.rfind(prefix, 0) == 0) names.push_back(stem);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("golden norms: each norm layer from make_norm, forward and backward, against PyTorch") {
  const std::vector<std::string> names = golden_names("norm_");
  // one per registry entry with a layer (layernorm, rmsnorm, batchnorm, powernorm, dyt, scalenorm),
  // and the four small-variance cases: a norm added to the registry fails here until it has its file
  int64_t layers = 0;
  for (const nn::NormEntry& entry : nn::norm_registry()) {
    if (!entry.spec.make) continue;
    ++layers;
    CHECK_MESSAGE(std::find(names.begin(), names.end(), "norm_" + entry.spec.name) != names.end(), "no golden norm_",
                  entry.spec.name, " (scripts/golden/norms.py)");
  }
  CHECK(names.size() == static_cast<size_t>(layers + 4));
  for (const std::string& name : names) {
    CAPTURE(name);
    Golden g(name);
    const nn::NormKind kind = nn::parse_norm_kind(g.meta.at("kind"));
    const int64_t d = g.meta.at("d");
    auto layer = nn::make_norm(kind, d, g.meta.at("eps").get<float>());
    load_parameters(g, *layer);
    const auto& steps = g.meta.at("steps");
    for (size_t i = 0; i < steps.size(); ++i) {
      CAPTURE(i);
      layer->train(steps[i].at("training").get<bool>());
      layer->zero_grad();
      Tensor x = g.tensor(fmt::format("x.{}", i));
      x.set_requires_grad();
      Tensor out = layer->forward(x);
      out.backward(g.tensor(fmt::format("dout.{}", i)));
      g.check(fmt::format("ref.out.{}", i), out.to_vector());
      g.check(fmt::format("ref.grad.x.{}", i), x.grad().to_vector());
      for (auto& [pname, t] : layer->named_parameters())
        g.check(fmt::format("ref.grad.{}.{}", pname, i), t.grad().to_vector());
      for (auto& [bname, t] : layer->named_buffers()) g.check(fmt::format("ref.buffer.{}.{}", bname, i), t.to_vector());
    }
    g.check_all_compared();
  }
}

TEST_CASE("golden norms: small-variance rows make eps 1e-5 and 1e-12 clearly different") {
  // The same kind of input with the other eps misses the reference by far more than the tolerance:
  // a layer that ignored its configured eps could not pass the test above.
  for (const char* kind : {"layernorm", "rmsnorm"}) {
    for (auto [file_eps, other_eps] : {std::pair{"1e-05", 1e-12f}, std::pair{"1e-12", 1e-5f}}) {
      const std::string name = fmt::format("norm_{}_smallvar_eps{}", kind, file_eps);
      CAPTURE(name);
      Golden g(name);
      auto layer = nn::make_norm(nn::parse_norm_kind(kind), g.meta.at("d"), other_eps);
      load_parameters(g, *layer);
      const std::vector<float> out = layer->forward(g.tensor("x.0")).to_vector();
      const std::vector<double> expected = g.f64("ref.out.0");
      double max_diff = 0.0;
      for (size_t i = 0; i < out.size(); ++i) max_diff = std::max(max_diff, std::abs(out[i] - expected[i]));
      CHECK(max_diff > 0.1);  // outputs are O(1); the tolerance is ~1e-6 of that
    }
  }
}

TEST_CASE("golden norms: the sinusoidal position table matches PyTorch's formula") {
  const std::vector<std::string> names = golden_names("positions_");
  CHECK(names.size() == 2);
  for (const std::string& name : names) {
    CAPTURE(name);
    Golden g(name);
    const std::vector<float> table = nn::sinusoidal_table(g.meta.at("max_len"), g.meta.at("d"));
    g.check("ref.table", table);
    g.check_all_compared();
  }
}

TEST_CASE("golden norms: whole EncoderModel per norm kind and residual scheme x placement, embedding + head") {
  // PowerNorm's running_phi and grad_ema are compared after the forward and the backward: the model
  // file checks that every PowerNorm layer of both placements updates its own two running averages.
  const std::vector<std::string> names = golden_names("model_");
  // every norm x 2 placements on the plain sum, every other residual scheme x 2 placements (ReZero
  // without a norm, LayerScale on LayerNorm), and 2 without layers
  const size_t kinds = nn::norm_registry().size() + nn::residual_registry().size() - 1;
  CHECK(names.size() == 2 * kinds + 2);
  std::set<std::string> kinds_seen;
  for (const std::string& name : names) {
    CAPTURE(name);
    Golden g(name);
    const nlohmann::json& m = g.meta;
    nn::ModelOptions opts;
    opts.encoder.d_model = m.at("d_model");
    opts.encoder.num_heads = m.at("heads");
    opts.encoder.num_layers = m.at("layers");
    opts.encoder.dim_feedforward = m.at("ffn");
    opts.encoder.activation = m.at("activation") == "gelu" ? nn::Activation::gelu : nn::Activation::relu;
    // Files written before residual schemes had their own key say norm "rezero": norm none, scheme rezero.
    const std::string norm = m.at("norm"), residual = m.value("residual", "plain");
    const nn::ResidualEntry* spelled = nn::residual_spelled_as_norm(norm);
    opts.encoder.norm = nn::parse_norm_kind(spelled ? "none" : norm);
    opts.encoder.residual = spelled ? spelled->spec.name : residual;
    opts.encoder.placement = m.at("placement") == "pre" ? nn::Placement::pre : nn::Placement::post;
    opts.encoder.norm_eps = m.at("eps").get<float>();
    opts.encoder.final_norm = m.at("final_norm");
    opts.vocab_size = m.at("vocab");
    opts.num_classes = m.at("classes");
    opts.max_len = m.at("max_len");
    opts.positional = m.at("positional") == "learned" ? nn::Positional::learned : nn::Positional::sinusoidal;
    opts.head = m.at("head") == "sequence" ? nn::Head::sequence : nn::Head::token;
    opts.seed = 1;
    nn::EncoderModel model(opts);
    load_parameters(g, model);
    kinds_seen.insert(fmt::format("{}/{}/{}", norm, residual, m.at("placement").get<std::string>()));

    const std::vector<int64_t> token_ids = g.file.int64s("tokens", g.record("tokens").shape);
    const std::vector<int32_t> tokens(token_ids.begin(), token_ids.end());
    std::vector<int64_t> offsets{0};
    for (int64_t len : m.at("lengths").get<std::vector<int64_t>>()) offsets.push_back(offsets.back() + len);
    Tensor logits = model.forward(tokens, offsets);
    logits.backward(g.tensor("dout"));
    g.check("ref.out", logits.to_vector());
    for (auto& [pname, t] : model.named_parameters()) g.check("ref.grad." + pname, t.grad().to_vector());
    for (auto& [bname, t] : model.named_buffers()) g.check("ref.buffer." + bname, t.to_vector());
    g.check_all_compared();
  }
  CHECK(kinds_seen.size() == 2 * kinds);  // every kind x placement (the two layer-less files are none/pre)
}

TEST_CASE("model.norm_eps from a config reaches every norm layer (and final norm) of the model") {
  const std::string config_path = std::string(NORMLAB_SOURCE_DIR) + "/configs/reverse.json";
  for (const char* kind : {"layernorm", "rmsnorm", "batchnorm"}) {
    for (const char* placement : {"pre", "post"}) {
      for (const char* eps : {"1e-3", "1e-7"}) {
        CAPTURE(kind);
        CAPTURE(placement);
        CAPTURE(eps);
        const train::RunConfig config =
            train::load_config(config_path,
                               {std::string("model.norm=") + kind, std::string("model.placement=") + placement,
                                std::string("model.norm_eps=") + eps, "model.layers=3"});
        const data::Task task = train::build_task(config);
        nn::EncoderModel model(train::build_model_options(config, task));
        std::vector<nn::NormLayer*> norms;
        for (auto& layer : model.encoder.layers) {
          REQUIRE(layer->norm1);
          REQUIRE(layer->norm2);
          norms.push_back(layer->norm1.get());
          norms.push_back(layer->norm2.get());
        }
        if (std::string(placement) == "pre") {
          REQUIRE(model.encoder.norm);
          norms.push_back(model.encoder.norm.get());
        } else {
          CHECK(model.encoder.norm == nullptr);
        }
        CHECK(norms.size() == (std::string(placement) == "pre" ? 7u : 6u));
        const float expected = std::stof(eps);
        for (nn::NormLayer* norm : norms) {
          float got = -1.0f;
          if (auto* ln = dynamic_cast<nn::LayerNorm*>(norm)) got = kind == std::string("layernorm") ? ln->eps : -2.0f;
          if (auto* rms = dynamic_cast<nn::RMSNorm*>(norm)) got = kind == std::string("rmsnorm") ? rms->eps : -2.0f;
          if (auto* bn = dynamic_cast<nn::BatchNorm*>(norm)) got = kind == std::string("batchnorm") ? bn->eps : -2.0f;
          CHECK(got == expected);  // -2: the wrong layer type for the kind; -1: no norm layer at all
        }
        // And the eps is used: a small-variance token normalizes differently under 1e-3 and 1e-7.
        Tensor x =
            Tensor::from_data({2, config.model.d_model}, std::vector<float>(size_t(2 * config.model.d_model), 0.5f));
        for (int64_t c = 0; c < 2 * config.model.d_model; ++c) x.data()[c] += 1e-3f * float(c % 5);
        const std::vector<float> y = norms.back()->forward(x).to_vector();
        double max_abs = 0.0;
        for (float v : y) max_abs = std::max(max_abs, double(std::abs(v)));
        if (std::string(kind) == "layernorm" || std::string(kind) == "batchnorm") {
          // xhat = dev / sqrt(var + eps), dev ~1e-3, var ~1e-6: < 0.07 with eps = 1e-3, ~1 with 1e-7
          if (expected > 1e-5f) CHECK(max_abs < 0.1);
          else CHECK(max_abs > 0.5);
        }
      }
    }
  }
}
