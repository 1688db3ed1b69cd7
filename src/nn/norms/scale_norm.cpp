// ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears", eq. 8): each token is projected
// onto the sphere of radius g, g ONE learned scalar initialised to sqrt(d_model):
//   y = g * x / sqrt(||x||^2 + eps)       ||x|| the Euclidean norm over the token's d_model features
// The paper clamps instead, g * x / max(||x||, eps); eps inside the square root is the same map for
// any token with ||x||^2 >> eps and keeps the layer differentiable at x = 0 (as RMSNorm does).
//
// No new kernel: x / sqrt(||x||^2 + eps) = rms_norm(x, eps / d) / sqrt(d), so the forward is the
// RMSNorm op without gamma, times one scalar, and autograd derives the backward from the two ops.
#include <cmath>

#include "normlab/nn/norm.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

namespace {

class ScaleNorm : public NormLayer {
 public:
  ScaleNorm(int64_t dim, float eps_) : dim(dim), eps(eps_) {
    g = register_parameter("g", Tensor::full({1}, std::sqrt(static_cast<float>(dim))));
  }
  Tensor forward(const Tensor& x) override {  // x (tokens, dim)
    const float inv_sqrt_dim = 1.0f / std::sqrt(static_cast<float>(dim));
    Tensor unit = ops::rms_norm(x, {dim}, Tensor(), eps / static_cast<float>(dim));  // sqrt(dim) * x / ||x||
    return ops::mul(unit, ops::mul_scalar(g, inv_sqrt_dim));
  }
  int64_t dim;
  float eps;
  Tensor g;  // (1)
};

// The plain loop: one row at a time, the sum of squares in double.
void scale_norm_reference(const ScaleNorm& norm, ReferenceRows io) {
  const double g = norm.g.data()[0];
  const int64_t dim = io.dim;
  for (int64_t r = 0; r < io.rows; ++r) {
    const float* row = io.x + r * dim;
    double sum_sq = 0.0;
    for (int64_t c = 0; c < dim; ++c) sum_sq += double(row[c]) * double(row[c]);
    const double scale = g / std::sqrt(sum_sq + double(norm.eps));
    for (int64_t c = 0; c < dim; ++c) io.y[r * dim + c] = static_cast<float>(row[c] * scale);
  }
}

}  // namespace

NormEntry scale_norm_entry() {
  return {.spec = {.name = "scalenorm",
                   .symbol = "ScaleNorm",
                   .aliases = {"scale_norm", "sn"},
                   .description = "ScaleNorm: each token scaled to length g, one learned scalar g (init sqrt(d_model))",
                   .formula = "y = g * x / sqrt(||x||^2 + eps), ||x|| over each token's d_model features, g one scalar",
                   .reference = reference_forward<ScaleNorm>(scale_norm_reference),
                   .make = [](int64_t dim, float eps) { return std::make_unique<ScaleNorm>(dim, eps); }},
          .torch = {{{"g", "torch.full((1,), math.sqrt(dim))"}},
                    "g * x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)"},
          .variants = {{"scalenorm", "pre", "ScaleNorm: each token scaled to one learned length g, pre placement",
                        "#332288"},
                       {"post-scalenorm", "post", "ScaleNorm, post placement", "#AA4499"}}};
}

}  // namespace normlab::nn
