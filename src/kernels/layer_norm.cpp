// LayerNorm forward/backward on raw arrays. Math and derivation: docs/layernorm.md.
//
// Precision plan: each row's statistics (mean, variance, and the two row means of the backward)
// are accumulated in double; the elementwise work (normalize, dx) is float and vectorizes. Sums
// over a row keep kLanes independent partial sums, each added in index order, then combined in lane
// order: the compiler can put the lanes in vector registers (so the loop vectorizes without
// -ffast-math), and the rounding of a row depends only on the row's values, not on its address,
// its neighbours or the thread that ran it.
//
// Rows go a few at a time (a group), step by step: the sums of all the group's rows, then their
// means, then their squared deviations, and so on. One row is a chain of dependent steps (sum,
// reduce, divide, sum again, sqrt, divide, normalize); at small cols (64) the row spends most of
// its time waiting on their latencies. The group's rows are independent chains placed side by
// side, which the out-of-order core overlaps. Each row still goes through exactly the operations
// it would alone, so the bits do not depend on the grouping.
#include "normlab/kernels/layer_norm.hpp"
#include "isa_kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {

// Independent partial sums per row reduction: 16 doubles = two AVX-512 or four AVX2 registers. The
// same 16 on every path, so the rounding does not depend on the vector width.
constexpr int kLanes = 16;
// Rows processed side by side (see the top of the file); a thread's last rows that do not fill a
// group go one at a time through the same code. The backward's group is smaller: each of its rows
// has four arrays in play (dout, x, g, dx) where the forward's has two.
constexpr int kForwardGroup = 8;
constexpr int kBackwardGroup = 4;
// Groups are used while a group spans at most this many floats per array (8 KB): beyond, a row's
// own chain is long enough to keep the core busy, and a group's rows (with the next group's,
// prefetched) would crowd L1, where one row at a time stays in it between its passes.
constexpr int64_t kMaxGroupFloats = 2048;
// Below this many elements a call runs on one thread: starting a team costs more than it saves.
constexpr int64_t kMinParallelElements = int64_t{1} << 15;

// Rows [begin, end) of thread `thread` of `threads`: contiguous blocks, the first rows % threads
// threads one row more. This is the split libgomp's schedule(static) makes of a loop over rows;
// the backward's dgamma/dbeta depend on it (each thread sums its own rows), so it is spelled out.
struct RowRange {
  int64_t begin, end;
};
RowRange thread_rows(int64_t rows, int thread, int threads) {
  const int64_t per_thread = rows / threads, extra = rows % threads, t = thread;
  const int64_t begin = t * per_thread + std::min(t, extra);
  return {begin, begin + per_thread + (t < extra ? 1 : 0)};
}

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

// About the lane sums below: lanes start at 0.0, and the first line of the row sets them to
// 0.0 + term (the rounding of adding the term to a zeroed lane; the compiler keeps the addition,
// which turns -0.0 into +0.0). Zeroing the array up front instead makes GCC emit `rep stosq`, a
// microcoded store that costs more than the whole sum of a 64-float row. A row shorter than one
// line has all-zero lanes, whose pairwise sum is 0.0: its total starts at 0.0.

// Software prefetch of the 64-byte line holding p (16 floats). The passes over a row that already
// sits in L1 are pure arithmetic, and without help the memory bus idles during them; asking for the
// next rows' lines (and the lines this row will write) while the first pass streams keeps DRAM busy.
inline void prefetch_for_read(const float* p) { __builtin_prefetch(p, 0, 3); }
inline void prefetch_for_write(float* p) { __builtin_prefetch(p, 1, 3); }

