// The plain residual sum of the Transformer (and of ResNets, He et al. 2016): x + f(x). Nothing
// scales the sublayer's output, so without a norm the stream's scale grows with depth.
#include "normlab/nn/layers.hpp"
#include "normlab/nn/residual_registry.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

namespace {

class PlainResidual : public ResidualScheme {
 public:
  Tensor add(const Tensor& x, const Tensor& f, int) const override { return ops::add(x, f); }
  // x + last(hidden) with the sum inside the Linear's GEMM: x is added as it stores f.
  Tensor add_linear(const Tensor& x, const Linear& last, const Tensor& hidden, int) const override {
    return ops::linear_add(hidden, last.weight, last.bias, x);
  }
};

}  // namespace

ResidualEntry plain_residual_entry() {
  return {.spec = {.name = "plain",
                   .aliases = {"add", "standard"},
                   .description = "the plain residual sum of the Transformer",
                   .formula = "x + f(x)",
                   .sum = "x + {}",
                   .note = "",
                   .make = [](int64_t) { return std::make_unique<PlainResidual>(); }},
          .torch = {{}, {"x + f", "x + f"}},
          .variants = {},
          .norm_spelling = ""};
}

}  // namespace normlab::nn
