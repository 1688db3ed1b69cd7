// LayerScale (Touvron et al. 2021, "Going deeper with Image Transformers", CaiT, eq. 4):
//   x + diag(lambda_k) * f(x)      lambda_k a learned (d_model) vector for each sublayer k
// every element 0.1 at init (the paper's value for networks up to 18 blocks deep; deeper ones start
// smaller). Each feature of each sublayer's output gets its own gain, so a block starts close to
// the identity without ReZero's single scalar. The tensors keep CaiT's names, gamma_1 (attention)
// and gamma_2 (feed-forward): layers.N.gamma_1, (d_model).
#include "normlab/nn/residual_registry.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

namespace {

constexpr float kLayerScaleInit = 0.1f;

class LayerScale : public ResidualScheme {
 public:
  explicit LayerScale(int64_t d_model) {
    gamma_1 = register_parameter("gamma_1", Tensor::full({d_model}, kLayerScaleInit));
    gamma_2 = register_parameter("gamma_2", Tensor::full({d_model}, kLayerScaleInit));
  }
  // f (tokens, d_model) times lambda (d_model), broadcast over the tokens.
  Tensor add(const Tensor& x, const Tensor& f, int sublayer) const override {
    return ops::add(x, ops::mul(f, sublayer == 0 ? gamma_1 : gamma_2));
  }
  Tensor gamma_1, gamma_2;
};

}  // namespace

ResidualEntry layer_scale_entry() {
  return {.spec = {.name = "layerscale",
                   .aliases = {"layer_scale", "ls"},
                   .description = "LayerScale: each sublayer's output scaled per feature by a learned lambda",
                   .formula = "x + diag(lambda) * f(x), lambda (d_model) per sublayer, 0.1 at init",
                   .sum = "x + lambda * {}",
                   .note = "LayerScale, lambda = 0.1 at init",
                   .make = [](int64_t d_model) { return std::make_unique<LayerScale>(d_model); }},
          .torch = {{{"gamma_1", "torch.full((dim,), 0.1)"}, {"gamma_2", "torch.full((dim,), 0.1)"}},
                    {"x + gamma_1 * f", "x + gamma_2 * f"}},
          .variants = {{"layerscale", "layernorm", "pre",
                        "pre-LN with LayerScale: x + lambda * f(LN(x)), lambda = 0.1 at init", "#44AA99"}},
          .norm_spelling = ""};
}

}  // namespace normlab::nn