// sum_i x[i], in double; prefetches next_x (read) and y (write) along the way.
double row_sum(const float* x, int64_t n,        // x: (n)
               const float* next_x, float* y) {  // (n), (n): only prefetched
  double total = 0.0;
  int64_t i = 0;
  if (n >= kLanes) {
    double lanes[kLanes];
    for (int l = 0; l < kLanes; l++) lanes[l] = 0.0 + double(x[l]);
    for (i = kLanes; i + kLanes <= n; i += kLanes) {  // kLanes floats = one cache line
      prefetch_for_read(next_x + i);
      prefetch_for_write(y + i);
      // The prefetch calls make GCC give up on this loop nest; simd asks for the lanes loop anyway
      // (lanes are independent: no reordering of any sum).
#pragma omp simd
      for (int l = 0; l < kLanes; l++) lanes[l] += double(x[i + l]);
    }
    prefetch_for_read(next_x);  // the first line, skipped above
    prefetch_for_write(y);
    total = sum_lanes(lanes);
  }
  for (; i < n; i++) total += double(x[i]);
  return total;
}

// sum_i (x[i] - center)^2, in double. This is the second pass of the two-pass variance: the
// deviations are formed before squaring, so a row with mean 1e4 and std 1 loses nothing, where
// E[x^2] - E[x]^2 would subtract two numbers near 1e8 and keep garbage.
double row_sum_squared_deviation(const float* x, int64_t n, double center) {  // x: (n)
  double total = 0.0;
  int64_t i = 0;
  if (n >= kLanes) {
    double lanes[kLanes];
    for (int l = 0; l < kLanes; l++) {
      double deviation = double(x[l]) - center;
      lanes[l] = 0.0 + deviation * deviation;
    }
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      for (int l = 0; l < kLanes; l++) {
        double deviation = double(x[i + l]) - center;
        lanes[l] += deviation * deviation;
      }
    }
    total = sum_lanes(lanes);
  }
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

// The rows after a group, to prefetch while the group is summed: row k of the group asks for row
// k of the next group, or for itself past the last row of the array.
struct NextRows {
  const float* first;  // (count, cols): the next group's rows
  int64_t count;       // how many of them exist, 0..group size
  const float* row(const float* self, int k, int64_t cols) const { return k < count ? first + k * cols : self; }
};

// Forward of R consecutive rows: y = LN(x), mean and rstd of each row written where not nullptr.
// Per row: two passes (it sits in L1 after the first): the mean, then the biased variance
// (divided by cols: the normalizer of this row, not an estimate of a population's).
template <int R>
void forward_rows(float* y, float* mean, float* rstd,                  // (R, cols), (R), (R)
                  const float* x, NextRows next_x,                      // (R, cols), prefetched
                  const float* gamma, const float* beta, int64_t cols,  // (cols), (cols)
                  float eps) {
  double row_mean[R], row_vars[R], row_rstds[R];
  for (int r = 0; r < R; r++) {
    const float* x_r = x + r * cols;  // (cols)
    row_mean[r] = row_sum(x_r, cols, next_x.row(x_r, r, cols), y + r * cols) / double(cols);
  }
  for (int r = 0; r < R; r++) row_vars[r] = row_sum_squared_deviation(x + r * cols, cols, row_mean[r]) / double(cols);
  for (int r = 0; r < R; r++) {
    // A constant row has var 0: rstd = 1/sqrt(eps) and every xhat is exactly 0, so y = beta.
    const double row_var = row_vars[r];
    double row_rstd = 1.0 / std::sqrt(row_var + double(eps));
    row_rstds[r] = row_rstd;
  }
  for (int r = 0; r < R; r++) {
    if (mean != nullptr) mean[r] = float(row_mean[r]);
    if (rstd != nullptr) rstd[r] = float(row_rstds[r]);
  }
  for (int r = 0; r < R; r++) normalize_row(y + r * cols, x + r * cols, gamma, beta, cols, row_mean[r], row_rstds[r]);
}

