// LayerNorm (Ba et al. 2016), like torch.nn.LayerNorm: per token,
//   y = gamma * (x - mean_t) / sqrt(var_t + eps) + beta
// The fast kernel is kernels/layer_norm.hpp; the plain one kernels/reference/layer_norm.hpp.
#include "normlab/kernels/reference/layer_norm.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

LayerNorm::LayerNorm(Shape shape, float eps_, bool elementwise_affine) : normalized_shape(std::move(shape)), eps(eps_) {
  if (elementwise_affine) {
    weight = register_parameter("weight", Tensor::ones(normalized_shape));
    bias = register_parameter("bias", Tensor::zeros(normalized_shape));
  }
}
Tensor LayerNorm::forward(const Tensor& x) { return ops::layer_norm(x, normalized_shape, weight, bias, eps); }

NormSpec layer_norm_spec() {
  NormSpec spec;
  spec.name = "layernorm";
  spec.description = "LayerNorm: each token centred and scaled by its own mean and variance";
  spec.formula = "y = gamma * (x - mean_t) / sqrt(var_t + eps) + beta, statistics over each token's d_model features";
  spec.symbol = "LN";
  spec.aliases = {"ln", "layer_norm"};
  spec.make = [](int64_t dim, float eps) { return std::make_unique<LayerNorm>(Shape{dim}, eps); };
  spec.reference = [](const NormLayer& layer, const float* x, int64_t rows, int64_t dim) {
    const auto& ln = dynamic_cast<const LayerNorm&>(layer);
    std::vector<float> out(static_cast<size_t>(rows * dim));
    kernels::reference::layer_norm_forward(out.data(), nullptr, nullptr, x, ln.weight.data(), ln.bias.data(), rows, dim,
                                           ln.eps);
    return out;
  };
  spec.torch = {{{"weight", "torch.ones(dim)"}, {"bias", "torch.zeros(dim)"}},
                "torch.nn.functional.layer_norm(x, (dim,), weight, bias, eps)"};
  spec.variants = {
      {"post-ln", "post", "LayerNorm after the residual sum (original Transformer)", "#D55E00"},
      {"pre-ln", "pre", "LayerNorm on each sublayer's input, plus a final LayerNorm", "#0072B2"},
  };
  return spec;
}

}  // namespace normlab::nn
