// LayerNorm forward/backward on raw arrays. Math and derivation: docs/layernorm.md.
//
// Precision plan: each row's statistics (mean, variance, and the two row means of the backward)
// are accumulated in double; the elementwise work (normalize, dx) is float and vectorizes. Sums
// over a row keep kLanes independent partial sums, each added in index order, then combined in lane
// order: the compiler can put the lanes in vector registers (so the loop vectorizes without
// -ffast-math), and the rounding of a row depends only on the row's values, not on its address,
// its neighbours or the thread that ran it.
#include "normlab/kernels/layer_norm.hpp"
#include "isa_kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {

// Independent partial sums per row reduction: 16 doubles = two AVX-512 or four AVX2 registers. The
// same 16 on every path, so the rounding does not depend on the vector width.
constexpr int kLanes = 16;
// Below this many elements a call runs on one thread: starting a team costs more than it saves.
constexpr int64_t kMinParallelElements = int64_t{1} << 15;

// Pairwise, in a fixed order: lane l + lane l+8, then halves again, down to one number. The lanes
// are only read here: reducing them in place makes GCC keep half of them in memory inside the
// summing loops.
double sum_lanes(const double* lanes) {  // lanes: (kLanes)
  double pairs[kLanes / 2];
  for (int l = 0; l < kLanes / 2; l++) pairs[l] = lanes[l] + lanes[l + kLanes / 2];
  for (int width = kLanes / 4; width >= 1; width /= 2) {
    for (int l = 0; l < width; l++) pairs[l] += pairs[l + width];
  }
  return pairs[0];
}

// Software prefetch of the 64-byte line holding p (16 floats). The passes over a row that already
// sits in L1 are pure arithmetic, and without help the memory bus idles during them; asking for the
// next row's lines (and the lines this row will write) while the first pass streams keeps DRAM busy.
inline void prefetch_for_read(const float* p) { __builtin_prefetch(p, 0, 3); }
inline void prefetch_for_write(float* p) { __builtin_prefetch(p, 1, 3); }

// sum_i x[i], in double; prefetches next_x (read) and y (write) along the way.
double row_sum(const float* x, int64_t n,        // x: (n)
               const float* next_x, float* y) {  // (n), (n): only prefetched
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {  // kLanes floats = one cache line
    prefetch_for_read(next_x + i);
    prefetch_for_write(y + i);
    // The prefetch calls make GCC give up on this loop nest; simd asks for the lanes loop anyway
    // (lanes are independent: no reordering of any sum).
#pragma omp simd
    for (int l = 0; l < kLanes; l++) lanes[l] += double(x[i + l]);
  }
  double total = sum_lanes(lanes);
  for (; i < n; i++) total += double(x[i]);
  return total;
}

// sum_i (x[i] - center)^2, in double. This is the second pass of the two-pass variance: the
// deviations are formed before squaring, so a row with mean 1e4 and std 1 loses nothing, where
// E[x^2] - E[x]^2 would subtract two numbers near 1e8 and keep garbage.
double row_sum_squared_deviation(const float* x, int64_t n, double center) {  // x: (n)
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; l++) {
      double deviation = double(x[i + l]) - center;
      lanes[l] += deviation * deviation;
    }
  }
  double total = sum_lanes(lanes);
  for (; i < n; i++) {
    double deviation = double(x[i]) - center;
    total += deviation * deviation;
  }
  return total;
}

// y = gamma * xhat + beta for one row, in float (gamma, beta may be nullptr). x - mean is formed
// as (x - mean_hi) - mean_lo with mean = mean_hi + mean_lo to double precision: x - mean_hi is
// exact when x is near the mean (Sterbenz lemma), so a row with mean 1e4 keeps the precision of its
// deviations, where float(mean) alone would be off by up to 5e-4.
void normalize_row(float* __restrict y,                                          // (cols)
                   const float* __restrict x,                                    // (cols)
                   const float* __restrict gamma, const float* __restrict beta,  // (cols), (cols)
                   int64_t cols, double mean, double rstd) {
  const float mean_hi = float(mean);
  const float mean_lo = float(mean - double(mean_hi));
  const float rstd_f = float(rstd);
  if (gamma != nullptr && beta != nullptr) {
    for (int64_t i = 0; i < cols; i++) {
      float xhat = ((x[i] - mean_hi) - mean_lo) * rstd_f;
      y[i] = xhat * gamma[i] + beta[i];
    }
  } else {
    for (int64_t i = 0; i < cols; i++) {
      float xhat = ((x[i] - mean_hi) - mean_lo) * rstd_f;
      float scaled = gamma != nullptr ? xhat * gamma[i] : xhat;
      y[i] = beta != nullptr ? scaled + beta[i] : scaled;
    }
  }
}

}  // namespace