// Forward of rows [begin, end): whole groups, then the rest one row at a time. With residual
// != nullptr, x is first formed as inp + residual into sum (post-LN's LN(x + f(x))): one pass over
// memory fewer than an add kernel followed by layer_norm_forward, the group's rows being in L1.
void forward_range(float* out, float* sum, float* mean, float* rstd,  // (rows, cols) x2, (rows) x2
                   const float* inp, const float* residual,           // (rows, cols), (rows, cols)
                   const float* gamma, const float* beta, int64_t rows, int64_t cols, float eps, RowRange range) {
  auto rows_at = [&](auto group, int64_t r) {
    constexpr int R = decltype(group)::value;
    const float* x = inp + r * cols;  // (R, cols)
    if (residual != nullptr) {
      const float* res = residual + r * cols;  // (R, cols)
      float* s = sum + r * cols;               // (R, cols)
      for (int64_t i = 0; i < R * cols; i++) s[i] = x[i] + res[i];
      x = s;
    }
    const NextRows next{inp + (r + R) * cols, std::clamp<int64_t>(rows - (r + R), 0, R)};
    forward_rows<R>(out + r * cols, mean != nullptr ? mean + r : nullptr, rstd != nullptr ? rstd + r : nullptr, x,
                    next, gamma, beta, cols, eps);
  };
  int64_t r = range.begin;
  if (kForwardGroup * cols <= kMaxGroupFloats) {
    for (; r + kForwardGroup <= range.end; r += kForwardGroup) rows_at(std::integral_constant<int, kForwardGroup>{}, r);
  }
  for (; r < range.end; r++) rows_at(std::integral_constant<int, 1>{}, r);
}

}  // namespace

void layer_norm_forward(float* out, float* mean, float* rstd,                 // (rows, cols), (rows), (rows)
                        const float* inp, const float* gamma, const float* beta,  // (rows, cols), (cols), (cols)
                        int64_t rows, int64_t cols, float eps) {
#pragma omp parallel if (rows * cols >= kMinParallelElements)
  forward_range(out, nullptr, mean, rstd, inp, nullptr, gamma, beta, rows, cols, eps,
                thread_rows(rows, omp_get_thread_num(), omp_get_num_threads()));
}

