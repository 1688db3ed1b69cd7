// The registry: one line per normalization. Each norm's layer, plain reference forward and PyTorch
// mapping live in its own file under src/nn/norms/, which defines the *_spec() declared here.
#include "normlab/nn/norm_registry.hpp"

#include <fmt/format.h>

#include "normlab/error.hpp"
#include "normlab/nn/norm.hpp"

namespace normlab::nn {

NormSpec layer_norm_spec();  // src/nn/norms/layer_norm.cpp
NormSpec rms_norm_spec();    // src/nn/norms/rms_norm.cpp
NormSpec batch_norm_spec();  // src/nn/norms/batch_norm.cpp
NormSpec power_norm_spec();  // src/nn/norms/power_norm.cpp
NormSpec dyt_spec();         // src/nn/norms/dyt.cpp
NormSpec scale_norm_spec();  // src/nn/norms/scale_norm.cpp

namespace {

// The two blocks without a normalization layer: nothing to build, load or check.
NormSpec residual_only_spec(std::string name, Residual residual, std::string description, std::string formula,
                            std::string color) {
  return {.name = name, .description = std::move(description), .formula = formula, .residual = residual,
          .variants = {{name, "pre", formula, std::move(color)}}};
}

}  // namespace

const std::vector<NormSpec>& norm_registry() {
  static const std::vector<NormSpec> registry = {
      layer_norm_spec(),
      rms_norm_spec(),
      batch_norm_spec(),
      power_norm_spec(),
      dyt_spec(),
      scale_norm_spec(),
      residual_only_spec("rezero", Residual::rezero, "ReZero: no normalization, each sublayer scaled by a learned alpha",
                         "no normalization: x + alpha * f(x), alpha = 0 at init", "#E69F00"),
      residual_only_spec("none", Residual::plain, "no normalization at all", "no normalization: x + f(x)", "#000000"),
  };
  return registry;
}

const NormSpec* find_norm(const std::string& name) {
  for (const NormSpec& spec : norm_registry())
    if (spec.name == name) return &spec;
  return nullptr;
}

std::vector<std::string> norm_names() {
  std::vector<std::string> names;
  for (const NormSpec& spec : norm_registry()) names.push_back(spec.name);
  return names;
}

NormKind::NormKind(const std::string& name) : spec_(find_norm(name)) {
  if (spec_ == nullptr)
    throw UsageError(fmt::format("unknown norm '{}' (choose {})", name, fmt::join(norm_names(), ", ")));
}
NormKind::NormKind(const char* name) : NormKind(std::string(name)) {}
const std::string& NormKind::name() const { return spec_->name; }

NormKind parse_norm_kind(const std::string& name) { return NormKind(name); }
std::string to_string(NormKind kind) { return kind.name(); }
bool has_norm_layer(NormKind kind) { return kind.spec().residual == Residual::normalized; }

std::unique_ptr<NormLayer> make_norm(NormKind kind, int64_t dim, float eps) {
  if (!has_norm_layer(kind)) throw UsageError(fmt::format("norm '{}' has no normalization layer", kind.name()));
  return kind.spec().make(dim, eps);
}

}  // namespace normlab::nn