namespace {

// One row of the forward: y = LN(x), mean and rstd of the row written where not nullptr.
void forward_row(float* y, float* mean, float* rstd,                                  // (cols), (1), (1)
                 const float* x, const float* next_x,                                 // (cols), (cols): prefetched
                 const float* gamma, const float* beta, int64_t cols, float eps) {    // (cols), (cols)
  // Two passes over the row (it sits in L1 after the first): the mean, then the biased variance
  // (divided by cols: the normalizer of this row, not an estimate of a population's).
  double row_mean = row_sum(x, cols, next_x, y) / double(cols);
  double row_var = row_sum_squared_deviation(x, cols, row_mean) / double(cols);
  // A constant row has var 0: rstd = 1/sqrt(eps) and every xhat is exactly 0, so y = beta.
  double row_rstd = 1.0 / std::sqrt(row_var + double(eps));
  if (mean != nullptr) *mean = float(row_mean);
  if (rstd != nullptr) *rstd = float(row_rstd);
  normalize_row(y, x, gamma, beta, cols, row_mean, row_rstd);
}

}  // namespace

void layer_norm_forward(float* out, float* mean, float* rstd,                 // (rows, cols), (rows), (rows)
                        const float* inp, const float* gamma, const float* beta,  // (rows, cols), (cols), (cols)
                        int64_t rows, int64_t cols, float eps) {
#pragma omp parallel for schedule(static) if (rows * cols >= kMinParallelElements)
  for (int64_t r = 0; r < rows; r++) {
    const float* x = inp + r * cols;                    // (cols)
    const float* next_x = r + 1 < rows ? x + cols : x;  // (cols), prefetched
    forward_row(out + r * cols, mean != nullptr ? mean + r : nullptr, rstd != nullptr ? rstd + r : nullptr, x,
                next_x, gamma, beta, cols, eps);
  }
}

void layer_norm_residual_forward(float* out, float* sum, float* mean, float* rstd,  // (rows, cols) x2, (rows) x2
                                 const float* inp, const float* residual,          // (rows, cols), (rows, cols)
                                 const float* gamma, const float* beta,            // (cols), (cols)
                                 int64_t rows, int64_t cols, float eps) {
#pragma omp parallel for schedule(static) if (rows * cols >= kMinParallelElements)
  for (int64_t r = 0; r < rows; r++) {
    const float* x = inp + r * cols;         // (cols)
    const float* res = residual + r * cols;  // (cols)
    float* s = sum + r * cols;               // (cols)
    // The sum is formed and normalized while the row is in L1: one pass over memory fewer than an
    // add kernel followed by layer_norm_forward.
    for (int64_t i = 0; i < cols; i++) s[i] = x[i] + res[i];
    const float* next_x = r + 1 < rows ? x + cols : x;  // (cols), prefetched
    forward_row(out + r * cols, mean != nullptr ? mean + r : nullptr, rstd != nullptr ? rstd + r : nullptr, s,
                next_x, gamma, beta, cols, eps);
  }
}

// ---- Backward ----
//
// With xhat = (x - mean) * rstd, y = gamma * xhat + beta and g = dout * gamma (the gradient reaching
// xhat), the chain rule through mean and rstd gives (derivation in docs/layernorm.md):
//
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//
// Why the two row means: every x[j] of the row moves the row's mean and its variance, and through
// them every output of the row. mean(g) is the gradient that flows back through the mean (shifting
// all x by c shifts the mean by c and leaves xhat unchanged, so dx must sum to zero); the
// xhat * mean(g * xhat) term flows back through rstd (scaling the deviations leaves xhat unchanged,
// so dx has no component along xhat, up to eps). Only mean and rstd are cached, so xhat is
// recomputed from x.
//
// The row helpers take __restrict pointers: outputs never alias inputs, and saying so lets the
// compiler vectorize the loops without runtime overlap checks.

