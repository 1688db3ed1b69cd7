// PowerNorm over the tokens of a packed (N, C) matrix (Shen et al. 2020, Algorithm 1). The forward
// normalizes with the running statistic, so it is elementwise; only the statistics' updates reduce
// down the columns: each part (a block of rows) sums into its own (C) partial buffer in double,
// and the buffers are added in part order (deterministic at a fixed thread count). Math:
// docs/layernorm.md, "PowerNorm".
#include "normlab/kernels/power_norm.hpp"
#include "isa_kernels.hpp"

#include <cmath>
#include <vector>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {

// total[k] = sum over threads t (in order) of partial[t][k], for k < count.
void add_thread_partials(double* total, const std::vector<double>& partial, int num_threads,
                         size_t count) {  // (count), (threads, count)
  for (size_t k = 0; k < count; k++) {
    double sum = 0.0;
    for (int t = 0; t < num_threads; t++) sum += partial[size_t(t) * count + k];
    total[k] = sum;
  }
}

}  // namespace

void power_norm_forward(float* out, float* rstd, float* running_phi,              // (N, C), (C), (C)
                        const float* inp, const float* gamma, const float* beta,  // (N, C), (C), (C)
                        int64_t N, int64_t C, float eps, float momentum) {
  const size_t num_features = size_t(C);
  for (int64_t c = 0; c < C; c++) rstd[c] = float(1.0 / std::sqrt(double(running_phi[c]) + double(eps)));
  if (N <= 0) return;
  const bool parallel = N * C >= kMinParallelElements;
  const int num_threads = parallel_parts(parallel);  // parts: a partial buffer each
  const bool update = momentum > 0.0f;
  std::vector<double> partial(update ? size_t(num_threads) * num_features : 0, 0.0);  // (threads, C)

  // Normalize with the statistic of the steps before; sum x^2 per feature for the update.
  for_blocks(N, num_threads, [&](int64_t part, int64_t begin, int64_t end) {
    double* sum_sq_thread = update ? partial.data() + size_t(part) * num_features : nullptr;
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;  // (C)
      float* y = out + n * C;        // (C)
      for (int64_t c = 0; c < C; c++) {
        float xhat = x[c] * rstd[c];
        float scaled = gamma != nullptr ? xhat * gamma[c] : xhat;
        y[c] = beta != nullptr ? scaled + beta[c] : scaled;
      }
      if (update)
        for (int64_t c = 0; c < C; c++) sum_sq_thread[c] += double(x[c]) * double(x[c]);
    }
  });
  if (!update) return;
  std::vector<double> sum_sq(num_features);  // (C)
  add_thread_partials(sum_sq.data(), partial, num_threads, num_features);
  for (int64_t c = 0; c < C; c++) {
    const double batch_phi = sum_sq[size_t(c)] / double(N);
    running_phi[c] = float((1.0 - double(momentum)) * double(running_phi[c]) + double(momentum) * batch_phi);
  }
}

void power_norm_backward(float* dinp, float* dgamma, float* dbeta, float* grad_ema,  // (N, C), (C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,    // (N, C), (N, C), (C)
                         const float* rstd,                                          // (C)
                         int64_t N, int64_t C, float momentum) {
  if (N <= 0) return;
  const bool parallel = N * C >= kMinParallelElements;
  const int num_threads = parallel_parts(parallel);  // parts: three partial sums each
  const size_t stride = size_t(C);
  // Three column sums per thread: dy, dy * xhat and xhat^2 (dbeta, dgamma, and grad_ema's Gamma).
  std::vector<double> partial(size_t(num_threads) * 3 * stride, 0.0);  // (threads, 3, C)

  for_blocks(N, num_threads, [&](int64_t part, int64_t begin, int64_t end) {
    double* sums = partial.data() + size_t(part) * 3 * stride;
    double* dy_thread = sums;
    double* dy_xhat_thread = sums + stride;
    double* xhat_sq_thread = sums + 2 * stride;
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;    // (C)
      const float* dy = dout + n * C;  // (C)
      for (int64_t c = 0; c < C; c++) {
        float xhat = x[c] * rstd[c];
        dy_thread[c] += double(dy[c]);
        dy_xhat_thread[c] += double(dy[c] * xhat);
        xhat_sq_thread[c] += double(xhat * xhat);
      }
      if (dinp == nullptr) continue;
      float* dx = dinp + n * C;  // (C)
      for (int64_t c = 0; c < C; c++) {
        float xhat = x[c] * rstd[c];
        float g = gamma != nullptr ? dy[c] * gamma[c] : dy[c];
        // grad_ema as it was before this step: the paper's nu_{t-1}
        dx[c] += grad_ema != nullptr ? rstd[c] * (g - grad_ema[c] * xhat) : rstd[c] * g;
      }
    }
  });
  std::vector<double> sums(3 * stride);  // (3, C)
  add_thread_partials(sums.data(), partial, num_threads, 3 * stride);
  for (int64_t c = 0; c < C; c++) {
    const size_t k = size_t(c);
    if (dbeta != nullptr) dbeta[c] += float(sums[k]);
    if (dgamma != nullptr) dgamma[c] += float(sums[stride + k]);
    if (grad_ema == nullptr) continue;
    const double weight = gamma != nullptr ? double(gamma[c]) : 1.0;
    const double xhat_sq_mean = sums[2 * stride + k] / double(N);      // the paper's Gamma
    const double g_xhat_mean = weight * sums[stride + k] / double(N);  // the paper's Lambda
    const double m = double(momentum);
    grad_ema[c] = float(double(grad_ema[c]) * (1.0 - m * xhat_sq_mean) + m * g_xhat_mean);
  }
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