void layer_norm_residual_forward(float* out, float* sum, float* mean, float* rstd,  // (rows, cols) x2, (rows) x2
                                 const float* inp, const float* residual,          // (rows, cols), (rows, cols)
                                 const float* gamma, const float* beta,            // (cols), (cols)
                                 int64_t rows, int64_t cols, float eps) {
#pragma omp parallel if (rows * cols >= kMinParallelElements)
  forward_range(out, sum, mean, rstd, inp, residual, gamma, beta, rows, cols, eps,
                thread_rows(rows, omp_get_thread_num(), omp_get_num_threads()));
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

// (No default member initializers: a zero-initialized array of these is cleared with rep stosq.)
struct BackwardRowSums {
  double g;        // sum of g
  double g_xhat0;  // sum of g * xhat0
  double xhat0;    // sum of xhat0
};

// Pass 1 of a row: g = dout * gamma (kept in g for pass 2) and three row sums in double lanes,
// prefetching the next rows' dout and x and this row's dx.
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
  BackwardRowSums sums = {0.0, 0.0, 0.0};
  int64_t i = 0;
  if (cols >= kLanes) {
    // Lanes set by the first line (0.0 + term), as in row_sum.
    double lanes_g[kLanes], lanes_g_xhat0[kLanes], lanes_xhat0[kLanes];
    for (int l = 0; l < kLanes; l++) {
      float xhat0 = (x[l] - mean) * rstd;
      g[l] = gamma != nullptr ? dy[l] * gamma[l] : dy[l];
      lanes_g[l] = 0.0 + double(g[l]);
      lanes_g_xhat0[l] = 0.0 + double(g[l] * xhat0);
      lanes_xhat0[l] = 0.0 + double(xhat0);
    }
    for (i = kLanes; i + kLanes <= cols; i += kLanes) {  // kLanes floats = one cache line
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
    prefetch_for_read(next_dy);  // the first line, skipped above
    prefetch_for_read(next_x);
    prefetch_for_write(dx);
    sums.g = sum_lanes(lanes_g);
    sums.g_xhat0 = sum_lanes(lanes_g_xhat0);
    sums.xhat0 = sum_lanes(lanes_xhat0);
  }
  for (; i < cols; i++) {
    float xhat0 = (x[i] - mean) * rstd;
    g[i] = gamma != nullptr ? dy[i] * gamma[i] : dy[i];
    sums.g += double(g[i]);
    sums.g_xhat0 += double(g[i] * xhat0);
    sums.xhat0 += double(xhat0);
  }
  return sums;
}

// Pass 2 of R rows: dx += rstd * ((g - mean(g)) - xhat * mean(g * xhat)) for each row (kWithDx),
// and the rows' shares of dgamma (+= dout * xhat) and dbeta (+= dout) into this thread's partial
// buffers (kWithPartials), added row after row (row r before row r + 1, as one row at a time
// would). g is the one pass 1 stored: recomputing dout * gamma here could fuse into an FMA that
// skips its rounding, and g - mean(g) would be rounding noise times rstd where it must be exactly 0
// (e.g. cols = 1). The per-row scalars are (R) arrays.
template <int R, bool kWithDx, bool kWithPartials>
void backward_rows_update(float* __restrict dx,                                     // (R, cols)
                          double* __restrict dgamma_partial,                       // (cols)
                          double* __restrict dbeta_partial,                        // (cols)
                          const float* __restrict g, const float* __restrict dy,  // (R, cols), (R, cols)
                          const float* __restrict x,                               // (R, cols)
                          int64_t cols, const float* mean, const float* rstd, const float* shift,
                          const float* mean_g, const float* mean_g_xhat) {
  if constexpr (kWithPartials) {
    // Column by column, the R rows in order: the partials stay in registers across the group, and
    // each xhat serves both dx and dgamma.
    for (int64_t j = 0; j < cols; j++) {
      double dgamma_j = dgamma_partial[j];
      double dbeta_j = dbeta_partial[j];
      for (int r = 0; r < R; r++) {
        const int64_t k = r * cols + j;
        float xhat = (x[k] - mean[r]) * rstd[r] - shift[r];
        if constexpr (kWithDx) dx[k] += rstd[r] * ((g[k] - mean_g[r]) - xhat * mean_g_xhat[r]);
        dgamma_j += double(dy[k] * xhat);
        dbeta_j += double(dy[k]);
      }
      dgamma_partial[j] = dgamma_j;
      dbeta_partial[j] = dbeta_j;
    }
  } else if constexpr (kWithDx) {
    for (int r = 0; r < R; r++) {
      const int64_t o = r * cols;  // row r's offset
      for (int64_t j = 0; j < cols; j++) {
        float xhat = (x[o + j] - mean[r]) * rstd[r] - shift[r];
        dx[o + j] += rstd[r] * ((g[o + j] - mean_g[r]) - xhat * mean_g_xhat[r]);
      }
    }
  }
}

// Both passes for R consecutive rows, step by step across the rows as in forward_rows. g is a
// (R, cols) scratch; dx (R, cols) may be nullptr, as may the partials.
template <int R>
void backward_rows(float* dx, double* dgamma_partial, double* dbeta_partial,  // (R, cols), (cols), (cols)
                   float* g,                                                  // (R, cols) scratch
                   const float* dy, const float* x, const float* gamma,       // (R, cols), (R, cols), (cols)
                   const float* mean, const float* rstd,                      // (R), (R)
                   NextRows next_dy, NextRows next_x, int64_t cols) {
  BackwardRowSums sums[R];
  for (int r = 0; r < R; r++) {
    const int64_t o = r * cols;
    sums[r] = backward_row_sums(g + o, dy + o, x + o, gamma, cols, mean[r], rstd[r], next_dy.row(dy + o, r, cols),
                                next_x.row(x + o, r, cols), dx != nullptr ? dx + o : g + o);
  }
  float shift[R], mean_g[R], mean_g_xhat[R];
  for (int r = 0; r < R; r++) {
    const double row_shift = sums[r].xhat0 / double(cols);
    const double row_mean_g = sums[r].g / double(cols);
    shift[r] = float(row_shift);
    mean_g[r] = float(row_mean_g);
    mean_g_xhat[r] = float(sums[r].g_xhat0 / double(cols) - row_shift * row_mean_g);  // mean(g * (xhat0 - shift))
  }
  // dx and the partials may each be nullptr
  if (dgamma_partial != nullptr && dx != nullptr)
    backward_rows_update<R, true, true>(dx, dgamma_partial, dbeta_partial, g, dy, x, cols, mean, rstd, shift, mean_g,
                                        mean_g_xhat);
  else if (dgamma_partial != nullptr)
    backward_rows_update<R, false, true>(dx, dgamma_partial, dbeta_partial, g, dy, x, cols, mean, rstd, shift,
                                         mean_g, mean_g_xhat);
  else if (dx != nullptr)
    backward_rows_update<R, true, false>(dx, dgamma_partial, dbeta_partial, g, dy, x, cols, mean, rstd, shift,
                                         mean_g, mean_g_xhat);
}

// layer_norm_backward, and with dresidual != nullptr the fused residual backward: the rows' input
// gradient is then formed in a zeroed buffer and added to both dinp and dresidual, the same bits
// as a separate add's backward would give.
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

  // The team as it runs: one thread when this call is nested in the caller's parallel region.
  int team = 1;
#pragma omp parallel num_threads(num_threads) if (parallel)
  {
    const int thread = omp_get_thread_num();
    if (thread == 0) team = omp_get_num_threads();
    std::vector<double>& partial = partials[size_t(thread)];
    if (need_param_grads) partial.assign(2 * width, 0.0);
    double* dgamma_thread = need_param_grads ? partial.data() : nullptr;         // (cols)
    double* dbeta_thread = need_param_grads ? partial.data() + width : nullptr;  // (cols)
    // (kBackwardGroup, cols) each: g of the group, from pass 1 to pass 2; the fused variant's gradient.
    std::vector<float> g_rows(kBackwardGroup * width);
    std::vector<float> ds_rows(dresidual != nullptr ? kBackwardGroup * width : 0);

    auto rows_at = [&](auto group, int64_t r) {
      constexpr int R = decltype(group)::value;
      const float* x = inp + r * cols;    // (R, cols)
      const float* dy = dout + r * cols;  // (R, cols)
      float* dx = dresidual != nullptr ? ds_rows.data() : dinp != nullptr ? dinp + r * cols : nullptr;  // (R, cols)
      if (dresidual != nullptr) std::fill(ds_rows.begin(), ds_rows.begin() + R * cols, 0.0f);
      const int64_t next_count = std::clamp<int64_t>(rows - (r + R), 0, R);
      backward_rows<R>(dx, dgamma_thread, dbeta_thread, g_rows.data(), dy, x, gamma, mean + r, rstd + r,
                       NextRows{dy + R * cols, next_count}, NextRows{x + R * cols, next_count}, cols);
      if (dresidual != nullptr) {
        float* dres = dresidual + r * cols;  // (R, cols)
        float* din = dinp + r * cols;        // (R, cols)
        for (int64_t j = 0; j < R * cols; j++) {
          din[j] += ds_rows[size_t(j)];
          dres[j] += ds_rows[size_t(j)];
        }
      }
    };
    const RowRange range = thread_rows(rows, thread, omp_get_num_threads());
    int64_t r = range.begin;
    if (kBackwardGroup * cols <= kMaxGroupFloats) {
      for (; r + kBackwardGroup <= range.end; r += kBackwardGroup)
        rows_at(std::integral_constant<int, kBackwardGroup>{}, r);
    }
    for (; r < range.end; r++) rows_at(std::integral_constant<int, 1>{}, r);
  }

  // Fixed combination order (thread 0, 1, ...): the same bits on every run with this thread count.
  if (need_param_grads) {
    for (size_t j = 0; j < width; j++) {
      double dgamma_sum = 0.0;
      double dbeta_sum = 0.0;
      for (int t = 0; t < team; t++) {
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