namespace {

struct BackwardRowSums {
  double g = 0.0;        // sum of g
  double g_xhat0 = 0.0;  // sum of g * xhat0
  double xhat0 = 0.0;    // sum of xhat0
};

// Pass 1 of a row: g = dout * gamma (kept in g for pass 2) and three row sums in double lanes,
// prefetching the next row's dout and x and this row's dx.
//
// xhat0 is xhat computed with the cached float mean. The forward's mean was a double rounded to
// float (off by up to half an ulp: 5e-4 for a mean of 1e4), so xhat0 = xhat + shift with one
// constant shift for the row. The true xhat sums to exactly 0, so shift = mean(xhat0), and pass 2
// subtracts it: the gradient does not depend on how well a float holds the mean.
BackwardRowSums backward_row_sums(float* __restrict g,                                    // (cols)
                                  const float* __restrict dy, const float* __restrict x,  // (cols), (cols)
                                  const float* __restrict gamma,                          // (cols) or nullptr
                                  int64_t cols, float mean, float rstd,
                                  const float* next_dy, const float* next_x,              // (cols), (cols)
                                  float* dx) {                                            // (cols): prefetched
  double lanes_g[kLanes] = {};
  double lanes_g_xhat0[kLanes] = {};
  double lanes_xhat0[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= cols; i += kLanes) {  // kLanes floats = one cache line
    prefetch_for_read(next_dy + i);
    prefetch_for_read(next_x + i);
    prefetch_for_write(dx + i);
#pragma omp simd  // as in row_sum: vectorize the independent lanes despite the prefetch calls
    for (int l = 0; l < kLanes; l++) {
      float xhat0 = (x[i + l] - mean) * rstd;
      g[i + l] = gamma != nullptr ? dy[i + l] * gamma[i + l] : dy[i + l];
      lanes_g[l] += double(g[i + l]);
      lanes_g_xhat0[l] += double(g[i + l] * xhat0);
      lanes_xhat0[l] += double(xhat0);
    }
  }
  BackwardRowSums sums;
  sums.g = sum_lanes(lanes_g);
  sums.g_xhat0 = sum_lanes(lanes_g_xhat0);
  sums.xhat0 = sum_lanes(lanes_xhat0);
  for (; i < cols; i++) {
    float xhat0 = (x[i] - mean) * rstd;
    g[i] = gamma != nullptr ? dy[i] * gamma[i] : dy[i];
    sums.g += double(g[i]);
    sums.g_xhat0 += double(g[i] * xhat0);
    sums.xhat0 += double(xhat0);
  }
  return sums;
}

// Pass 2 of a row: dx += rstd * ((g - mean(g)) - xhat * mean(g * xhat)), and the row's share of
// dgamma (+= dout * xhat) and dbeta (+= dout) into this thread's partial buffers. g is the one pass
// 1 stored: recomputing dout * gamma here could fuse into an FMA that skips its rounding, and
// g - mean(g) would be rounding noise times rstd where it must be exactly 0 (e.g. cols = 1).
// dx or (dgamma_partial and dbeta_partial) may be nullptr.
void backward_row_update(float* __restrict dx,                                         // (cols)
                         double* __restrict dgamma_partial,                           // (cols)
                         double* __restrict dbeta_partial,                            // (cols)
                         const float* __restrict g, const float* __restrict dy,      // (cols), (cols)
                         const float* __restrict x,                                   // (cols)
                         int64_t cols, float mean, float rstd, float shift, float mean_g, float mean_g_xhat) {
  if (dx != nullptr && dgamma_partial != nullptr) {
    for (int64_t j = 0; j < cols; j++) {
      float xhat = (x[j] - mean) * rstd - shift;
      dx[j] += rstd * ((g[j] - mean_g) - xhat * mean_g_xhat);
      dgamma_partial[j] += double(dy[j] * xhat);
      dbeta_partial[j] += double(dy[j]);
    }
  } else if (dx != nullptr) {
    for (int64_t j = 0; j < cols; j++) {
      float xhat = (x[j] - mean) * rstd - shift;
      dx[j] += rstd * ((g[j] - mean_g) - xhat * mean_g_xhat);
    }
  } else if (dgamma_partial != nullptr) {
    for (int64_t j = 0; j < cols; j++) {
      float xhat = (x[j] - mean) * rstd - shift;
      dgamma_partial[j] += double(dy[j] * xhat);
      dbeta_partial[j] += double(dy[j]);
    }
  }
}

}  // namespace

