// RMSNorm (Zhang & Sennrich 2019): LayerNorm without the centring and without beta, per token
//   y = gamma * x / sqrt(mean_t(x^2) + eps)
#include "normlab/kernels/reference/rms_norm.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

RMSNorm::RMSNorm(int64_t dim, float eps_) : eps(eps_) { weight = register_parameter("weight", Tensor::ones({dim})); }
Tensor RMSNorm::forward(const Tensor& x) { return ops::rms_norm(x, {x.size(-1)}, weight, eps); }

NormSpec rms_norm_spec() {
  NormSpec spec;
  spec.name = "rmsnorm";
  spec.description = "RMSNorm: each token scaled by its root mean square, no centring";
  spec.formula = "y = gamma * x / sqrt(mean_t(x^2) + eps), over each token's d_model features";
  spec.symbol = "RMSNorm";
  spec.aliases = {"rms", "rms_norm"};
  spec.make = [](int64_t dim, float eps) { return std::make_unique<RMSNorm>(dim, eps); };
  spec.reference = [](const NormLayer& layer, const float* x, int64_t rows, int64_t dim) {
    const auto& rms = dynamic_cast<const RMSNorm&>(layer);
    std::vector<float> out(static_cast<size_t>(rows * dim));
    kernels::reference::rms_norm_forward(out.data(), nullptr, x, rms.weight.data(), rows, dim, rms.eps);
    return out;
  };
  spec.torch = {{{"weight", "torch.ones(dim)"}}, "weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)"};
  spec.variants = {
      {"rmsnorm", "pre", "RMSNorm (no centering), pre placement", "#009E73"},
      {"post-rmsnorm", "post", "RMSNorm, post placement", "#117733"},
  };
  return spec;
}

}  // namespace normlab::nn
