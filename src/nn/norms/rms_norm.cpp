// RMSNorm (Zhang & Sennrich 2019): LayerNorm without the centring and without beta, per token
//   y = gamma * x / sqrt(mean_t(x^2) + eps)
#include "normlab/kernels/reference/rms_norm.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

RMSNorm::RMSNorm(int64_t dim, float eps_) : eps(eps_) { weight = register_parameter("weight", Tensor::ones({dim})); }
Tensor RMSNorm::forward(const Tensor& x) { return ops::rms_norm(x, {x.size(-1)}, weight, eps); }

NormEntry rms_norm_entry() {
  return {.spec = {.name = "rmsnorm",
                   .symbol = "RMSNorm",
                   .aliases = {"rms", "rms_norm"},
                   .description = "RMSNorm: each token scaled by its root mean square, no centring",
                   .formula = "y = gamma * x / sqrt(mean_t(x^2) + eps), over each token's d_model features",
                   .reference = reference_forward<RMSNorm>([](const RMSNorm& rms, ReferenceRows r) {
                     kernels::reference::rms_norm_forward(r.y, nullptr, r.x, rms.weight.data(), r.rows, r.dim, rms.eps);
                   }),
                   .make = [](int64_t dim, float eps) { return std::make_unique<RMSNorm>(dim, eps); }},
          .torch = {{{"weight", "torch.ones(dim)"}}, "weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)"},
          .variants = {{"rmsnorm", "pre", "RMSNorm (no centering), pre placement", "#009E73"},
                       {"post-rmsnorm", "post", "RMSNorm, post placement", "#117733"}}};
}

}  // namespace normlab::nn
