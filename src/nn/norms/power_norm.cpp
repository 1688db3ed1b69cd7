// PowerNorm (Shen et al. 2020, Algorithm 1; docs/layernorm.md): per feature,
//   y = gamma * x / sqrt(phi_c + eps) + beta, phi_c the running mean of x^2 over past batches'
// real tokens, in training too; the backward keeps its own running average (grad_ema).
#include "normlab/kernels/reference/power_norm.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

PowerNorm::PowerNorm(int64_t dim, float eps_, float momentum_) : eps(eps_), momentum(momentum_) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
  running_phi = register_buffer("running_phi", Tensor::ones({dim}));
  grad_ema = register_buffer("grad_ema", Tensor::zeros({dim}));
}
Tensor PowerNorm::forward(const Tensor& x) {
  return ops::power_norm(x, weight, bias, running_phi, grad_ema, is_training(), momentum, eps);
}

NormSpec power_norm_spec() {
  NormSpec spec;
  spec.name = "powernorm";
  spec.description = "PowerNorm: each feature scaled by a running quadratic mean over past batches";
  spec.formula = "y = gamma * x / sqrt(phi_c + eps) + beta, phi_c the running mean of x^2 per feature";
  spec.symbol = "PowerNorm";
  spec.aliases = {"pn", "power_norm"};
  spec.make = [](int64_t dim, float eps) { return std::make_unique<PowerNorm>(dim, eps); };
  spec.reference = [](const NormLayer& layer, const float* x, int64_t rows, int64_t dim) {
    const auto& pn = dynamic_cast<const PowerNorm&>(layer);
    std::vector<float> out(static_cast<size_t>(rows * dim)), rstd(dim);
    std::vector<float> running_phi(pn.running_phi.data(), pn.running_phi.data() + dim);
    kernels::reference::power_norm_forward(out.data(), rstd.data(), running_phi.data(), x, pn.weight.data(),
                                           pn.bias.data(), rows, dim, pn.eps, pn.momentum);
    return out;
  };
  // grad_ema only matters to training's backward; it is loaded so that the state dict matches.
  spec.torch = {{{"weight", "torch.ones(dim)"},
                 {"bias", "torch.zeros(dim)"},
                 {"running_phi", "torch.ones(dim)", false},
                 {"grad_ema", "torch.zeros(dim)", false}},
                "weight * x * torch.rsqrt(running_phi + eps) + bias"};
  spec.variants = {
      {"powernorm", "pre", "PowerNorm: running quadratic-mean statistics per feature, pre placement", "#661100"},
  };
  return spec;
}

}  // namespace normlab::nn
