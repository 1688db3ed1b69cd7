#include "normlab/nn/norm.hpp"

#include <fmt/format.h>

#include "normlab/error.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

LayerNorm::LayerNorm(Shape shape, float eps_, bool elementwise_affine) : normalized_shape(std::move(shape)), eps(eps_) {
  if (elementwise_affine) {
    weight = register_parameter("weight", Tensor::ones(normalized_shape));
    bias = register_parameter("bias", Tensor::zeros(normalized_shape));
  }
}
Tensor LayerNorm::forward(const Tensor& x) { return ops::layer_norm(x, normalized_shape, weight, bias, eps); }

RMSNorm::RMSNorm(int64_t dim, float eps_) : eps(eps_) { weight = register_parameter("weight", Tensor::ones({dim})); }
Tensor RMSNorm::forward(const Tensor& x) { return ops::rms_norm(x, {x.size(-1)}, weight, eps); }

BatchNorm::BatchNorm(int64_t dim, float eps_, float momentum_) : eps(eps_), momentum(momentum_) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
  running_mean = register_buffer("running_mean", Tensor::zeros({dim}));
  running_var = register_buffer("running_var", Tensor::ones({dim}));
}
Tensor BatchNorm::forward(const Tensor& x) {
  return ops::batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps, ranks);
}

PowerNorm::PowerNorm(int64_t dim, float eps_, float momentum_) : eps(eps_), momentum(momentum_) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
  running_phi = register_buffer("running_phi", Tensor::ones({dim}));
  grad_ema = register_buffer("grad_ema", Tensor::zeros({dim}));
}
Tensor PowerNorm::forward(const Tensor& x) {
  return ops::power_norm(x, weight, bias, running_phi, grad_ema, is_training(), momentum, eps);
}

DyT::DyT(int64_t dim, float alpha_init) {
  alpha = register_parameter("alpha", Tensor::full({1}, alpha_init));
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}
Tensor DyT::forward(const Tensor& x) { return ops::dyt(x, alpha, weight, bias); }

namespace {
constexpr std::pair<NormKind, const char*> kNormNames[] = {
    {NormKind::layernorm, "layernorm"}, {NormKind::rmsnorm, "rmsnorm"}, {NormKind::batchnorm, "batchnorm"},
    {NormKind::powernorm, "powernorm"}, {NormKind::dyt, "dyt"},             {NormKind::rezero, "rezero"},   {NormKind::none, "none"}};
}

NormKind parse_norm_kind(const std::string& name) {
  for (auto [kind, text] : kNormNames)
    if (name == text) return kind;
  throw UsageError(fmt::format("unknown norm '{}' (choose layernorm, rmsnorm, batchnorm, powernorm, dyt, rezero, none)", name));
}

std::string to_string(NormKind kind) {
  for (auto [k, text] : kNormNames)
    if (k == kind) return text;
  return "?";
}

bool has_norm_layer(NormKind kind) { return kind != NormKind::rezero && kind != NormKind::none; }

std::unique_ptr<NormLayer> make_norm(NormKind kind, int64_t dim, float eps) {
  switch (kind) {
    case NormKind::layernorm: return std::make_unique<LayerNorm>(Shape{dim}, eps);
    case NormKind::rmsnorm: return std::make_unique<RMSNorm>(dim, eps);
    case NormKind::batchnorm: return std::make_unique<BatchNorm>(dim, eps);
    case NormKind::powernorm: return std::make_unique<PowerNorm>(dim, eps);
    case NormKind::dyt: return std::make_unique<DyT>(dim);
    default: throw UsageError(fmt::format("norm '{}' has no normalization layer", to_string(kind)));
  }
}

}  // namespace normlab::nn
