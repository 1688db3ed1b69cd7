// BatchNorm over the tokens of a packed (N, C) matrix. Statistics are per feature (a column), so
// every reduction runs down the columns: each thread sums its block of rows into its own (C)
// partial buffer in double, and the buffers are added in thread order (deterministic at a fixed
// thread count). Math: docs/layernorm.md, "BatchNorm".
#include "normlab/kernels/batch_norm.hpp"
#include "isa_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "normlab/parallel.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {

// data-parallel: sums (count) and the token count replaced by their totals over all ranks.
double sum_over_ranks(RankSum* ranks, double* sums, int64_t count, int64_t tokens) {
  if (ranks == nullptr) return double(tokens);
  std::vector<double> buffer(sums, sums + count);
  buffer.push_back(double(tokens));
  ranks->sum(buffer.data(), count + 1);
  std::copy(buffer.begin(), buffer.end() - 1, sums);
  return buffer.back();
}

// total[c] = sum over threads t (in order) of partial[t][c]; then partial is zeroed for reuse.
void combine_partials(double* total, std::vector<double>& partial, int num_threads, int64_t C) {  // (C), (threads, C)
  for (int64_t c = 0; c < C; c++) {
    double sum = 0.0;
    for (int t = 0; t < num_threads; t++) sum += partial[size_t(t) * size_t(C) + size_t(c)];
    total[c] = sum;
  }
  for (auto& v : partial) v = 0.0;
}

}  // namespace

void batch_norm_forward_train(float* out, float* mean, float* rstd,                     // (N, C), (C), (C)
                              float* running_mean, float* running_var,                  // (C), (C)
                              const float* inp, const float* gamma, const float* beta,  // (N, C), (C), (C)
                              int64_t N, int64_t C, float eps, float momentum, RankSum* ranks) {
  if (N <= 0) return;
  const bool parallel = N * C >= kMinParallelElements;
  const int num_threads = parallel_parts(parallel);  // parts: a partial buffer each
  const size_t num_features = size_t(C);
  std::vector<double> partial(size_t(num_threads) * num_features, 0.0);   // (threads, C)
  std::vector<double> batch_mean(num_features), batch_var(num_features);  // (C), (C)
  std::vector<float> mean_hi(num_features), mean_lo(num_features), rstd_f(num_features);

  // Pass 1: the mean of every feature over all N tokens.
  for_blocks(N, num_threads, [&](int64_t part, int64_t begin, int64_t end) {
    double* sum_thread = partial.data() + size_t(part) * size_t(C);
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;  // (C)
      for (int64_t c = 0; c < C; c++) sum_thread[c] += double(x[c]);
    }
  });
  combine_partials(batch_mean.data(), partial, num_threads, C);
  const double total_tokens = sum_over_ranks(ranks, batch_mean.data(), C, N);
  for (int64_t c = 0; c < C; c++) batch_mean[size_t(c)] /= total_tokens;

  // Pass 2: biased variance about that mean (two-pass, like LayerNorm).
  for_blocks(N, num_threads, [&](int64_t part, int64_t begin, int64_t end) {
    double* sum_thread = partial.data() + size_t(part) * size_t(C);
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;  // (C)
      for (int64_t c = 0; c < C; c++) {
        double deviation = double(x[c]) - batch_mean[size_t(c)];
        sum_thread[c] += deviation * deviation;
      }
    }
  });
  combine_partials(batch_var.data(), partial, num_threads, C);
  sum_over_ranks(ranks, batch_var.data(), C, N);

  for (int64_t c = 0; c < C; c++) {
    const size_t k = size_t(c);
    const double sum_squared_deviation = batch_var[k];
    batch_var[k] = sum_squared_deviation / total_tokens;
    const double feature_rstd = 1.0 / std::sqrt(batch_var[k] + double(eps));
    mean[c] = float(batch_mean[k]);
    rstd[c] = float(feature_rstd);
    // Split the mean so x - mean keeps its low bits in float (see layer_norm.cpp).
    mean_hi[k] = float(batch_mean[k]);
    mean_lo[k] = float(batch_mean[k] - double(mean_hi[k]));
    rstd_f[k] = float(feature_rstd);
    // PyTorch's running statistics: the variance an unbiased estimator would give (N - 1).
    if (running_mean != nullptr) {
      running_mean[c] = float((1.0 - double(momentum)) * double(running_mean[c]) + double(momentum) * batch_mean[k]);
    }
    if (running_var != nullptr && total_tokens > 1) {
      const double unbiased_var = sum_squared_deviation / (total_tokens - 1.0);
      running_var[c] = float((1.0 - double(momentum)) * double(running_var[c]) + double(momentum) * unbiased_var);
    }
  }

  // Normalize: elementwise, any order.
  parallel_for(N, parallel, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;  // (C)
      float* y = out + n * C;        // (C)
      for (int64_t c = 0; c < C; c++) {
        float xhat = ((x[c] - mean_hi[size_t(c)]) - mean_lo[size_t(c)]) * rstd_f[size_t(c)];
        float scaled = gamma != nullptr ? xhat * gamma[c] : xhat;
        y[c] = beta != nullptr ? scaled + beta[c] : scaled;
      }
    }
  });
}

