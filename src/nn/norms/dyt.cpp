// Dynamic Tanh (Zhu et al. 2025): no statistics at all, an elementwise squashing in place of a norm
//   y = gamma * tanh(alpha * x) + beta, alpha one learned scalar (init 0.5)
#include "normlab/kernels/reference/activations.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

DyT::DyT(int64_t dim, float alpha_init) {
  alpha = register_parameter("alpha", Tensor::full({1}, alpha_init));
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}
Tensor DyT::forward(const Tensor& x) { return ops::dyt(x, alpha, weight, bias); }

NormEntry dyt_entry() {
  return {.spec =
              {
                  .name = "dyt",
                  .symbol = "DyT",
                  .aliases = {"dynamic_tanh", "tanh"},
                  .description = "Dynamic Tanh: an elementwise gamma * tanh(alpha x) + beta, no statistics",
                  .formula = "y = gamma * tanh(alpha * x) + beta, alpha one learned scalar (init 0.5)",
                  .reference = reference_forward<DyT>([](const DyT& dyt, ReferenceRows r) {
                    kernels::reference::dyt_forward(r.y, r.x, dyt.alpha.data(), dyt.weight.data(), dyt.bias.data(),
                                                    r.rows, r.dim);
                  }),
                  .make = [](int64_t dim, float) { return std::make_unique<DyT>(dim); },
              },  // no eps: nothing is divided
          .torch = {{{"alpha", "torch.full((1,), 0.5)"}, {"weight", "torch.ones(dim)"}, {"bias", "torch.zeros(dim)"}},
                    "weight * torch.tanh(alpha * x) + bias"},
          .variants = {{"dyt", "pre", "Dynamic Tanh gamma * tanh(a x) + beta in place of each norm, pre placement",
                        "#56B4E9"},
                       {"post-dyt", "post", "Dynamic Tanh, post placement", "#999999"}}};
}

}  // namespace normlab::nn
