// The registry: one line per normalization. Each norm's layer, plain reference forward and PyTorch
// mapping live in its own file under src/nn/norms/, which defines the *_entry() declared here.
#include "normlab/nn/norm_registry.hpp"

#include <fmt/format.h>

#include "normlab/error.hpp"
#include "normlab/nn/registry.hpp"
#include "normlab/nn/norm.hpp"

namespace normlab::nn {

NormEntry layer_norm_entry();  // src/nn/norms/layer_norm.cpp
NormEntry rms_norm_entry();    // src/nn/norms/rms_norm.cpp
NormEntry batch_norm_entry();  // src/nn/norms/batch_norm.cpp
NormEntry power_norm_entry();  // src/nn/norms/power_norm.cpp
NormEntry dyt_entry();         // src/nn/norms/dyt.cpp
NormEntry scale_norm_entry();  // src/nn/norms/scale_norm.cpp
NormEntry no_norm_entry();     // src/nn/norms/none.cpp

const std::vector<NormEntry>& norm_registry() {
  static const std::vector<NormEntry> registry = {
      layer_norm_entry(), rms_norm_entry(),   batch_norm_entry(), power_norm_entry(),
      dyt_entry(),        scale_norm_entry(), no_norm_entry(),
  };
  return registry;
}

const NormEntry* find_norm(const std::string& name) { return find_entry(norm_registry(), name); }

std::vector<std::string> norm_names() { return entry_names(norm_registry()); }

NormKind::NormKind(const std::string& name) : entry_(require_entry(norm_registry(), name, "norm")) {}
NormKind::NormKind(const char* name) : NormKind(std::string(name)) {}
const std::string& NormKind::name() const { return entry_->spec.name; }

NormKind parse_norm_kind(const std::string& name) { return NormKind(name); }
std::string to_string(NormKind kind) { return kind.name(); }
bool has_norm_layer(NormKind kind) { return kind.spec().make != nullptr; }

std::unique_ptr<NormLayer> make_norm(NormKind kind, int64_t dim, float eps) {
  if (!has_norm_layer(kind)) throw UsageError(fmt::format("norm '{}' has no normalization layer", kind.name()));
  return kind.spec().make(dim, eps);
}

}  // namespace normlab::nn
