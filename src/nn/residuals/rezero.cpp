// ReZero (Bachlechner et al. 2020): x + alpha * f(x), alpha ONE learned scalar per block shared by
// its two sublayers, 0 at init, so that every block starts as the identity. The paper drops the
// norm layers; model.norm "rezero" (what the config said before residual schemes had their own key)
// is model.norm "none" with this scheme.
#include "normlab/nn/residual_registry.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

namespace {

class ReZero : public ResidualScheme {
 public:
  ReZero() { resweight = register_parameter("resweight", Tensor::zeros({1})); }  // the official code's name
  Tensor add(const Tensor& x, const Tensor& f, int) const override { return ops::add(x, ops::mul(f, resweight)); }
  Tensor resweight;  // (1)
};

}  // namespace

ResidualEntry rezero_entry() {
  return {.spec = {.name = "rezero",
                   .aliases = {"re_zero"},
                   .description = "ReZero: each sublayer scaled by a learned alpha",
                   .formula = "x + alpha * f(x), alpha one learned scalar per block, 0 at init",
                   .sum = "x + alpha * {}",
                   .note = "ReZero, alpha = 0 at init",
                   .make = [](int64_t) { return std::make_unique<ReZero>(); }},
          .torch = {{{"resweight", "torch.zeros(1)"}}, {"x + resweight * f", "x + resweight * f"}},
          .variants = {{"rezero", "none", "pre", "no normalization: x + alpha * f(x), alpha = 0 at init", "#E69F00"}},
          .norm_spelling = "rezero"};
}

}  // namespace normlab::nn
