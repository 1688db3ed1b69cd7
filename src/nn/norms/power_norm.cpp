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

// The reference runs training mode on a copy of running_phi; grad_ema only matters to training's
// backward, and is loaded into PyTorch so that the state dict matches.
NormEntry power_norm_entry() {
  return {.spec = {.name = "powernorm",
                   .symbol = "PowerNorm",
                   .aliases = {"pn", "power_norm"},
                   .description = "PowerNorm: each feature scaled by a running quadratic mean over past batches",
                   .formula = "y = gamma * x / sqrt(phi_c + eps) + beta, phi_c the running mean of x^2 per feature",
                   .reference = reference_forward<PowerNorm>([](const PowerNorm& pn, ReferenceRows r) {
                     std::vector<float> rstd(r.dim), running_phi(pn.running_phi.data(), pn.running_phi.data() + r.dim);
                     kernels::reference::power_norm_forward(r.y, rstd.data(), running_phi.data(), r.x, pn.weight.data(),
                                                            pn.bias.data(), r.rows, r.dim, pn.eps, pn.momentum);
                   }),
                   .make = [](int64_t dim, float eps) { return std::make_unique<PowerNorm>(dim, eps); }},
          .torch = {{{"weight", "torch.ones(dim)"},
                     {"bias", "torch.zeros(dim)"},
                     {"running_phi", "torch.ones(dim)", false},
                     {"grad_ema", "torch.zeros(dim)", false}},
                    "weight * x * torch.rsqrt(running_phi + eps) + bias"},
          .variants = {{"powernorm", "pre", "PowerNorm: running quadratic-mean statistics per feature, pre placement",
                        "#661100"}}};
}

}  // namespace normlab::nn