void batch_norm_forward_eval(float* out, const float* inp,                         // (N, C), (N, C)
                             const float* running_mean, const float* running_var,  // (C), (C)
                             const float* gamma, const float* beta,                // (C), (C)
                             int64_t N, int64_t C, float eps) {
  // The statistics are constants now: y = x * scale + shift per feature.
  const size_t num_features = size_t(C);
  std::vector<float> rstd(num_features);
  for (int64_t c = 0; c < C; c++) rstd[size_t(c)] = float(1.0 / std::sqrt(double(running_var[c]) + double(eps)));
  parallel_for(N, N * C >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;  // (C)
      float* y = out + n * C;        // (C)
      for (int64_t c = 0; c < C; c++) {
        float xhat = (x[c] - running_mean[c]) * rstd[size_t(c)];
        float scaled = gamma != nullptr ? xhat * gamma[c] : xhat;
        y[c] = beta != nullptr ? scaled + beta[c] : scaled;
      }
    }
  });
}

// The LayerNorm derivation with rows and columns swapped: for one feature, the N tokens play the
// role of a row's cols, so with g = dout * gamma and xhat = (x - mean) * rstd,
//   dx = rstd * (g - mean_N(g) - xhat * mean_N(g * xhat))
// where mean_N(g) = gamma * dbeta_batch / N and mean_N(g * xhat) = gamma * dgamma_batch / N: the
// parameter gradients of this batch are exactly the two column sums the input gradient needs.
void batch_norm_backward(float* dinp, float* dgamma, float* dbeta,                 // (N, C), (C), (C)
                         const float* dout, const float* inp, const float* gamma,  // (N, C), (N, C), (C)
                         const float* mean, const float* rstd,                     // (C), (C)
                         int64_t N, int64_t C, RankSum* ranks) {
  if (N <= 0) return;
  const bool parallel = N * C >= kMinParallelElements;
  const int num_threads = parallel_parts(parallel);  // parts: a partial buffer each
  const size_t stride = size_t(C);
  // Three column sums per thread: dout, dout * xhat0 and xhat0, where xhat0 uses the float mean.
  // As in layer_norm_backward, xhat0 = xhat + shift with shift = mean_N(xhat0), because the true
  // xhat of a feature sums to zero over the batch.
  std::vector<double> partial(size_t(num_threads) * 3 * stride, 0.0);  // (threads, 3, C)
  std::vector<double> sum_dy(stride), sum_dy_xhat0(stride), sum_xhat0(stride);

  for_blocks(N, num_threads, [&](int64_t part, int64_t begin, int64_t end) {
    double* sums = partial.data() + size_t(part) * 3 * stride;
    double* dy_thread = sums;
    double* dy_xhat_thread = sums + stride;
    double* xhat_thread = sums + 2 * stride;
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;    // (C)
      const float* dy = dout + n * C;  // (C)
      for (int64_t c = 0; c < C; c++) {
        float xhat0 = (x[c] - mean[c]) * rstd[c];
        dy_thread[c] += double(dy[c]);
        dy_xhat_thread[c] += double(dy[c] * xhat0);
        xhat_thread[c] += double(xhat0);
      }
    }
  });
  for (int64_t c = 0; c < C; c++) {
    double a = 0.0, b = 0.0, s = 0.0;
    for (int t = 0; t < num_threads; t++) {
      const double* sums = partial.data() + size_t(t) * 3 * stride;
      a += sums[c];
      b += sums[stride + size_t(c)];
      s += sums[2 * stride + size_t(c)];
    }
    sum_dy[size_t(c)] = a;
    sum_dy_xhat0[size_t(c)] = b;
    sum_xhat0[size_t(c)] = s;
  }
  // data-parallel: the input gradient needs the column sums over all ranks' tokens; dgamma and dbeta
  // keep this rank's (local_*), the gradient reduction adds them up.
  const std::vector<double> local_dy = sum_dy, local_dy_xhat0 = sum_dy_xhat0;
  double total_tokens = double(N);
  if (ranks != nullptr) {
    std::vector<double> sums(3 * stride);
    std::copy(sum_dy.begin(), sum_dy.end(), sums.begin());
    std::copy(sum_dy_xhat0.begin(), sum_dy_xhat0.end(), sums.begin() + C);
    std::copy(sum_xhat0.begin(), sum_xhat0.end(), sums.begin() + 2 * C);
    total_tokens = sum_over_ranks(ranks, sums.data(), 3 * C, N);
    std::copy(sums.begin(), sums.begin() + C, sum_dy.begin());
    std::copy(sums.begin() + C, sums.begin() + 2 * C, sum_dy_xhat0.begin());
    std::copy(sums.begin() + 2 * C, sums.end(), sum_xhat0.begin());
  }

  std::vector<float> shift(stride), mean_g(stride), mean_gxhat(stride);
  for (int64_t c = 0; c < C; c++) {
    const size_t k = size_t(c);
    const double feature_shift = sum_xhat0[k] / total_tokens;
    const double sum_dy_xhat = sum_dy_xhat0[k] - feature_shift * sum_dy[k];
    const double weight = gamma != nullptr ? double(gamma[c]) : 1.0;
    shift[k] = float(feature_shift);
    mean_g[k] = float(weight * sum_dy[k] / total_tokens);
    mean_gxhat[k] = float(weight * sum_dy_xhat / total_tokens);
    if (dgamma != nullptr) dgamma[c] += float(local_dy_xhat0[k] - feature_shift * local_dy[k]);
    if (dbeta != nullptr) dbeta[c] += float(local_dy[k]);
  }
  if (dinp == nullptr) return;

  parallel_for(N, parallel, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;    // (C)
      const float* dy = dout + n * C;  // (C)
      float* dx = dinp + n * C;        // (C)
      for (int64_t c = 0; c < C; c++) {
        float xhat = (x[c] - mean[c]) * rstd[c] - shift[size_t(c)];
        float g = gamma != nullptr ? dy[c] * gamma[c] : dy[c];
        dx[c] += rstd[c] * ((g - mean_g[size_t(c)]) - xhat * mean_gxhat[size_t(c)]);
      }
    }
  });
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
