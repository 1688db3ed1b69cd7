// The registry: one line per residual scheme. Each scheme's module, formulas and PyTorch mapping
// live in its own file under src/nn/residuals/, which defines the *_entry() declared here.
#include "normlab/nn/residual_registry.hpp"

#include <fmt/format.h>

#include "normlab/error.hpp"
#include "normlab/nn/layers.hpp"
#include "normlab/nn/registry.hpp"

namespace normlab::nn {

ResidualEntry plain_residual_entry();  // src/nn/residuals/plain.cpp
ResidualEntry rezero_entry();          // src/nn/residuals/rezero.cpp
ResidualEntry layer_scale_entry();     // src/nn/residuals/layer_scale.cpp

Tensor ResidualScheme::add_linear(const Tensor& x, const Linear& last, const Tensor& hidden, int sublayer) const {
  return add(x, last.forward(hidden), sublayer);
}

const std::vector<ResidualEntry>& residual_registry() {
  static const std::vector<ResidualEntry> registry{
      plain_residual_entry(),
      rezero_entry(),
      layer_scale_entry(),
  };
  return registry;
}

const ResidualEntry* residual_spelled_as_norm(const std::string& norm) {
  for (const ResidualEntry& entry : residual_registry())
    if (!entry.norm_spelling.empty() && entry.norm_spelling == norm) return &entry;
  return nullptr;
}

const ResidualEntry* find_residual(const std::string& name) { return find_entry(residual_registry(), name); }

std::vector<std::string> residual_names() { return entry_names(residual_registry()); }

ResidualKind::ResidualKind(const std::string& name)
    : entry_(require_entry(residual_registry(), name, "residual scheme")) {}
ResidualKind::ResidualKind(const char* name) : ResidualKind(std::string(name)) {}

}  // namespace normlab::nn