namespace {

// layer_norm_backward, and with dresidual != nullptr the fused residual backward: the row's input
// gradient is then formed in a zeroed row buffer and added to both dinp and dresidual, the same
// bits as a separate add's backward would give.
void backward(float* dinp, float* dresidual, float* dgamma, float* dbeta,  // (rows, cols) x2, (cols), (cols)
              const float* dout, const float* inp, const float* gamma,    // (rows, cols), (rows, cols), (cols)
              const float* mean, const float* rstd,                        // (rows), (rows)
              int64_t rows, int64_t cols) {
  const bool parallel = rows * cols >= kMinParallelElements;
  const int num_threads = parallel ? omp_get_max_threads() : 1;
  const size_t width = size_t(cols);
  // dgamma/dbeta sum over rows: each thread adds its rows into its own (cols) partial buffers, in
  // double because a column sums thousands of rows; they are combined below in thread order.
  const bool need_param_grads = dgamma != nullptr || dbeta != nullptr;
  // One allocation per thread, made by that thread: the two threads' buffers never share a page.
  auto partials = std::vector<std::vector<double>>(size_t(num_threads));  // (threads) x (2, cols)

#pragma omp parallel num_threads(num_threads) if (parallel)
  {
    const size_t thread = size_t(omp_get_thread_num());
    if (need_param_grads) partials[thread].assign(2 * width, 0.0);
    double* dgamma_thread = need_param_grads ? partials[thread].data() : nullptr;         // (cols)
    double* dbeta_thread = need_param_grads ? partials[thread].data() + width : nullptr;  // (cols)
    std::vector<float> g_row(width);  // (cols): g of the current row, from pass 1 to pass 2
    std::vector<float> ds_row(dresidual != nullptr ? width : 0);  // (cols): the fused variant's row gradient

#pragma omp for schedule(static) nowait  // the region ends here: its own barrier is enough
    for (int64_t r = 0; r < rows; r++) {
      const float* x = inp + r * cols;    // (cols)
      const float* dy = dout + r * cols;  // (cols)
      float* dx = dresidual != nullptr ? ds_row.data() : dinp != nullptr ? dinp + r * cols : nullptr;  // (cols)
      if (dresidual != nullptr) std::fill(ds_row.begin(), ds_row.end(), 0.0f);
      const bool has_next = r + 1 < rows;
      BackwardRowSums sums = backward_row_sums(g_row.data(), dy, x, gamma, cols, mean[r], rstd[r],
                                               has_next ? dy + cols : dy, has_next ? x + cols : x,
                                               dx != nullptr ? dx : g_row.data());
      const double shift = sums.xhat0 / double(cols);
      const double mean_g = sums.g / double(cols);
      const double mean_g_xhat = sums.g_xhat0 / double(cols) - shift * mean_g;  // mean(g * (xhat0 - shift))
      backward_row_update(dx, dgamma_thread, dbeta_thread, g_row.data(), dy, x, cols, mean[r], rstd[r], float(shift),
                          float(mean_g), float(mean_g_xhat));
      if (dresidual != nullptr) {
        float* dres = dresidual + r * cols;  // (cols)
        float* din = dinp + r * cols;        // (cols)
        for (int64_t j = 0; j < cols; j++) {
          din[j] += ds_row[size_t(j)];
          dres[j] += ds_row[size_t(j)];
        }
      }
    }
  }

  // Fixed combination order (thread 0, 1, ...): the same bits on every run with this thread count.
  if (need_param_grads) {
    for (size_t j = 0; j < width; j++) {
      double dgamma_sum = 0.0;
      double dbeta_sum = 0.0;
      for (int t = 0; t < num_threads; t++) {
        dgamma_sum += partials[size_t(t)][j];
        dbeta_sum += partials[size_t(t)][width + j];
      }
      if (dgamma != nullptr) dgamma[j] += float(dgamma_sum);
      if (dbeta != nullptr) dbeta[j] += float(dbeta_sum);
    }
  }
}

}  // namespace

void layer_norm_backward(float* dinp, float* dgamma, float* dbeta, const float* dout, const float* inp,
                         const float* gamma, const float* mean, const float* rstd, int64_t rows, int64_t cols) {
  backward(dinp, nullptr, dgamma, dbeta, dout, inp, gamma, mean, rstd, rows, cols);
}

void layer_norm_residual_backward(float* dinp, float* dresidual, float* dgamma, float* dbeta, const float* dout,
                                  const float* sum, const float* gamma, const float* mean, const float* rstd,
                                  int64_t rows, int64_t cols) {
  backward(dinp, dresidual, dgamma, dbeta, dout, sum, gamma, mean, rstd, rows, cols);
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
