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

NormSpec dyt_spec() {
  NormSpec spec;
  spec.name = "dyt";
  spec.description = "Dynamic Tanh: an elementwise gamma * tanh(alpha x) + beta, no statistics";
  spec.formula = "y = gamma * tanh(alpha * x) + beta, alpha one learned scalar (init 0.5)";
  spec.symbol = "DyT";
  spec.aliases = {"dynamic_tanh", "tanh"};
  spec.make = [](int64_t dim, float) { return std::make_unique<DyT>(dim); };  // no eps: nothing is divided
  spec.reference = [](const NormLayer& layer, const float* x, int64_t rows, int64_t dim) {
    const auto& dyt = dynamic_cast<const DyT&>(layer);
    std::vector<float> out(static_cast<size_t>(rows * dim));
    kernels::reference::dyt_forward(out.data(), x, dyt.alpha.data(), dyt.weight.data(), dyt.bias.data(), rows, dim);
    return out;
  };
  spec.torch = {{{"alpha", "torch.full((1,), 0.5)"}, {"weight", "torch.ones(dim)"}, {"bias", "torch.zeros(dim)"}},
                "weight * torch.tanh(alpha * x) + bias"};
  spec.variants = {
      {"dyt", "pre", "Dynamic Tanh gamma * tanh(a x) + beta in place of each norm, pre placement", "#56B4E9"},
      {"post-dyt", "post", "Dynamic Tanh, post placement", "#999999"},
  };
  return spec;
}

}  // namespace normlab::nn
