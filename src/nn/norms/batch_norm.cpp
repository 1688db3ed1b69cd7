// BatchNorm over tokens: per feature c, statistics over every real token of the batch in training
// (running averages in eval), which is what makes a token's output depend on its batch-mates:
//   y = gamma * (x - mean_c) / sqrt(var_c + eps) + beta
#include "normlab/kernels/reference/batch_norm.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

BatchNorm::BatchNorm(int64_t dim, float eps_, float momentum_) : eps(eps_), momentum(momentum_) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
  running_mean = register_buffer("running_mean", Tensor::zeros({dim}));
  running_var = register_buffer("running_var", Tensor::ones({dim}));
}
Tensor BatchNorm::forward(const Tensor& x) {
  return ops::batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps, ranks);
}

// The reference runs training mode on copies of the running statistics; the PyTorch mapping is eval
// mode (the running statistics), (B, L, C) broadcasting over the features.
NormEntry batch_norm_entry() {
  return {.spec = {.name = "batchnorm",
                   .symbol = "BN",
                   .aliases = {"bn", "batch_norm"},
                   .description =
                       "BatchNorm: each feature normalized over the batch's real tokens (running averages in eval)",
                   .formula = "y = gamma * (x - mean_c) / sqrt(var_c + eps) + beta, "
                              "statistics per feature over the batch's tokens",
                   .reference = reference_forward<BatchNorm>([](const BatchNorm& bn, ReferenceRows r) {
                     std::vector<float> mean(r.dim), rstd(r.dim);
                     std::vector<float> running_mean(bn.running_mean.data(), bn.running_mean.data() + r.dim);
                     std::vector<float> running_var(bn.running_var.data(), bn.running_var.data() + r.dim);
                     kernels::reference::batch_norm_forward_train(r.y, mean.data(), rstd.data(), running_mean.data(),
                                                                  running_var.data(), r.x, bn.weight.data(),
                                                                  bn.bias.data(), r.rows, r.dim, bn.eps, bn.momentum,
                                                                  nullptr);
                   }),
                   .make = [](int64_t dim, float eps) { return std::make_unique<BatchNorm>(dim, eps); }},
          .torch = {{{"weight", "torch.ones(dim)"},
                     {"bias", "torch.zeros(dim)"},
                     {"running_mean", "torch.zeros(dim)", false},
                     {"running_var", "torch.ones(dim)", false}},
                    "weight * (x - running_mean) * torch.rsqrt(running_var + eps) + bias"},
          .variants = {{"batchnorm", "pre", "BatchNorm over the batch's real tokens, pre placement", "#CC79A7"},
                       {"post-batchnorm", "post", "BatchNorm, post placement", "#882255"}}};
}

}  // namespace normlab::nn
