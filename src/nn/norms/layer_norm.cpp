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

NormEntry layer_norm_entry() {
  return {.spec = {.name = "layernorm",
                   .symbol = "LN",
                   .aliases = {"ln", "layer_norm"},
                   .description = "LayerNorm: each token centred and scaled by its own mean and variance",
                   .formula = "y = gamma * (x - mean_t) / sqrt(var_t + eps) + beta, over each token's d_model features",
                   .reference = reference_forward<LayerNorm>([](const LayerNorm& ln, ReferenceRows r) {
                     kernels::reference::layer_norm_forward(r.y, nullptr, nullptr, r.x, ln.weight.data(),
                                                            ln.bias.data(), r.rows, r.dim, ln.eps);
                   }),
                   .make = [](int64_t dim, float eps) { return std::make_unique<LayerNorm>(Shape{dim}, eps); }},
          .torch = {{{"weight", "torch.ones(dim)"}, {"bias", "torch.zeros(dim)"}},
                    "torch.nn.functional.layer_norm(x, (dim,), weight, bias, eps)"},
          .variants = {{"post-ln", "post", "LayerNorm after the residual sum (original Transformer)", "#D55E00"},
                       {"pre-ln", "pre", "LayerNorm on each sublayer's input, plus a final LayerNorm", "#0072B2"}}};
}

}  // namespace normlab::nn
