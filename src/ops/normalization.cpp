// The normalizations, the subject of the project: LayerNorm and RMSNorm per token, BatchNorm and
// PowerNorm per feature across the batch, and DyT (Dynamic Tanh), which normalizes nothing and
// stands in for a norm. The layers that own their parameters are in src/nn/norms/.
#include "normlab/ops.hpp"

#include <fmt/format.h>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "common.hpp"
#include "normlab/autograd.hpp"
#include "normlab/kernels/activations.hpp"
#include "normlab/kernels/batch_norm.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/kernels/power_norm.hpp"
#include "normlab/kernels/rms_norm.hpp"

namespace normlab::ops {

using namespace detail;  // the shared checks and gradient buffers (common.hpp)

namespace {

// A norm node's inputs: x, then gamma and beta where the layer has them, in one allocation.
std::vector<Tensor> norm_inputs(const Tensor& x, const Tensor& gamma, const Tensor& beta) {
  std::vector<Tensor> inputs;
  inputs.reserve(3);
  inputs.push_back(x);
  if (gamma.defined()) inputs.push_back(gamma);
  if (beta.defined()) inputs.push_back(beta);
  return inputs;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& gamma, const Tensor& beta, float eps) {
  const int64_t cols = trailing_cols(x, normalized_shape, "layer_norm");
  check_param(gamma, normalized_shape, "layer_norm", "weight (gamma)");
  check_param(beta, normalized_shape, "layer_norm", "bias (beta)");
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::empty(x.shape());
  const bool grad = needs_grad({&x, &gamma, &beta});
  // Statistics per row (= per token): [rows], i.e. [batch, seq_len] for a [batch, seq_len, d_model]
  // input; row 0 of `stats` the means, row 1 the reciprocal standard deviations. One block from the
  // tensor storage, and only when backward will need them.
  Tensor stats = grad ? Tensor::empty({2, rows}) : Tensor();
  float* mean = grad ? stats.data() : nullptr;
  float* rstd = grad ? stats.data() + rows : nullptr;
  kernels::layer_norm_forward(out.data(), mean, rstd, x.data(), gamma.defined() ? gamma.data() : nullptr,
                              beta.defined() ? beta.data() : nullptr, rows, cols, eps);
  if (!grad) return out;
  std::vector<Tensor> inputs = norm_inputs(x, gamma, beta);
  record(out, "layer_norm", std::move(inputs), [x, gamma, beta, stats, rows, cols](const float* g) {
    kernels::layer_norm_backward(grad_ptr(x), grad_ptr(gamma), grad_ptr(beta), g, x.data(),
                                 gamma.defined() ? gamma.data() : nullptr, stats.data(), stats.data() + rows, rows,
                                 cols);
  });
  return out;
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& gamma, float eps) {
  const int64_t cols = trailing_cols(x, normalized_shape, "rms_norm");
  check_param(gamma, normalized_shape, "rms_norm", "weight (gamma)");
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::empty(x.shape());
  auto rstd = std::make_shared<std::vector<float>>(rows);
  kernels::rms_norm_forward(out.data(), rstd->data(), x.data(), gamma.defined() ? gamma.data() : nullptr, rows, cols,
                            eps);
  if (!needs_grad({&x, &gamma})) return out;
  std::vector<Tensor> inputs = norm_inputs(x, gamma, Tensor());
  record(out, "rms_norm", std::move(inputs), [x, gamma, rstd, rows, cols](const float* g) {
    kernels::rms_norm_backward(grad_ptr(x), grad_ptr(gamma), g, x.data(), gamma.defined() ? gamma.data() : nullptr,
                               rstd->data(), rows, cols);
  });
  return out;
}

namespace {

// The checks of a norm across the batch (BatchNorm, PowerNorm): x is (tokens, features) and each
// per-feature tensor, where given, is (features): the affine weight and bias and the two running
// statistics, named as in the error. Returns the feature count C.
int64_t check_across_batch(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           std::initializer_list<std::pair<const Tensor*, const char*>> statistics) {
  require(x.dim() == 2,
          [&] { return fmt::format("{}: expects (tokens, features), got {}", op, shape_str(x.shape())); });
  const int64_t C = x.size(1);
  check_param(gamma, {C}, op, "weight (gamma)");
  check_param(beta, {C}, op, "bias (beta)");
  for (const auto& [stat, name] : statistics) check_param(*stat, {C}, op, name);
  return C;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor running_mean, Tensor running_var,
                  bool training, float momentum, float eps, kernels::RankSum* ranks) {
  const int64_t C = check_across_batch("batch_norm", x, gamma, beta,
                                       {{&running_mean, "running_mean"}, {&running_var, "running_var"}});
  const int64_t N = x.size(0);
  Tensor out = Tensor::empty(x.shape());
  auto mean = std::make_shared<std::vector<float>>(C);
  auto rstd = std::make_shared<std::vector<float>>(C);
  const float* pg = gamma.defined() ? gamma.data() : nullptr;
  const float* pb = beta.defined() ? beta.data() : nullptr;
  if (training) {
    require(N > 0, "batch_norm: training mode needs at least one token");
    kernels::batch_norm_forward_train(out.data(), mean->data(), rstd->data(),
                                      running_mean.defined() ? running_mean.data() : nullptr,
                                      running_var.defined() ? running_var.data() : nullptr, x.data(), pg, pb, N, C, eps,
                                      momentum, ranks);
  } else {
    require(running_mean.defined() && running_var.defined(), "batch_norm: eval mode needs running statistics");
    kernels::batch_norm_forward_eval(out.data(), x.data(), running_mean.data(), running_var.data(), pg, pb, N, C, eps);
    for (int64_t c = 0; c < C; ++c) {
      (*mean)[c] = running_mean.data()[c];
      (*rstd)[c] = 1.0f / std::sqrt(running_var.data()[c] + eps);
    }
  }
  if (!needs_grad({&x, &gamma, &beta})) return out;
  std::vector<Tensor> inputs = norm_inputs(x, gamma, beta);
  record(out, "batch_norm", std::move(inputs), [x, gamma, beta, mean, rstd, N, C, training, ranks](const float* g) {
    const float* pgam = gamma.defined() ? gamma.data() : nullptr;
    if (training) {
      kernels::batch_norm_backward(grad_ptr(x), grad_ptr(gamma), grad_ptr(beta), g, x.data(), pgam, mean->data(),
                                   rstd->data(), N, C, ranks);
      return;
    }
    // Eval mode: the statistics are constants, so the op is an affine map per feature.
    float* dx = grad_ptr(x);
    float* dgamma = grad_ptr(gamma);
    float* dbeta = grad_ptr(beta);
    const float* xv = x.data();
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c) {
        const float gi = g[i * C + c], rs = (*rstd)[c];
        if (dx) dx[i * C + c] += gi * (pgam ? pgam[c] : 1.0f) * rs;
        if (dgamma) dgamma[c] += gi * (xv[i * C + c] - (*mean)[c]) * rs;
        if (dbeta) dbeta[c] += gi;
      }
  });
  return out;
}

Tensor power_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor running_phi, Tensor grad_ema,
                  bool training, float momentum, float eps) {
  const int64_t C =
      check_across_batch("power_norm", x, gamma, beta, {{&running_phi, "running_phi"}, {&grad_ema, "grad_ema"}});
  const int64_t N = x.size(0);
  require(running_phi.defined() && grad_ema.defined(), "power_norm: needs running_phi and grad_ema");
  Tensor out = Tensor::empty(x.shape());
  auto rstd = std::make_shared<std::vector<float>>(C);
  kernels::power_norm_forward(out.data(), rstd->data(), running_phi.data(), x.data(),
                              gamma.defined() ? gamma.data() : nullptr, beta.defined() ? beta.data() : nullptr, N, C,
                              eps, training ? momentum : 0.0f);
  if (!needs_grad({&x, &gamma, &beta})) return out;
  std::vector<Tensor> inputs = norm_inputs(x, gamma, beta);
  record(out, "power_norm", std::move(inputs), [x, gamma, beta, grad_ema, rstd, N, C, training, momentum](const float* g) {
    // Training: the approximate gradient, and grad_ema moves on (once per backward of this forward).
    Tensor ema = grad_ema;
    kernels::power_norm_backward(grad_ptr(x), grad_ptr(gamma), grad_ptr(beta), training ? ema.data() : nullptr, g,
                                 x.data(), gamma.defined() ? gamma.data() : nullptr, rstd->data(), N, C, momentum);
  });
  return out;
}

Tensor dyt(const Tensor& x, const Tensor& alpha, const Tensor& gamma, const Tensor& beta) {
  require(x.dim() >= 1 && alpha.numel() == 1, "dyt: alpha must be a one-element tensor");
  const int64_t C = x.size(-1), N = C == 0 ? 0 : x.numel() / C;
  check_param(gamma, {C}, "dyt", "weight (gamma)");
  check_param(beta, {C}, "dyt", "bias (beta)");
  require(gamma.defined() && beta.defined(), "dyt: gamma and beta are required");
  Tensor out = Tensor::empty(x.shape());
  kernels::dyt_forward(out.data(), x.data(), alpha.data(), gamma.data(), beta.data(), N, C);
  if (!needs_grad({&x, &alpha, &gamma, &beta})) return out;
  record(out, "dyt", {x, alpha, gamma, beta}, [x, alpha, gamma, beta, N, C](const float* g) {
    kernels::dyt_backward(grad_ptr(x), grad_ptr(alpha), grad_ptr(gamma), grad_ptr(beta), g, x.data(), alpha.data(),
                          gamma.data(), N, C);
  });
  return out;
}

}  // namespace normlab::ops
