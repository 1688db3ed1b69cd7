#pragma once
// The residual schemes normlab knows, one registry entry each: how a block adds each sublayer's
// output f (attention, then the feed-forward network) back to the residual stream x.
//
//   plain       x + f                          (He et al. 2016; the Transformer)
//   rezero      x + alpha * f, alpha one learned scalar per block, 0 at init (Bachlechner et al. 2020)
//   layerscale  x + diag(lambda_k) * f, lambda_k a learned (d_model) vector per sublayer,
//               every element 0.1 at init (Touvron et al. 2021, CaiT)
//
// A scheme is the other axis of a block beside its normalization (nn/norm_registry.hpp), and
// placement is its own choice: pre  x = scheme(x, f(norm(x)));  post  x = norm(scheme(x, f(x))).
// Adding a scheme is its own file under src/nn/residuals/ (the module, its entry) plus its line in
// src/nn/residual_registry.cpp; docs/tour.md's "Add your own residual scheme" builds LayerScale.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "normlab/nn/module.hpp"
#include "normlab/nn/norm_registry.hpp"

namespace normlab::nn {

class Linear;  // nn/layers.hpp

// One block's residual sums. Its parameters are the block's own (layers.N.resweight for ReZero):
// the block registers it as a child under no name of its own, before its sublayers.
class ResidualScheme : public Module {
 public:
  // x + scale(f) for sublayer 0 (attention) or 1 (feed-forward); x and f (tokens, d_model).
  virtual Tensor add(const Tensor& x, const Tensor& f, int sublayer) const = 0;
  // The same sum for f = last(hidden), last the sublayer's final Linear (attention's out_proj, the
  // feed-forward's linear2) when nothing stands between it and the sum (no dropout). By default
  // add(x, last.forward(hidden), sublayer). The plain sum x + f overrides it with ops::linear_add,
  // which adds x as the GEMM stores f: one pass over (tokens, d_model) and one graph node fewer,
  // the same bits. A scheme that scales f first (ReZero, LayerScale) keeps the default: its scale
  // is an op of its own between the Linear and the sum, whose gradient needs f.
  virtual Tensor add_linear(const Tensor& x, const Linear& last, const Tensor& hidden, int sublayer) const;
};

// The math of a scheme. Fields in the order a scheme's file writes them.
struct ResidualSpec {
  std::string name;                  // model.residual value, e.g. "rezero"
  std::vector<std::string> aliases;  // what users type for it: "did you mean"
  std::string description;           // one line, in `normlab help norms`
  std::string formula;               // e.g. "x + alpha * f(x), alpha one learned scalar per block, 0 at init"
  // The sum in a block formula, {} standing for the sublayer term: "x + alpha * {}".
  std::string sum;
  std::string note;  // said in the block formula's parentheses, e.g. "ReZero, alpha = 0 at init"; "" for plain
  // One block's scheme over (tokens, d_model).
  std::function<std::unique_ptr<ResidualScheme>(int64_t d_model)> make;
};

// How scripts/golden/load_checkpoint_torch.py rebuilds a scheme: its tensors, named as in the block's
// state_dict, with their initial values (TorchTensor), and each sublayer's sum as a PyTorch
// expression of x, f and those tensors.
struct TorchResidual {
  std::vector<TorchTensor> tensors;
  std::vector<std::string> sums;  // [attention, feed-forward], e.g. "x + resweight * f"
};

// A compare-grid name for this scheme on a given norm and placement (nn/variants.hpp).
struct ResidualVariant {
  std::string name;  // "rezero"
  std::string norm;  // model.norm
  std::string placement;
  std::string description;
  std::string color;  // the report's chart colour, "#RRGGBB"
};

// One registry entry: the math, and beside it the PyTorch mapping and the grid's names.
struct ResidualEntry {
  ResidualSpec spec;
  TorchResidual torch;
  std::vector<ResidualVariant> variants;
  // What model.norm accepted for this scheme before it had its own key: model.norm "rezero" reads
  // as model.norm "none" with model.residual "rezero". "" for a scheme added since.
  std::string norm_spelling;
};

// Every entry, in documentation order.
const std::vector<ResidualEntry>& residual_registry();
// The entry named `name`, or nullptr.
const ResidualEntry* find_residual(const std::string& name);
// "plain", "rezero", ... in registry order.
std::vector<std::string> residual_names();
// The entry whose norm_spelling is `norm` (model.norm "rezero"), or nullptr.
const ResidualEntry* residual_spelled_as_norm(const std::string& norm);

// A model.residual choice, checked once against the registry like NormKind.
class ResidualKind {
 public:
  ResidualKind(const char* name);         // NOLINT: implicit on purpose
  ResidualKind(const std::string& name);  // NOLINT
  const ResidualSpec& spec() const { return entry_->spec; }
  const ResidualEntry& entry() const { return *entry_; }
  const std::string& name() const { return entry_->spec.name; }
  bool operator==(const ResidualKind& other) const { return entry_ == other.entry_; }

 private:
  const ResidualEntry* entry_;
};

}  // namespace normlab::nn
