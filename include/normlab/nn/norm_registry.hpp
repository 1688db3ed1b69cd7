#pragma once
// The normalizations normlab knows, one registry entry each: one axis of a block. The other axis,
// how a sublayer's output is added back to the stream (x + f(x), ReZero, LayerScale), is the
// residual registry (nn/residual_registry.hpp); placement (pre / post) is a third, separate choice.
// Everything that lists norms reads this table: config validation (model.norm), the encoder (which
// layer a block gets), the compare grid's variant names (nn/variants.hpp), the report's
// descriptions and block formulas, `normlab help norms` and, through `normlab help norms --json`,
// scripts/golden/load_checkpoint_torch.py. Adding a norm is its own file under src/nn/norms/ (the layer,
// its plain reference forward, its entry) plus its line in src/nn/norm_registry.cpp; docs/tour.md's
// "Add your own normalization" walks through it with ScaleNorm.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace normlab::nn {

class NormLayer;

// One name in the compare grid's "variants" (study/plan.hpp): this norm at one placement.
struct NormVariant {
  std::string name;         // e.g. "pre-ln"
  std::string placement;    // "pre" | "post"
  std::string description;  // one line, in reports
  std::string color;        // the report's chart colour, "#RRGGBB"
};

// A tensor of the PyTorch module the loader builds: its state_dict name and its initial value as a
// PyTorch expression of `dim` (d_model), e.g. {"weight", "torch.ones(dim)", true}.
struct TorchTensor {
  std::string name;
  std::string init;
  bool parameter = true;  // false: a buffer (running statistics)
};

// How scripts/golden/load_checkpoint_torch.py rebuilds the layer in PyTorch (eval mode): its tensors and
// its forward as one PyTorch expression of x (..., dim), eps and the tensors by name.
struct TorchMapping {
  std::vector<TorchTensor> tensors;
  std::string forward;  // e.g. "weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)"
};

// The plain-loop forward (kernels/reference style) of `layer` on x (rows, dim) in training mode,
// computed from the layer's parameters and a copy of its buffers: what the layer's own forward
// must give. Used by the registry's test on every entry.
using ReferenceForward =
    std::function<std::vector<float>(const NormLayer& layer, const float* x, int64_t rows, int64_t dim)>;

// The math of a normalization: what the layer computes and how it is built. Fields in the order a
// norm's file writes them (designated initializers, src/nn/norms/*.cpp).
struct NormSpec {
  std::string name;                  // model.norm value, e.g. "rmsnorm"
  std::string symbol;                // in block formulas: "x = x + f(RMSNorm(x))"
  std::vector<std::string> aliases;  // what users type for it ("rms", "rms_norm"): "did you mean"
  std::string description;           // one line, in `normlab help norms`
  std::string formula;               // the layer, e.g. "y = gamma * x / sqrt(mean(x^2) + eps) per token"
  ReferenceForward reference;        // null for "none" (no layer)
  // The layer over (tokens, dim) with model.norm_eps; null for "none": the block has no norm layer.
  std::function<std::unique_ptr<NormLayer>(int64_t dim, float eps)> make;
};

// One registry entry: the math, and beside it what other parts need of it: the PyTorch loader's
// mapping and the compare grid's names and chart colours.
struct NormEntry {
  NormSpec spec;
  TorchMapping torch;                 // empty for "none"
  std::vector<NormVariant> variants;  // its names in the compare grid (nn/variants.hpp)
};

// Every entry, in documentation order (the order of config's "must be one of" list).
const std::vector<NormEntry>& norm_registry();
// The entry named `name`, or nullptr.
const NormEntry* find_norm(const std::string& name);
// "layernorm", "rmsnorm", ... in registry order.
std::vector<std::string> norm_names();

// A model.norm choice: a name checked once against the registry (norm_registry.hpp) and kept as
// its entry, so later code asks the entry instead of comparing strings. Converts from a name so
// that `options.norm = "rmsnorm"` reads naturally; an unknown name throws UsageError listing the
// choices.
class NormKind {
 public:
  NormKind(const char* name);         // NOLINT: implicit on purpose
  NormKind(const std::string& name);  // NOLINT
  const NormSpec& spec() const { return entry_->spec; }
  const NormEntry& entry() const { return *entry_; }
  const std::string& name() const;
  bool operator==(const NormKind& other) const { return entry_ == other.entry_; }

 private:
  const NormEntry* entry_;
};

}  // namespace normlab::nn
