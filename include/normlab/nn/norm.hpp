#pragma once
// The normalization layers the project compares. All act on the last dimension of a packed
// (tokens, d_model) matrix — except that BatchNorm's statistics cross tokens, which is the point.
//
//   LayerNorm  per token:   y = gamma * (x - mean_t) / sqrt(var_t + eps) + beta
//   RMSNorm    per token:   y = gamma * x / sqrt(mean_t(x^2) + eps)
//   BatchNorm  per feature: y = gamma * (x - mean_c) / sqrt(var_c + eps) + beta, where mean_c and
//              var_c are over all real tokens of the batch in training and running averages in eval
//   PowerNorm  per feature: y = gamma * x / sqrt(phi_c + eps) + beta, phi_c the running mean of x^2
//              over past batches' real tokens, in training too (Shen et al. 2020, Algorithm 1)
//   DyT        no statistics: y = gamma * tanh(alpha * x) + beta (Zhu et al. 2025)
// Each layer's code is its own file under src/nn/norms/ with its registry entry (norm_registry.hpp);
// a norm added that way (ScaleNorm, docs/tour.md) needs no declaration here.
#include <memory>
#include <string>
#include <vector>

#include "normlab/nn/module.hpp"
#include "normlab/nn/norm_registry.hpp"

namespace normlab::kernels {
class RankSum;  // kernels/batch_norm.hpp
}

namespace normlab::nn {

class NormLayer : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
};

// The rows a registry entry's reference forward (norm_registry.hpp) reads and writes:
// x and y, both (rows, dim).
struct ReferenceRows {
  const float* x;
  float* y;
  int64_t rows, dim;
};

// That reference forward from the plain kernel call on a layer of type Layer,
// forward(const Layer&, ReferenceRows): the cast and the output buffer are written here once.
template <class Layer, class Forward>
ReferenceForward reference_forward(Forward forward) {
  return [forward](const NormLayer& layer, const float* x, int64_t rows, int64_t dim) {
    std::vector<float> y(static_cast<size_t>(rows * dim));
    forward(dynamic_cast<const Layer&>(layer), ReferenceRows{x, y.data(), rows, dim});
    return y;
  };
}

// Like torch.nn.LayerNorm: normalized_shape is the trailing shape; weight/bias have that shape.
class LayerNorm : public NormLayer {
 public:
  explicit LayerNorm(Shape normalized_shape, float eps = 1e-12f, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  Shape normalized_shape;
  float eps;
  Tensor weight, bias;  // gamma (init 1), beta (init 0); undefined without elementwise_affine
};

class RMSNorm : public NormLayer {
 public:
  explicit RMSNorm(int64_t dim, float eps = 1e-12f);
  Tensor forward(const Tensor& x) override;
  float eps;
  Tensor weight;
};

class BatchNorm : public NormLayer {
 public:
  explicit BatchNorm(int64_t dim, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;  // x (tokens, dim); statistics over the tokens
  float eps, momentum;
  Tensor weight, bias, running_mean, running_var;
  kernels::RankSum* ranks = nullptr;  // data-parallel sync BatchNorm: statistics over every rank's tokens
};

// PowerNorm (Shen et al. 2020, Algorithm 1; docs/layernorm.md). momentum is the paper's 1 - alpha.
class PowerNorm : public NormLayer {
 public:
  explicit PowerNorm(int64_t dim, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;  // x (tokens, dim)
  float eps, momentum;
  Tensor weight, bias;
  Tensor running_phi;  // (dim) running quadratic mean psi^2, init 1
  Tensor grad_ema;     // (dim) the backward's running average nu, init 0
};

class DyT : public NormLayer {
 public:
  explicit DyT(int64_t dim, float alpha_init = 0.5f);
  Tensor forward(const Tensor& x) override;
  Tensor alpha, weight, bias;
};

NormKind parse_norm_kind(const std::string& name);  // throws UsageError listing the choices
std::string to_string(NormKind kind);
// True for the kinds that put a normalization layer in each block (not rezero / none).
bool has_norm_layer(NormKind kind);

// The layer for kind (layernorm, rmsnorm, ...: the registry entry's factory) over dim features.
std::unique_ptr<NormLayer> make_norm(NormKind kind, int64_t dim, float eps);

}  // namespace normlab::nn
