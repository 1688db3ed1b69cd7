// LayerNorm forward/backward on raw arrays, the fast version. Read the plain version first
// (src/kernels/reference/layer_norm.cpp: the same math, one loop per step); the derivation of the
// backward is in docs/layernorm.md. This file computes the same numbers to float rounding, and the
// same bits on every fast path, thread count and row grouping.
//
// Call map, top to bottom:
//
//   Part 1, one row at a time (the whole algorithm):
//     forward_row        mean (row_sum), biased variance (row_sum_squared_deviation), rstd,
//                        then y = gamma * xhat + beta (normalize_row)
//     backward_row       pass 1: g = dout * gamma and three row sums (backward_row_sums);
//                        pass 2: dx and this thread's dgamma/dbeta partials (backward_row_update)
//   Part 2, speed (no new math):
//     forward_rows<R>, backward_rows<R>   the same steps for R rows side by side
//     forward_rows_pipelined              AVX2/AVX-512, rows of 257-1024 columns: a row's squared
//                                         deviations in one loop with the previous row's normalize
//     PrefetchNext                        ask for the next rows while this one is summed
//     thread_rows                         each thread's contiguous block of rows
//     for_row_groups                      groups of R while they fit in L1 (the backward's on
//                                         AVX-512: in L2), then single rows
//     *_simd, row_sum_pair, normalize_row_affine   AVX2/AVX-512: the same operations with
//                                         intrinsics (layer_norm_simd.hpp says why)
//     backward_rows_recompute             AVX-512: pass 2 forms g and xhat0 again instead of
//                                         reading pass 1's scratch rows (rows from memory, small calls)
//     backward_rows_pipelined             AVX-512, rows from memory of 513-768 columns: the same,
//                                         with a row's pass 1 in one loop with the previous row's pass 2
//     backward_rows_pipelined_scratch     AVX2, rows of 513-768 columns: a row's pass 1 in one loop
//                                         with the previous row's pass 2, by half lines, scratch rows kept
//   Part 3, the public kernels:
//     layer_norm_forward, layer_norm_backward   split the rows over threads, then for_row_groups
//
// Precision plan: each row's statistics (mean, variance, and the two row means of the backward)
// are accumulated in double, in the fixed lanes of lanes.hpp; the elementwise work (normalize, dx)
// is float and vectorizes.
#include "normlab/kernels/layer_norm.hpp"
#include "isa_kernels.hpp"
#include "lanes.hpp"
#include "layer_norm_simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {

// ======================================================================== Part 1: one row

// Prefetch hints for the row sums: NoPrefetch asks for nothing (Part 2 has the one that does). A
// hint changes when memory is read, never a result.
struct NoPrefetch {
  void operator()(int64_t /*i*/) const {}
};

// About the lane sums below: lanes start at 0.0, and the first line of the row sets them to
// 0.0 + term (the rounding of adding the term to a zeroed lane; the compiler keeps the addition,
// which turns -0.0 into +0.0). Zeroing the array up front instead makes GCC emit `rep stosq`, a
// microcoded store that costs more than the whole sum of a 64-float row. A row shorter than one
// line has all-zero lanes, whose pairwise sum is 0.0: its total starts at 0.0.

// sum_i x[i], in double. prefetch(i) is called once per line of 16 floats after the first.
template <class Prefetch>
double row_sum(const float* x, int64_t n, Prefetch prefetch) {  // x: (n)
  double total = 0.0;
  int64_t i = 0;
  if (n >= kLanes) {
#if defined(__AVX2__)
    // The same lanes in registers (simd::Lanes): each line's floats converted from memory.
    simd::Lanes lanes = simd::Lanes::zero();
    lanes.add(simd::Lanes::load(x));
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      prefetch(i);
      lanes.add(simd::Lanes::load(x + i));
    }
    prefetch(0);
    total = lanes.sum();
#else
    double lanes[kLanes];
    for (int l = 0; l < kLanes; l++) lanes[l] = 0.0 + double(x[l]);
    for (i = kLanes; i + kLanes <= n; i += kLanes) {  // kLanes floats = one cache line
      prefetch(i);
      // A prefetch call makes GCC give up on this loop nest; simd asks for the lanes loop anyway
      // (lanes are independent: no reordering of any sum).
#pragma omp simd
      for (int l = 0; l < kLanes; l++) lanes[l] += double(x[i + l]);
    }
    prefetch(0);  // the first line, skipped above
    total = sum_lanes(lanes);
#endif
  }
  for (; i < n; i++) total += double(x[i]);
  return total;
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// row_sum of two rows of n >= kLanes floats side by side on AVX2: their lanes are eight
// independent chains, enough to hide the latency of additions issued on the multiply-add
// ports (a * 1 + b: the same rounding), while the conversions keep the adders busy: 2.3 cycles a
// line of 16 against 4.0 for one row, whose conversions and additions all queue on the adders. On
// AVX-512 a row's lanes are two registers and its conversions half as many; pairs made it slower.
template <class Prefetch>
void row_sum_pair(double (&total)[2], const float* x0, const float* x1, int64_t n,  // (n), (n)
                  Prefetch prefetch0, Prefetch prefetch1) {
  simd::Lanes lanes0 = simd::Lanes::zero(), lanes1 = simd::Lanes::zero();
  lanes0.add_on_fma(simd::Lanes::load(x0));
  lanes1.add_on_fma(simd::Lanes::load(x1));
  int64_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes) {
    prefetch0(i);
    prefetch1(i);
    lanes0.add_on_fma(simd::Lanes::load(x0 + i));
    lanes1.add_on_fma(simd::Lanes::load(x1 + i));
  }
  prefetch0(0);
  prefetch1(0);
  total[0] = lanes0.sum();
  total[1] = lanes1.sum();
  for (int64_t j = i; j < n; j++) total[0] += double(x0[j]);
  for (int64_t j = i; j < n; j++) total[1] += double(x1[j]);
}
#endif

// total + sum over i in [begin, n) of (x[i] - center)^2, in order: the elements past the last whole
// vector of the second pass below.
double add_squared_deviations(double total, const float* x, int64_t begin, int64_t n, double center) {
  for (int64_t i = begin; i < n; i++) {
    double deviation = double(x[i]) - center;
    total += deviation * deviation;
  }
  return total;
}

// The row's double mean as two floats, mean = hi + lo to double precision (normalize_row says why
// the mean comes in two parts): every normalization's split, in this order.
struct SplitMean {
  float hi, lo;
};
inline SplitMean split_mean(double mean) {
  const float hi = float(mean);
  return {hi, float(mean - double(hi))};
}

// One element of y = gamma * xhat + beta, xhat = ((x - mean_hi) - mean_lo) * rstd (normalize_row
// says why the mean comes in two parts): every path's element, in this order.
inline float normalize_affine_element(float x, float gamma, float beta, float mean_hi, float mean_lo, float rstd_f) {
  const float xhat = ((x - mean_hi) - mean_lo) * rstd_f;
  return xhat * gamma + beta;
}

// sum_i (x[i] - center)^2, in double. This is the second pass of the two-pass variance: the
// deviations are formed before squaring, so a row with mean 1e4 and std 1 loses nothing, where
// E[x^2] - E[x]^2 would subtract two numbers near 1e8 and keep garbage.
double row_sum_squared_deviation(const float* x, int64_t n, double center) {  // x: (n)
  double total = 0.0;
  int64_t i = 0;
  if (n >= kLanes) {
#if defined(__AVX2__)
    simd::Lanes lanes = simd::Lanes::zero();
    for (i = 0; i + kLanes <= n; i += kLanes) lanes.add_squared_deviation(simd::Lanes::load(x + i), center);
    total = lanes.sum();
#else
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
#endif
  }
  return add_squared_deviations(total, x, i, n, center);
}

// rstd = 1 / sqrt(var + eps). A constant row has var 0: rstd = 1/sqrt(eps) and every xhat is
// exactly 0, so y = beta.
double row_rstd(double var, float eps) { return 1.0 / std::sqrt(var + double(eps)); }

// normalize_row's gamma-and-beta loop on AVX2 and AVX-512, with non-temporal stores of y when
// `stream` (from the first vector-aligned element of y on; streaming stores need alignment). The
// same operations on each element (no fma contraction: -ffp-contract=off; the subtraction of mean_lo
// runs on the multiply-add ports, layer_norm_simd.hpp, which balances them with the adders). An ordinary store first reads the line it
// writes, so a forward whose output is far larger than the caches moves three streams (x, y read,
// y written) instead of two.
#if defined(__AVX2__)
// One vector of normalize_affine_element's operations at offset i (hi, lo, r: mean_hi, mean_lo and
// rstd broadcast); y + i vector-aligned when kStream.
template <bool kStream>
inline void normalize_affine_vector(float* __restrict y, const float* __restrict x,              // (cols), (cols)
                                    const float* __restrict gamma, const float* __restrict beta,  // (cols), (cols)
                                    int64_t i, simd::VF hi, simd::VF lo, simd::VF r) {
  using namespace simd;
  const VF xhat = vf_mul(vf_sub_on_fma(vf_sub(vf_load(x + i), hi), lo), r);
  const VF out = vf_add(vf_mul(xhat, vf_load(gamma + i)), vf_load(beta + i));
  if constexpr (kStream) vf_stream(y + i, out);
  else vf_store(y + i, out);
}

template <bool kStream>
void normalize_row_affine(float* __restrict y, const float* __restrict x,              // (cols), (cols)
                          const float* __restrict gamma, const float* __restrict beta,  // (cols), (cols)
                          int64_t cols, float mean_hi, float mean_lo, float rstd_f) {
  using namespace simd;
  int64_t i = 0;
  if constexpr (kStream) {
    for (; i < cols && (reinterpret_cast<uintptr_t>(y + i) % (kFloats * sizeof(float))) != 0; i++)
      y[i] = normalize_affine_element(x[i], gamma[i], beta[i], mean_hi, mean_lo, rstd_f);
  }
  const VF hi = vf_set1(mean_hi), lo = vf_set1(mean_lo), r = vf_set1(rstd_f);
  for (; i + kFloats <= cols; i += kFloats) normalize_affine_vector<kStream>(y, x, gamma, beta, i, hi, lo, r);
  for (; i < cols; i++) y[i] = normalize_affine_element(x[i], gamma[i], beta[i], mean_hi, mean_lo, rstd_f);
}
#endif

// y = gamma * xhat + beta for one row, in float (gamma, beta may be nullptr). x - mean is formed
// as (x - mean_hi) - mean_lo with mean = mean_hi + mean_lo to double precision: x - mean_hi is
// exact when x is near the mean (Sterbenz lemma), so a row with mean 1e4 keeps the precision of its
// deviations, where float(mean) alone would be off by up to 5e-4.
void normalize_row(float* __restrict y,                                          // (cols)
                   const float* __restrict x,                                    // (cols)
                   const float* __restrict gamma, const float* __restrict beta,  // (cols), (cols)
                   int64_t cols, double mean, double rstd, bool stream = false) {
  const SplitMean split = split_mean(mean);
  const float mean_hi = split.hi, mean_lo = split.lo;
  const float rstd_f = float(rstd);
#if defined(__AVX2__)
  if (gamma != nullptr && beta != nullptr) {
    if (stream) normalize_row_affine<true>(y, x, gamma, beta, cols, mean_hi, mean_lo, rstd_f);
    else normalize_row_affine<false>(y, x, gamma, beta, cols, mean_hi, mean_lo, rstd_f);
    return;
  }
#else
  (void)stream;  // streaming stores only where the path has them
#endif
  if (gamma != nullptr && beta != nullptr) {
    for (int64_t i = 0; i < cols; i++)
      y[i] = normalize_affine_element(x[i], gamma[i], beta[i], mean_hi, mean_lo, rstd_f);
  } else {
    for (int64_t i = 0; i < cols; i++) {
      float xhat = ((x[i] - mean_hi) - mean_lo) * rstd_f;
      float scaled = gamma != nullptr ? xhat * gamma[i] : xhat;
      y[i] = beta != nullptr ? scaled + beta[i] : scaled;
    }
  }
}

// The forward of one row: y = LN(x); its mean and rstd written where not nullptr. Two passes over
// the row (it sits in L1 after the first): the mean, then the biased variance (divided by cols:
// the normalizer of this row, not an estimate of a population's).
template <class Prefetch = NoPrefetch>
void forward_row(float* y, float* mean_out, float* rstd_out,             // (cols), (1), (1)
                 const float* x, const float* gamma, const float* beta,  // (cols), (cols), (cols)
                 int64_t cols, float eps, Prefetch prefetch = {}, bool stream = false) {
  const double mean = row_sum(x, cols, prefetch) / double(cols);
  const double var = row_sum_squared_deviation(x, cols, mean) / double(cols);
  const double rstd = row_rstd(var, eps);
  if (mean_out != nullptr) *mean_out = float(mean);
  if (rstd_out != nullptr) *rstd_out = float(rstd);
  normalize_row(y, x, gamma, beta, cols, mean, rstd, stream);
}

// ---- Backward of one row
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

// (No default member initializers: a zero-initialized array of these is cleared with rep stosq.)
struct BackwardRowSums {
  double g;        // sum of g
  double g_xhat0;  // sum of g * xhat0
  double xhat0;    // sum of xhat0
};

// Pass 1 of a row: g = dout * gamma (kept in g for pass 2) and three row sums in double lanes.
//
// xhat0 is xhat computed with the cached float mean. The forward's mean was a double rounded to
// float (off by up to half an ulp: 5e-4 for a mean of 1e4), so xhat0 = xhat + shift with one
// constant shift for the row. The true xhat sums to exactly 0, so shift = mean(xhat0), and pass 2
// subtracts it: the gradient does not depend on how well a float holds the mean.
template <class Prefetch>
BackwardRowSums backward_row_sums(float* __restrict g,                                    // (cols)
                                  const float* __restrict dy, const float* __restrict x,  // (cols), (cols)
                                  const float* __restrict gamma,                          // (cols) or nullptr
                                  int64_t cols, float mean, float rstd, Prefetch prefetch) {
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
      prefetch(i);
#pragma omp simd  // as in row_sum: vectorize the independent lanes despite the prefetch call
      for (int l = 0; l < kLanes; l++) {
        float xhat0 = (x[i + l] - mean) * rstd;
        g[i + l] = gamma != nullptr ? dy[i + l] * gamma[i + l] : dy[i + l];
        lanes_g[l] += double(g[i + l]);
        lanes_g_xhat0[l] += double(g[i + l] * xhat0);
        lanes_xhat0[l] += double(xhat0);
      }
    }
    prefetch(0);  // the first line, skipped above
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

#if defined(__AVX2__)
// backward_row_sums on AVX2 and AVX-512 for cols >= kLanes: the same operations on each element,
// and g and xhat0 also kept (g, xhat0_row) for pass 2, which then reads neither x nor the mean
// (kStore; on AVX-512 backward_rows_recompute forms them again and wants neither stored). On AVX2
// g and xhat0 are converted to double from the lines just stored (the cheap form of the
// conversion), g * xhat0 from its register; the sums of xhat0 and g * xhat0 are added on the
// multiply-add ports (12 or 6 chains: enough to hide their latency), the sum of g on the adders,
// beside the conversions.
template <bool kAffine, class Prefetch, bool kStore = true>
BackwardRowSums backward_row_sums_simd(float* __restrict g, float* __restrict xhat0_row,           // (cols), (cols)
                                       const float* __restrict dy, const float* __restrict x,  // (cols), (cols)
                                       const float* __restrict gamma,                          // (cols) if kAffine
                                       int64_t cols, float mean, float rstd, Prefetch prefetch) {
  using namespace simd;
#if !defined(__AVX512F__)
  static_assert(kStore, "on AVX2 the sums convert the stored lines");
#endif
  Lanes lanes_g = Lanes::zero(), lanes_g_xhat0 = Lanes::zero(), lanes_xhat0 = Lanes::zero();
  const VF mean_v = vf_set1(mean), rstd_v = vf_set1(rstd);
  int64_t i = 0;
  for (; i + kLanes <= cols; i += kLanes) {
    if (i != 0) prefetch(i);
    VF g_xhat0[kLineFloats];
#if defined(__AVX512F__)
    VF g_line[kLineFloats], xhat0_line[kLineFloats];
#endif
    for (int k = 0; k < kLineFloats; k++) {
      const int64_t o = i + k * kFloats;
      const VF xhat0 = vf_mul(vf_sub(vf_load(x + o), mean_v), rstd_v);
      const VF g_k = kAffine ? vf_mul(vf_load(dy + o), vf_load(gamma + o)) : vf_load(dy + o);
      if constexpr (kStore) {
        vf_store(g + o, g_k);
        vf_store(xhat0_row + o, xhat0);
      }
      g_xhat0[k] = vf_mul(g_k, xhat0);
#if defined(__AVX512F__)
      g_line[k] = g_k;
      xhat0_line[k] = xhat0;
#endif
    }
#if defined(__AVX512F__)
    // A line is one register here, and reading its halves back right after storing it stalls; a
    // sum is two chains, too few to hide the multiply-add ports' latency.
    lanes_g.add(Lanes::of(g_line));
    lanes_xhat0.add(Lanes::of(xhat0_line));
    lanes_g_xhat0.add(Lanes::of(g_xhat0));
#else
    lanes_g.add(Lanes::load(g + i));
    lanes_xhat0.add_on_fma(Lanes::load(xhat0_row + i));
    lanes_g_xhat0.add_on_fma(Lanes::of(g_xhat0));
#endif
  }
  prefetch(0);
  BackwardRowSums sums = {lanes_g.sum(), lanes_g_xhat0.sum(), lanes_xhat0.sum()};
  for (; i < cols; i++) {
    const float xhat0 = (x[i] - mean) * rstd;
    const float g_i = kAffine ? dy[i] * gamma[i] : dy[i];
    if constexpr (kStore) {
      g[i] = g_i;
      xhat0_row[i] = xhat0;
    }
    sums.g += double(g_i);
    sums.g_xhat0 += double(g_i * xhat0);
    sums.xhat0 += double(xhat0);
  }
  return sums;
}
#endif

// The row's three means from its sums, in float for pass 2.
struct BackwardRowMeans {
  float shift;        // mean(xhat0): what xhat0 is off by
  float mean_g;       // mean(g)
  float mean_g_xhat;  // mean(g * xhat) = mean(g * (xhat0 - shift))
};
BackwardRowMeans backward_row_means(const BackwardRowSums& sums, int64_t cols) {
  const double shift = sums.xhat0 / double(cols);
  const double mean_g = sums.g / double(cols);
  return {float(shift), float(mean_g), float(sums.g_xhat0 / double(cols) - shift * mean_g)};
}

// Pass 2 of a row: dx += rstd * ((g - mean(g)) - xhat * mean(g * xhat)) (kWithDx), and the row's
// shares of dgamma (+= dout * xhat) and dbeta (+= dout) added into this thread's partial buffers
// (kWithPartials). g is the one pass 1 stored: recomputing dout * gamma here could fuse into an
// FMA that skips its rounding, and g - mean(g) would be rounding noise times rstd where it must be
// exactly 0 (e.g. cols = 1). What is wanted is a template argument, so each loop is branch-free.
template <bool kWithDx, bool kWithPartials>
void backward_row_update(float* __restrict dx,                                   // (cols)
                         double* __restrict dgamma_partial,                      // (cols)
                         double* __restrict dbeta_partial,                       // (cols)
                         const float* __restrict g, const float* __restrict dy,  // (cols), (cols)
                         const float* __restrict x,                              // (cols)
                         int64_t cols, float mean, float rstd, BackwardRowMeans m) {
  for (int64_t j = 0; j < cols; j++) {
    float xhat = (x[j] - mean) * rstd - m.shift;
    if constexpr (kWithDx) dx[j] += rstd * ((g[j] - m.mean_g) - xhat * m.mean_g_xhat);
    if constexpr (kWithPartials) {
      dgamma_partial[j] += double(dy[j] * xhat);
      dbeta_partial[j] += double(dy[j]);
    }
  }
}

// Both passes for one row. g is a (cols) scratch; dx and the partials may be nullptr.
template <class Prefetch = NoPrefetch>
void backward_row(float* dx, double* dgamma_partial, double* dbeta_partial,  // (cols), (cols), (cols)
                  float* g,                                                  // (cols) scratch
                  const float* dy, const float* x, const float* gamma,       // (cols), (cols), (cols)
                  float mean, float rstd, int64_t cols, Prefetch prefetch = {}) {
  const BackwardRowSums sums = backward_row_sums(g, dy, x, gamma, cols, mean, rstd, prefetch);
  const BackwardRowMeans m = backward_row_means(sums, cols);
  if (dx != nullptr && dgamma_partial != nullptr)
    backward_row_update<true, true>(dx, dgamma_partial, dbeta_partial, g, dy, x, cols, mean, rstd, m);
  else if (dx != nullptr) backward_row_update<true, false>(dx, nullptr, nullptr, g, dy, x, cols, mean, rstd, m);
  else if (dgamma_partial != nullptr)
    backward_row_update<false, true>(nullptr, dgamma_partial, dbeta_partial, g, dy, x, cols, mean, rstd, m);
}

// ======================================================================== Part 2: speed
//
// Nothing here changes a number: each row goes through exactly the operations of Part 1.
//
// Row groups. One row is a chain of dependent steps (sum, reduce, divide, sum again, sqrt, divide,
// normalize); at small cols (64) the row spends most of its time waiting on their latencies. R rows
// placed side by side, step by step (the sums of all R rows, then their means, ...), are R
// independent chains, which the out-of-order core overlaps.
//
// Prefetch. The passes over a row that already sits in L1 are pure arithmetic, and without help
// the memory bus idles during them; asking for the next rows' lines (and the lines this row will
// write) while the first pass streams keeps DRAM busy.

// Rows processed side by side. The backward's group is smaller: each of its rows has four arrays
// in play (dout, x, g, dx) where the forward's has two.
constexpr int kForwardGroup = 8;
constexpr int kBackwardGroup = 4;
// The forward uses groups while a group spans at most this many floats per array (8 KB): beyond, a
// row's own chain is long enough to keep the core busy, and a group's rows (with the next group's,
// prefetched) would crowd L1, where one row at a time stays in it between its passes.
constexpr int64_t kMaxGroupFloats = 2048;
// Rows too long for groups of kForwardGroup within that limit go in pairs while a pair fits it
// (cols <= 1024): two rows' chains overlap where one row's does not fill the core. On AVX2 and
// AVX-512 those rows, with gamma and beta, take forward_rows_pipelined instead, asking for x this
// many rows ahead (64x128x768 from memory, 1 thread, the pairs' forward time: 2 rows ahead
// 0.92-0.97, 3 rows 0.86-0.92, 4 rows 0.78-0.90 on AVX-512 and 0.80-0.88 on AVX2; 1024 columns
// 0.89 and 0.97). Longer rows keep one row at a time: at 2048 columns the pipelined forward
// measured 1.05-1.11 on AVX-512 (two rows and gamma and beta, 32 KB, crowd L1 beside the rows ahead).
constexpr int kPipelinedReadRowsAhead = 4;
// The forward's output is written with streaming stores (normalize_row_affine<true>) from this many
// elements on (16 MB): an output that large leaves the caches before anything reads it.
constexpr int64_t kStreamOutputFloats = int64_t{1} << 22;
// The portable backward (every path's rows without gamma, and the generic path's): on AVX-512 its
// limit is larger (64 KB, cols <= 4096): its group also keeps a column's
// dgamma and dbeta partials in registers across the group's rows (backward_rows_update), where one
// row at a time loads and stores both (cols) double arrays for every row, and that saves more than
// the crowding of L1 costs. With AVX2's 16 vector registers it does not (docs/PERFORMANCE.md,
// "LayerNorm"), so the other paths keep the forward's limit. Either way the bits are the same.
#if defined(__AVX512F__)
constexpr int64_t kMaxBackwardGroupFloats = 16384;
#else
constexpr int64_t kMaxBackwardGroupFloats = kMaxGroupFloats;
#endif
// The AVX2/AVX-512 backward (backward_rows_simd) groups 4 rows while a group spans at most 8 KB
// per array (cols <= 512): its pass 1 also writes xhat0, and at 768 columns a group of 4 (or 2)
// rows' five arrays crowd L1 (64x128x768: 3.2 ms in groups of 4, 2.9 ms one row at a time).
constexpr int kBackwardGroupSimd = 4;
constexpr int64_t kMaxBackwardGroupFloatsSimd = kMaxGroupFloats;
// On AVX-512 (with gamma) two kinds of call take backward_rows_recompute instead of the scratch
// rows, the same bits either way (docs/PERFORMANCE.md, "LayerNorm", has the measurements):
//  - rows too long for those groups in a call whose arrays do not fit L2 (from 2^18 floats, 1 MB,
//    per array: 64x128x768): one at a time, dout and x asked for three rows ahead during pass 1
//    and dx two rows ahead during pass 2 (PrefetchNext asks for the next row only, all in pass 1);
//  - a call on one thread (below kMinParallelElements: a small model's 138 x 64), whose rows sit
//    in L1 and L2: in the groups of 4 up to 512 columns, without prefetch hints.
// Between the two (128 x 768 in L2, 8192 x 256 from memory in groups) the scratch rows measured
// faster: there pass 2's arithmetic, which forming xhat0 and g again adds to, is what paces it.
constexpr int64_t kRecomputeStreamMinFloats = int64_t{1} << 18;
constexpr int kRecomputeReadRowsAhead = 3;
// Of those streamed calls, rows of at most this many columns take backward_rows_pipelined (a row's
// pass 1 in one loop with the previous row's pass 2), where two rows' dout and x, one row's dx and
// the (cols) dgamma/dbeta partials, 36 bytes a column, still fit L1 (48 KB) beside the rows ahead.
// Backward time against one row at a time, 1 thread, 2^22.6 floats per array: 640 columns 0.89,
// 768 0.96-0.97, 896 1.02, 1024 1.10. On AVX2 every call with such rows (gamma given, dgamma and
// dbeta wanted) takes backward_rows_pipelined_scratch, whose two scratch slots of g and xhat0 add
// 16 bytes a column (48 with the rest at 768 columns: the L1's size); at 64x128x768 it takes
// 0.95-0.97 of one row at a time from memory, 0.95-0.97 with the rows in L2 (64 x 768).
constexpr int64_t kMaxPipelinedBackwardCols = 768;
constexpr int kRecomputeDxRowsAhead = 2;

// Prefetch of the 64-byte lines at offset i of the next row of each of kReads inputs and of this
// row's output. The first line of each is asked for after the row (prefetch(0)).
template <int kReads>
struct PrefetchNext {
  const float* read[kReads];  // (cols) each: the next row of each input
  float* write;               // (cols): this row's output; nullptr: none (streaming stores)
  void operator()(int64_t i) const {
    for (int k = 0; k < kReads; k++) __builtin_prefetch(read[k] + i, 0, 3);
    if (write != nullptr) __builtin_prefetch(write + i, 1, 3);
  }
};

// Row k of the next group of R rows starting at `next`, or row `self` itself past the last row of
// the array (`remaining` rows exist after this group).
inline const float* next_row(const float* self, const float* next, int k, int64_t remaining, int64_t cols) {
  return k < remaining ? next + k * cols : self;
}

// Forward of R consecutive rows, step by step across the rows.
template <int R>
void forward_rows(float* y, float* mean, float* rstd,                   // (R, cols), (R), (R)
                  const float* x, int64_t remaining,                    // (R, cols), rows after these
                  const float* gamma, const float* beta, int64_t cols,  // (cols), (cols)
                  float eps, bool stream, bool hints) {
  double row_mean[R], row_rstd_[R];
  auto prefetch_of = [&](int r) {
    return PrefetchNext<1>{{next_row(x + r * cols, x + R * cols, r, remaining, cols)}, stream ? nullptr : y + r * cols};
  };
#if defined(__AVX2__) && !defined(__AVX512F__)
  if (R % 2 == 0 && cols >= kLanes) {
    for (int r = 0; r < R; r += 2) {
      double total[2];
      row_sum_pair(total, x + r * cols, x + (r + 1) * cols, cols, prefetch_of(r), prefetch_of(r + 1));
      row_mean[r] = total[0] / double(cols);
      row_mean[r + 1] = total[1] / double(cols);
    }
  } else
#endif
  {
    if (hints)
      for (int r = 0; r < R; r++) row_mean[r] = row_sum(x + r * cols, cols, prefetch_of(r)) / double(cols);
    else
      for (int r = 0; r < R; r++) row_mean[r] = row_sum(x + r * cols, cols, NoPrefetch{}) / double(cols);
  }
  for (int r = 0; r < R; r++)
    row_rstd_[r] = row_rstd(row_sum_squared_deviation(x + r * cols, cols, row_mean[r]) / double(cols), eps);
  for (int r = 0; r < R; r++) {
    if (mean != nullptr) mean[r] = float(row_mean[r]);
    if (rstd != nullptr) rstd[r] = float(row_rstd_[r]);
  }
  for (int r = 0; r < R; r++)
    normalize_row(y + r * cols, x + r * cols, gamma, beta, cols, row_mean[r], row_rstd_[r], stream);
}

#if defined(__AVX2__)
// One loop over the lines of two rows: row a's sum of squared deviations (row_sum_squared_deviation,
// the same operations in the same lane order) and row b's y = gamma * xhat + beta
// (normalize_row_affine's operations). The first pass is bound by its arithmetic ports, the second by
// its loads and stores; interleaved line by line they overlap where one after the other they add.
// y_b must be vector-aligned when kStream. Returns row a's sum.
template <bool kStream>
double squared_deviation_and_normalize(const float* __restrict x_a, double center,                   // (cols)
                                       float* __restrict y_b, const float* __restrict x_b,           // (cols), (cols)
                                       const float* __restrict gamma, const float* __restrict beta,  // (cols), (cols)
                                       int64_t cols, float mean_hi, float mean_lo, float rstd_f) {
  using namespace simd;
  simd::Lanes lanes = simd::Lanes::zero();
  const VF hi = vf_set1(mean_hi), lo = vf_set1(mean_lo), r = vf_set1(rstd_f);
  int64_t i = 0;
  for (; i + kLanes <= cols; i += kLanes) {
    lanes.add_squared_deviation(simd::Lanes::load(x_a + i), center);
    for (int k = 0; k < kLineFloats; k++)
      normalize_affine_vector<kStream>(y_b, x_b, gamma, beta, i + k * kFloats, hi, lo, r);
  }
  const double total = add_squared_deviations(i > 0 ? lanes.sum() : 0.0, x_a, i, cols, center);
  for (int64_t j = i; j < cols; j++)
    y_b[j] = normalize_affine_element(x_b[j], gamma[j], beta[j], mean_hi, mean_lo, rstd_f);
  return total;
}

// The forward of a thread's rows of 257-1024 columns with gamma and beta, software-pipelined: row r's
// sum, then row r's squared deviations interleaved with row r - 1's normalization
// (squared_deviation_and_normalize), so that the store-bound last pass of a row runs beside the
// port-bound middle pass of the next. Each row goes through exactly forward_row's operations: the
// same bits. On AVX2 the sums go two rows at a time (row_sum_pair). x is asked for `ahead` rows in
// advance during the sums.
void forward_rows_pipelined(float* out, float* mean, float* rstd,                     // (rows, cols), (rows), (rows)
                            const float* inp, const float* gamma, const float* beta,  // (rows, cols), (cols), (cols)
                            int64_t rows, int64_t cols, float eps, int64_t begin, int64_t end, bool stream, int ahead) {
  auto prefetch_of = [&](int64_t r) {
    return PrefetchNext<1>{{r + ahead < rows ? inp + (r + ahead) * cols : inp + r * cols},
                           stream ? nullptr : out + r * cols};
  };
  auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % (simd::kFloats * sizeof(float)) == 0; };
  int64_t prev = -1;  // the row whose normalization is pending
  double prev_mean = 0.0, prev_rstd = 0.0;
  // Row r's squared deviations (its mean known) beside prev's normalization; r becomes prev.
  auto finish = [&](int64_t r, double row_mean) {
    const float* x = inp + r * cols;
    double squares;
    if (prev < 0) {
      squares = row_sum_squared_deviation(x, cols, row_mean);
    } else {
      const SplitMean split = split_mean(prev_mean);
      const float mean_hi = split.hi, mean_lo = split.lo;
      const float rstd_f = float(prev_rstd);
      float* y = out + prev * cols;
      const float* x_prev = inp + prev * cols;
      if (!stream) {
        squares =
            squared_deviation_and_normalize<false>(x, row_mean, y, x_prev, gamma, beta, cols, mean_hi, mean_lo, rstd_f);
      } else if (aligned(y)) {
        squares =
            squared_deviation_and_normalize<true>(x, row_mean, y, x_prev, gamma, beta, cols, mean_hi, mean_lo, rstd_f);
      } else {
        squares = row_sum_squared_deviation(x, cols, row_mean);
        normalize_row(y, x_prev, gamma, beta, cols, prev_mean, prev_rstd, stream);
      }
    }
    const double row_rstd_ = row_rstd(squares / double(cols), eps);
    if (mean != nullptr) mean[r] = float(row_mean);
    if (rstd != nullptr) rstd[r] = float(row_rstd_);
    prev = r;
    prev_mean = row_mean;
    prev_rstd = row_rstd_;
  };
  int64_t r = begin;
#if !defined(__AVX512F__)
  for (; r + 2 <= end; r += 2) {
    double total[2];
    row_sum_pair(total, inp + r * cols, inp + (r + 1) * cols, cols, prefetch_of(r), prefetch_of(r + 1));
    finish(r, total[0] / double(cols));
    finish(r + 1, total[1] / double(cols));
  }
#endif
  for (; r < end; r++) finish(r, row_sum(inp + r * cols, cols, prefetch_of(r)) / double(cols));
  if (prev >= 0) normalize_row(out + prev * cols, inp + prev * cols, gamma, beta, cols, prev_mean, prev_rstd, stream);
}
#endif

// Pass 2 of R rows together, column by column with the R rows in order: the partials stay in
// registers across the group, and each xhat serves both dx and dgamma. Row r's share is added
// before row r + 1's, as one row at a time would add them.
template <int R, bool kWithDx>
void backward_rows_update(float* __restrict dx,                                   // (R, cols)
                          double* __restrict dgamma_partial,                      // (cols)
                          double* __restrict dbeta_partial,                       // (cols)
                          const float* __restrict g, const float* __restrict dy,  // (R, cols), (R, cols)
                          const float* __restrict x,                              // (R, cols)
                          int64_t cols, const float* mean, const float* rstd, const BackwardRowMeans* m) {
  for (int64_t j = 0; j < cols; j++) {
    double dgamma_j = dgamma_partial[j];
    double dbeta_j = dbeta_partial[j];
    for (int r = 0; r < R; r++) {
      const int64_t k = r * cols + j;
      float xhat = (x[k] - mean[r]) * rstd[r] - m[r].shift;
      if constexpr (kWithDx) dx[k] += rstd[r] * ((g[k] - m[r].mean_g) - xhat * m[r].mean_g_xhat);
      dgamma_j += double(dy[k] * xhat);
      dbeta_j += double(dy[k]);
    }
    dgamma_partial[j] = dgamma_j;
    dbeta_partial[j] = dbeta_j;
  }
}

#if defined(__AVX2__)
// backward_rows_update on AVX2 and AVX-512 (R >= 1 rows, dgamma/dbeta partials wanted), with xhat0
// from pass 1: xhat = xhat0 - shift is the same float as (x - mean) * rstd - shift. A line's
// dgamma and dbeta partials stay in registers across the R rows, each row's share added in row
// order; dout * xhat is converted from its register, dout from memory.
template <int R, bool kWithDx>
void backward_rows_update_simd(float* __restrict dx,                                        // (R, cols)
                               double* __restrict dgamma_partial,                           // (cols)
                               double* __restrict dbeta_partial,                            // (cols)
                               const float* __restrict g, const float* __restrict xhat0,    // (R, cols), (R, cols)
                               const float* __restrict dy,                                  // (R, cols)
                               int64_t cols, const float* rstd, const BackwardRowMeans* m) {  // (R), (R)
  using namespace simd;
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    Lanes dgamma_j, dbeta_j;
    for (int k = 0; k < kLineDoubles; k++) {
      dgamma_j.v[k] = vd_load(dgamma_partial + j + k * kDoubles);
      dbeta_j.v[k] = vd_load(dbeta_partial + j + k * kDoubles);
    }
    for (int r = 0; r < R; r++) {
      const int64_t row = r * cols + j;
      const VF shift = vf_set1(m[r].shift), mean_g = vf_set1(m[r].mean_g);
      const VF mean_g_xhat = vf_set1(m[r].mean_g_xhat), rstd_r = vf_set1(rstd[r]);
      VF dy_xhat[kLineFloats];
      for (int k = 0; k < kLineFloats; k++) {
        const int64_t o = row + k * kFloats;
        const VF xhat = vf_sub(vf_load(xhat0 + o), shift);
        if constexpr (kWithDx) {
          const VF t = vf_sub_on_fma(vf_sub_on_fma(vf_load(g + o), mean_g), vf_mul(xhat, mean_g_xhat));
          vf_store(dx + o, vf_add(vf_load(dx + o), vf_mul(rstd_r, t)));
        }
        dy_xhat[k] = vf_mul(vf_load(dy + o), xhat);
      }
      dgamma_j.add(Lanes::of(dy_xhat));
      dbeta_j.add(Lanes::load(dy + row));
    }
    for (int k = 0; k < kLineDoubles; k++) {
      vd_store(dgamma_partial + j + k * kDoubles, dgamma_j.v[k]);
      vd_store(dbeta_partial + j + k * kDoubles, dbeta_j.v[k]);
    }
  }
  for (; j < cols; j++) {
    double dgamma_c = dgamma_partial[j];
    double dbeta_c = dbeta_partial[j];
    for (int r = 0; r < R; r++) {
      const int64_t k = r * cols + j;
      float xhat = xhat0[k] - m[r].shift;
      if constexpr (kWithDx) dx[k] += rstd[r] * ((g[k] - m[r].mean_g) - xhat * m[r].mean_g_xhat);
      dgamma_c += double(dy[k] * xhat);
      dbeta_c += double(dy[k]);
    }
    dgamma_partial[j] = dgamma_c;
    dbeta_partial[j] = dbeta_c;
  }
}

#if defined(__AVX512F__)
// Both passes for R rows of cols >= kLanes with dgamma/dbeta partials on AVX-512, without scratch
// rows: pass 2 forms xhat0 = (x - mean) * rstd and g = dout * gamma again from x, dout and gamma,
// the same operations on the same floats as pass 1 (so the same bits), and pass 1 stores nothing.
// A row has three arrays in play (x, dout, dx) instead of five, and a line costs two stores fewer,
// where loads and stores, not arithmetic, pace the passes: rows streamed from memory, and a small
// model's rows in L1 (see the constants below). A line's dgamma/dbeta partials stay in registers
// across the R rows, each row's share added in row order. prefetch_of(r): row r's hint in pass 1;
// prefetch2(j): the hint at line j of pass 2.
template <int R, bool kWithDx, class PrefetchOf, class Prefetch2>
void backward_rows_recompute(float* __restrict dx,                                    // (R, cols)
                             double* __restrict dgamma_partial,                       // (cols)
                             double* __restrict dbeta_partial,                        // (cols)
                             const float* __restrict dy, const float* __restrict x,  // (R, cols), (R, cols)
                             const float* __restrict gamma,                          // (cols)
                             const float* mean, const float* rstd, int64_t cols,     // (R), (R)
                             PrefetchOf prefetch_of, Prefetch2 prefetch2) {
  using namespace simd;
  BackwardRowMeans m[R];
  for (int r = 0; r < R; r++) {
    const int64_t o = r * cols;
    m[r] = backward_row_means(backward_row_sums_simd<true, decltype(prefetch_of(r)), false>(
                                  nullptr, nullptr, dy + o, x + o, gamma, cols, mean[r], rstd[r], prefetch_of(r)),
                              cols);
  }
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {  // kLanes = one AVX-512 register of floats
    prefetch2(j);
    Lanes dgamma_j, dbeta_j;
    for (int k = 0; k < kLineDoubles; k++) {
      dgamma_j.v[k] = vd_load(dgamma_partial + j + k * kDoubles);
      dbeta_j.v[k] = vd_load(dbeta_partial + j + k * kDoubles);
    }
    for (int r = 0; r < R; r++) {
      const int64_t o = r * cols + j;
      const VF rstd_r = vf_set1(rstd[r]);
      const VF xhat = vf_sub(vf_mul(vf_sub(vf_load(x + o), vf_set1(mean[r])), rstd_r), vf_set1(m[r].shift));
      const VF dy_o = vf_load(dy + o);
      if constexpr (kWithDx) {
        const VF g = vf_mul(dy_o, vf_load(gamma + j));
        const VF t = vf_sub_on_fma(vf_sub_on_fma(g, vf_set1(m[r].mean_g)), vf_mul(xhat, vf_set1(m[r].mean_g_xhat)));
        vf_store(dx + o, vf_add(vf_load(dx + o), vf_mul(rstd_r, t)));
      }
      const VF dy_xhat[kLineFloats] = {vf_mul(dy_o, xhat)};
      dgamma_j.add(Lanes::of(dy_xhat));
      dbeta_j.add(Lanes::load(dy + o));
    }
    for (int k = 0; k < kLineDoubles; k++) {
      vd_store(dgamma_partial + j + k * kDoubles, dgamma_j.v[k]);
      vd_store(dbeta_partial + j + k * kDoubles, dbeta_j.v[k]);
    }
  }
  for (; j < cols; j++) {
    double dgamma_c = dgamma_partial[j];
    double dbeta_c = dbeta_partial[j];
    for (int r = 0; r < R; r++) {
      const int64_t k = r * cols + j;
      const float xhat = (x[k] - mean[r]) * rstd[r] - m[r].shift;
      if constexpr (kWithDx) {
        const float g = dy[k] * gamma[j];
        dx[k] += rstd[r] * ((g - m[r].mean_g) - xhat * m[r].mean_g_xhat);
      }
      dgamma_c += double(dy[k] * xhat);
      dbeta_c += double(dy[k]);
    }
    dgamma_partial[j] = dgamma_c;
    dbeta_partial[j] = dbeta_c;
  }
}
#endif

#if defined(__AVX512F__)
// The backward of a thread's rows streamed from memory on AVX-512 (rows over 512 columns, gamma
// given, dgamma/dbeta partials), software-pipelined: row a's pass 1 (backward_row_sums_simd without
// scratch rows) in one loop with row b = a - 1's pass 2 (backward_rows_recompute's, one row), so
// that a pass 1 bound by its arithmetic runs beside a pass 2 bound by loads and stores. Each row
// goes through exactly the operations of backward_rows_recompute<1>, and row b's partials are added
// before row a's: the same bits. kPass1/kPass2 say which rows there are (the first row has no b,
// the last no a). prefetch1(i), prefetch2(j): the hints at line i of pass 1 and j of pass 2.
template <bool kPass1, bool kPass2, bool kWithDx, class Prefetch1, class Prefetch2>
BackwardRowSums backward_row_pass1_and_pass2(const float* __restrict dy_a,  // (cols)
                                             const float* __restrict x_a,   // (cols)
                                             float mean_a, float rstd_a,
                                             float* __restrict dx_b,             // (cols)
                                             double* __restrict dgamma_partial,  // (cols)
                                             double* __restrict dbeta_partial,   // (cols)
                                             const float* __restrict dy_b,       // (cols)
                                             const float* __restrict x_b,        // (cols)
                                             float mean_b, float rstd_b, BackwardRowMeans m,
                                             const float* __restrict gamma, int64_t cols,  // (cols)
                                             Prefetch1 prefetch1, Prefetch2 prefetch2) {
  using namespace simd;
  Lanes lanes_g = Lanes::zero(), lanes_g_xhat0 = Lanes::zero(), lanes_xhat0 = Lanes::zero();
  const VF mean_a_v = vf_set1(mean_a), rstd_a_v = vf_set1(rstd_a);
  const VF mean_b_v = vf_set1(mean_b), rstd_b_v = vf_set1(rstd_b), shift_b = vf_set1(m.shift);
  const VF mean_g_b = vf_set1(m.mean_g), mean_g_xhat_b = vf_set1(m.mean_g_xhat);
  int64_t i = 0;
  for (; i + kLanes <= cols; i += kLanes) {  // kLanes = one AVX-512 register of floats
    if constexpr (kPass1) {
      if (i != 0) prefetch1(i);
      const VF xhat0 = vf_mul(vf_sub(vf_load(x_a + i), mean_a_v), rstd_a_v);
      const VF g = vf_mul(vf_load(dy_a + i), vf_load(gamma + i));
      const VF g_line[kLineFloats] = {g}, xhat0_line[kLineFloats] = {xhat0}, g_xhat0[kLineFloats] = {vf_mul(g, xhat0)};
      lanes_g.add(Lanes::of(g_line));
      lanes_xhat0.add(Lanes::of(xhat0_line));
      lanes_g_xhat0.add(Lanes::of(g_xhat0));
    }
    if constexpr (kPass2) {
      prefetch2(i);
      Lanes dgamma_j, dbeta_j;
      for (int k = 0; k < kLineDoubles; k++) {
        dgamma_j.v[k] = vd_load(dgamma_partial + i + k * kDoubles);
        dbeta_j.v[k] = vd_load(dbeta_partial + i + k * kDoubles);
      }
      const VF xhat = vf_sub(vf_mul(vf_sub(vf_load(x_b + i), mean_b_v), rstd_b_v), shift_b);
      const VF dy_o = vf_load(dy_b + i);
      if constexpr (kWithDx) {
        const VF g = vf_mul(dy_o, vf_load(gamma + i));
        const VF t = vf_sub_on_fma(vf_sub_on_fma(g, mean_g_b), vf_mul(xhat, mean_g_xhat_b));
        vf_store(dx_b + i, vf_add(vf_load(dx_b + i), vf_mul(rstd_b_v, t)));
      }
      const VF dy_xhat[kLineFloats] = {vf_mul(dy_o, xhat)};
      dgamma_j.add(Lanes::of(dy_xhat));
      dbeta_j.add(Lanes::load(dy_b + i));
      for (int k = 0; k < kLineDoubles; k++) {
        vd_store(dgamma_partial + i + k * kDoubles, dgamma_j.v[k]);
        vd_store(dbeta_partial + i + k * kDoubles, dbeta_j.v[k]);
      }
    }
  }
  BackwardRowSums sums = {0.0, 0.0, 0.0};
  if constexpr (kPass1) {
    prefetch1(0);
    sums = {lanes_g.sum(), lanes_g_xhat0.sum(), lanes_xhat0.sum()};
    for (int64_t j = i; j < cols; j++) {
      const float xhat0 = (x_a[j] - mean_a) * rstd_a;
      const float g = dy_a[j] * gamma[j];
      sums.g += double(g);
      sums.g_xhat0 += double(g * xhat0);
      sums.xhat0 += double(xhat0);
    }
  }
  if constexpr (kPass2) {
    for (int64_t j = i; j < cols; j++) {
      const float xhat = (x_b[j] - mean_b) * rstd_b - m.shift;
      if constexpr (kWithDx) {
        const float g = dy_b[j] * gamma[j];
        dx_b[j] += rstd_b * ((g - m.mean_g) - xhat * m.mean_g_xhat);
      }
      dgamma_partial[j] += double(dy_b[j] * xhat);
      dbeta_partial[j] += double(dy_b[j]);
    }
  }
  return sums;
}

// The thread's rows [begin, end) through backward_row_pass1_and_pass2: dout and x asked for
// kRecomputeReadRowsAhead rows ahead of the row in pass 1, dx kRecomputeDxRowsAhead rows ahead of
// the row in pass 2.
template <bool kWithDx>
void backward_rows_pipelined(float* dinp,                                            // (rows, cols)
                             double* dgamma_partial, double* dbeta_partial,              // (cols), (cols)
                             const float* dout, const float* inp, const float* gamma,    // (rows, cols) x2, (cols)
                             const float* mean, const float* rstd, int64_t rows, int64_t cols,  // (rows), (rows)
                             int64_t begin, int64_t end) {
  auto ahead = [&](const float* p, int64_t r, int d) { return r + d < rows ? p + (r + d) * cols : p + r * cols; };
  auto pass1_hint = [&](int64_t a) {
    return PrefetchNext<2>{{ahead(dout, a, kRecomputeReadRowsAhead), ahead(inp, a, kRecomputeReadRowsAhead)}, nullptr};
  };
  auto pass2_hint = [&](int64_t b) {
    const float* dx_ahead = kWithDx ? ahead(dinp, b, kRecomputeDxRowsAhead) : nullptr;
    return [dx_ahead](int64_t j) {
      if constexpr (kWithDx) __builtin_prefetch(dx_ahead + j, 1, 3);
    };
  };
  auto no_hint = [](int64_t) {};
  if (begin >= end) return;
  const BackwardRowSums first = backward_row_pass1_and_pass2<true, false, kWithDx>(
      dout + begin * cols, inp + begin * cols, mean[begin], rstd[begin], nullptr, nullptr, nullptr, nullptr, nullptr,
      0.0f, 0.0f, BackwardRowMeans{}, gamma, cols, pass1_hint(begin), no_hint);
  BackwardRowMeans m_b = backward_row_means(first, cols);
  for (int64_t a = begin + 1; a <= end; a++) {
    const int64_t b = a - 1;
    float* dx_b = kWithDx ? dinp + b * cols : nullptr;
    if (a < end) {
      const BackwardRowSums sums = backward_row_pass1_and_pass2<true, true, kWithDx>(
          dout + a * cols, inp + a * cols, mean[a], rstd[a], dx_b, dgamma_partial, dbeta_partial, dout + b * cols,
          inp + b * cols, mean[b], rstd[b], m_b, gamma, cols, pass1_hint(a), pass2_hint(b));
      m_b = backward_row_means(sums, cols);
    } else {
      backward_row_pass1_and_pass2<false, true, kWithDx>(nullptr, nullptr, 0.0f, 0.0f, dx_b, dgamma_partial,
                                                         dbeta_partial, dout + b * cols, inp + b * cols, mean[b],
                                                         rstd[b], m_b, gamma, cols, PrefetchNext<2>{}, pass2_hint(b));
    }
  }
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// The backward of a thread's rows of 513-768 columns on AVX2 (gamma given, dgamma/dbeta partials),
// software-pipelined as on AVX-512 but with pass 1's scratch rows: row a's pass 1
// (backward_row_sums_simd's operations, its g and xhat0 stored in scratch slot a % 2) in one loop
// with row b = a - 1's pass 2 (backward_rows_update_simd<1>'s operations, reading slot b % 2).
// Each step runs the loop twice over the rows' lines, once per half line (lanes 0-7, then 8-15):
// pass 1 then keeps 6 double accumulators in registers instead of 12, which beside pass 2's values
// would not fit AVX2's 16 (a spilled accumulator puts a store and a load on its sum's chain every
// line; GCC spills 4 of the 12 even in pass 1 alone). Each lane's sum still adds its elements in
// row order, and row b's partials are added before row a's: the same bits. Pass 2's partial sums
// run on the multiply-add ports (a * 1 + b, the same rounding), balancing them with the adders,
// which carry every conversion.
template <int kHalf, bool kPass1, bool kPass2, bool kWithDx>
inline void backward_half_pass1_and_pass2(simd::VD (&lanes_g)[2], simd::VD (&lanes_xhat0)[2],         // lanes of half
                                          simd::VD (&lanes_g_xhat0)[2],                               // kHalf, out
                                          float* __restrict g_a, float* __restrict xhat0_a,           // (cols), (cols)
                                          const float* __restrict dy_a, const float* __restrict x_a,  // (cols), (cols)
                                          float mean_a, float rstd_a,
                                          float* __restrict dx_b,                       // (cols)
                                          double* __restrict dgamma_partial,            // (cols)
                                          double* __restrict dbeta_partial,             // (cols)
                                          const float* __restrict g_b,                  // (cols)
                                          const float* __restrict xhat0_b,              // (cols)
                                          const float* __restrict dy_b,                 // (cols)
                                          float rstd_b, BackwardRowMeans m,             // row b's
                                          const float* __restrict gamma, int64_t cols,  // (cols)
                                          const PrefetchNext<2>& prefetch) {
  using namespace simd;
  const VF mean_a_v = vf_set1(mean_a), rstd_a_v = vf_set1(rstd_a);
  const VF shift_b = vf_set1(m.shift), mean_g_b = vf_set1(m.mean_g), mean_g_xhat_b = vf_set1(m.mean_g_xhat);
  const VF rstd_b_v = vf_set1(rstd_b);
  for (int k = 0; k < 2; k++) lanes_g[k] = lanes_xhat0[k] = lanes_g_xhat0[k] = vd_zero();
  for (int64_t i = 0; i + kLanes <= cols; i += kLanes) {
    if (kHalf == 0 && i != 0) prefetch(i);
    const int64_t o = i + kHalf * kFloats;  // this half line: floats o .. o + 7, lanes kHalf * 8 ...
    if constexpr (kPass1) {
      const VF xhat0 = vf_mul(vf_sub(vf_load(x_a + o), mean_a_v), rstd_a_v);
      const VF g = vf_mul(vf_load(dy_a + o), vf_load(gamma + o));
      vf_store(g_a + o, g);
      vf_store(xhat0_a + o, xhat0);
      const VF g_xhat0 = vf_mul(g, xhat0);
      for (int k = 0; k < 2; k++) lanes_g[k] = vd_add(lanes_g[k], vd_from_floats(g_a + o + k * kDoubles));
      for (int k = 0; k < 2; k++)
        lanes_xhat0[k] = vd_add_on_fma(vd_from_floats(xhat0_a + o + k * kDoubles), lanes_xhat0[k]);
      lanes_g_xhat0[0] = vd_add_on_fma(vd_low(g_xhat0), lanes_g_xhat0[0]);
      lanes_g_xhat0[1] = vd_add_on_fma(vd_high(g_xhat0), lanes_g_xhat0[1]);
    }
    if constexpr (kPass2) {
      const VF xhat = vf_sub(vf_load(xhat0_b + o), shift_b);
      if constexpr (kWithDx) {
        const VF t = vf_sub_on_fma(vf_sub_on_fma(vf_load(g_b + o), mean_g_b), vf_mul(xhat, mean_g_xhat_b));
        vf_store(dx_b + o, vf_add(vf_load(dx_b + o), vf_mul(rstd_b_v, t)));
      }
      const VF dy_xhat = vf_mul(vf_load(dy_b + o), xhat);
      const VD dgamma_terms[2] = {vd_low(dy_xhat), vd_high(dy_xhat)};
      for (int k = 0; k < 2; k++) {
        const int64_t c = o + k * kDoubles;
        vd_store(dgamma_partial + c, vd_add_on_fma(dgamma_terms[k], vd_load(dgamma_partial + c)));
        vd_store(dbeta_partial + c, vd_add_on_fma(vd_from_floats(dy_b + c), vd_load(dbeta_partial + c)));
      }
    }
  }
}

// One step of backward_rows_pipelined_scratch: row a's pass 1 (kPass1) and row b's pass 2 (kPass2),
// the two halves, then the tails past the last whole line. Returns row a's sums.
template <bool kPass1, bool kPass2, bool kWithDx>
BackwardRowSums backward_row_pass1_and_pass2_scratch(float* __restrict g_a, float* __restrict xhat0_a,  // (cols) x2
                                                     const float* __restrict dy_a, const float* __restrict x_a,
                                                     float mean_a, float rstd_a,
                                                     float* __restrict dx_b,             // (cols)
                                                     double* __restrict dgamma_partial,  // (cols)
                                                     double* __restrict dbeta_partial,   // (cols)
                                                     const float* __restrict g_b, const float* __restrict xhat0_b,
                                                     const float* __restrict dy_b, float rstd_b, BackwardRowMeans m,
                                                     const float* __restrict gamma, int64_t cols,  // (cols)
                                                     const PrefetchNext<2>& prefetch) {
  using namespace simd;
  Lanes lanes_g, lanes_xhat0, lanes_g_xhat0;  // lanes 0-7 from half 0, 8-15 from half 1
  {
    VD g[2], xhat0[2], g_xhat0[2];
    backward_half_pass1_and_pass2<0, kPass1, kPass2, kWithDx>(g, xhat0, g_xhat0, g_a, xhat0_a, dy_a, x_a, mean_a,
                                                              rstd_a, dx_b, dgamma_partial, dbeta_partial, g_b, xhat0_b,
                                                              dy_b, rstd_b, m, gamma, cols, prefetch);
    for (int k = 0; k < 2; k++) lanes_g.v[k] = g[k], lanes_xhat0.v[k] = xhat0[k], lanes_g_xhat0.v[k] = g_xhat0[k];
  }
  {
    VD g[2], xhat0[2], g_xhat0[2];
    backward_half_pass1_and_pass2<1, kPass1, kPass2, kWithDx>(g, xhat0, g_xhat0, g_a, xhat0_a, dy_a, x_a, mean_a,
                                                              rstd_a, dx_b, dgamma_partial, dbeta_partial, g_b, xhat0_b,
                                                              dy_b, rstd_b, m, gamma, cols, prefetch);
    for (int k = 0; k < 2; k++)
      lanes_g.v[2 + k] = g[k], lanes_xhat0.v[2 + k] = xhat0[k], lanes_g_xhat0.v[2 + k] = g_xhat0[k];
  }
  prefetch(0);
  const int64_t tail = cols / kLanes * kLanes;
  BackwardRowSums sums = {0.0, 0.0, 0.0};
  if constexpr (kPass1) {
    sums = {lanes_g.sum(), lanes_g_xhat0.sum(), lanes_xhat0.sum()};
    for (int64_t j = tail; j < cols; j++) {
      const float xhat0 = (x_a[j] - mean_a) * rstd_a;
      const float g = dy_a[j] * gamma[j];
      g_a[j] = g;
      xhat0_a[j] = xhat0;
      sums.g += double(g);
      sums.g_xhat0 += double(g * xhat0);
      sums.xhat0 += double(xhat0);
    }
  }
  if constexpr (kPass2) {
    for (int64_t j = tail; j < cols; j++) {
      const float xhat = xhat0_b[j] - m.shift;
      if constexpr (kWithDx) dx_b[j] += rstd_b * ((g_b[j] - m.mean_g) - xhat * m.mean_g_xhat);
      dgamma_partial[j] += double(dy_b[j] * xhat);
      dbeta_partial[j] += double(dy_b[j]);
    }
  }
  return sums;
}

// The thread's rows [begin, end) through backward_row_pass1_and_pass2_scratch. scratch holds the
// slots: g of rows 0 and 1 mod 2, then xhat0 of rows 0 and 1 mod 2. dout and x are asked for one
// row ahead of row a, dx for row a (its pass 2 comes in the next step).
template <bool kWithDx>
void backward_rows_pipelined_scratch(float* dinp,                                    // (rows, cols)
                                     double* dgamma_partial, double* dbeta_partial,  // (cols), (cols)
                                     float* scratch,                                 // (4, cols)
                                     const float* dout, const float* inp,            // (rows, cols), (rows, cols)
                                     const float* gamma,                             // (cols)
                                     const float* mean, const float* rstd,           // (rows), (rows)
                                     int64_t rows, int64_t cols, int64_t begin, int64_t end) {
  if (begin >= end) return;
  auto g_slot = [&](int64_t r) { return scratch + (r % 2) * cols; };
  auto xhat0_slot = [&](int64_t r) { return scratch + (2 + r % 2) * cols; };
  auto hint = [&](int64_t a) {
    const int64_t next = a + 1 < rows ? a + 1 : a;
    return PrefetchNext<2>{{dout + next * cols, inp + next * cols}, kWithDx ? dinp + a * cols : nullptr};
  };
  const BackwardRowSums first =
      backward_row_pass1_and_pass2_scratch<true, false, kWithDx>(g_slot(begin), xhat0_slot(begin), dout + begin * cols,
                                                                 inp + begin * cols, mean[begin], rstd[begin], nullptr,
                                                                 nullptr, nullptr, nullptr, nullptr, nullptr, 0.0f,
                                                                 BackwardRowMeans{}, gamma, cols, hint(begin));
  BackwardRowMeans m_b = backward_row_means(first, cols);
  for (int64_t a = begin + 1; a <= end; a++) {
    const int64_t b = a - 1;
    float* dx_b = kWithDx ? dinp + b * cols : nullptr;
    if (a < end) {
      const BackwardRowSums sums =
          backward_row_pass1_and_pass2_scratch<true, true, kWithDx>(g_slot(a), xhat0_slot(a), dout + a * cols,
                                                                    inp + a * cols, mean[a], rstd[a], dx_b,
                                                                    dgamma_partial, dbeta_partial, g_slot(b),
                                                                    xhat0_slot(b), dout + b * cols, rstd[b], m_b, gamma,
                                                                    cols, hint(a));
      m_b = backward_row_means(sums, cols);
    } else {
      const PrefetchNext<2> none{{dout + b * cols, inp + b * cols}, nullptr};  // the row itself: in cache
      backward_row_pass1_and_pass2_scratch<false, true, kWithDx>(nullptr, nullptr, nullptr, nullptr, 0.0f, 0.0f, dx_b,
                                                                 dgamma_partial, dbeta_partial, g_slot(b),
                                                                 xhat0_slot(b), dout + b * cols, rstd[b], m_b, gamma,
                                                                 cols, none);
    }
  }
}
#endif

// Both passes for R rows of cols >= kLanes with dgamma/dbeta partials, on AVX2 and AVX-512. g and
// xhat0 are (R, cols) scratch rows.
template <int R, class PrefetchOf>
void backward_rows_simd(float* dx, double* dgamma_partial, double* dbeta_partial,  // (R, cols), (cols), (cols)
                        float* g, float* xhat0,                                    // (R, cols) scratch each
                        const float* dy, const float* x, const float* gamma,       // (R, cols), (R, cols), (cols)
                        const float* mean, const float* rstd, int64_t cols,        // (R), (R)
                        PrefetchOf prefetch_of) {                                  // row r -> its prefetch
  BackwardRowMeans means[R];
  for (int r = 0; r < R; r++) {
    const int64_t o = r * cols;
    const BackwardRowSums sums =
        gamma != nullptr
            ? backward_row_sums_simd<true>(g + o, xhat0 + o, dy + o, x + o, gamma, cols, mean[r], rstd[r], prefetch_of(r))
            : backward_row_sums_simd<false>(g + o, xhat0 + o, dy + o, x + o, gamma, cols, mean[r], rstd[r], prefetch_of(r));
    means[r] = backward_row_means(sums, cols);
  }
  if (dx != nullptr) backward_rows_update_simd<R, true>(dx, dgamma_partial, dbeta_partial, g, xhat0, dy, cols, rstd, means);
  else backward_rows_update_simd<R, false>(nullptr, dgamma_partial, dbeta_partial, g, xhat0, dy, cols, rstd, means);
}
#endif

// Both passes for R consecutive rows, step by step across the rows. g is a (R, cols) scratch.
template <int R>
void backward_rows(float* dx, double* dgamma_partial, double* dbeta_partial,  // (R, cols), (cols), (cols)
                   float* g,                                                  // (R, cols) scratch
                   const float* dy, const float* x, const float* gamma,       // (R, cols), (R, cols), (cols)
                   const float* mean, const float* rstd,                      // (R), (R)
                   int64_t remaining, int64_t cols) {                         // rows after these
  BackwardRowSums sums[R];
  for (int r = 0; r < R; r++) {
    const int64_t o = r * cols;
    const PrefetchNext<2> prefetch{{next_row(dy + o, dy + R * cols, r, remaining, cols),
                                    next_row(x + o, x + R * cols, r, remaining, cols)},
                                   dx != nullptr ? dx + o : g + o};
    sums[r] = backward_row_sums(g + o, dy + o, x + o, gamma, cols, mean[r], rstd[r], prefetch);
  }
  BackwardRowMeans means[R];
  for (int r = 0; r < R; r++) means[r] = backward_row_means(sums[r], cols);
  if (dgamma_partial != nullptr && dx != nullptr) {
    backward_rows_update<R, true>(dx, dgamma_partial, dbeta_partial, g, dy, x, cols, mean, rstd, means);
  } else if (dgamma_partial != nullptr) {
    backward_rows_update<R, false>(nullptr, dgamma_partial, dbeta_partial, g, dy, x, cols, mean, rstd, means);
  } else if (dx != nullptr) {
    for (int r = 0; r < R; r++) {
      const int64_t o = r * cols;
      backward_row_update<true, false>(dx + o, nullptr, nullptr, g + o, dy + o, x + o, cols, mean[r], rstd[r],
                                       means[r]);
    }
  }
}

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

// A thread's rows: group(r) for each whole group of G rows from row r while a group spans at most
// max_group_floats per array (kMaxGroupFloats or kMaxBackwardGroupFloats), then row(r) for each
// row left.
template <int G, class Group, class Row>
void for_row_groups(RowRange range, int64_t cols, int64_t max_group_floats, Group group, Row row) {
  int64_t r = range.begin;
  if (G * cols <= max_group_floats) {
    for (; r + G <= range.end; r += G) group(r);
  }
  for (; r < range.end; r++) row(r);
}

}  // namespace

// ======================================================================== Part 3: the kernels

void layer_norm_forward(float* out, float* mean, float* rstd,                     // (rows, cols), (rows), (rows)
                        const float* inp, const float* gamma, const float* beta,  // (rows, cols), (cols), (cols)
                        int64_t rows, int64_t cols, float eps) {
  const int64_t parts = parallel_parts(rows * cols >= kMinParallelElements);
  const bool stream = rows * cols >= kStreamOutputFloats;
  // Prefetch hints in the row groups' sums, except on AVX-512 in a call on one thread (a small
  // model's 138 x 64, its rows in L1 and L2), where they cost load slots and give nothing.
#if defined(__AVX512F__)
  const bool hints = rows * cols >= kMinParallelElements;
#else
  const bool hints = true;
#endif
  run_parts(parts, [&](int64_t part) {
    const RowRange range = thread_rows(rows, int(part), int(parts));
    auto at = [](float* p, int64_t r) { return p != nullptr ? p + r : nullptr; };
    auto row = [&](int64_t r) {
      const float* x = inp + r * cols;
      const PrefetchNext<1> prefetch{{r + 1 < rows ? x + cols : x}, stream ? nullptr : out + r * cols};
      forward_row(out + r * cols, at(mean, r), at(rstd, r), x, gamma, beta, cols, eps, prefetch, stream);
    };
    auto group = [&]<int G>(int64_t r) {
      forward_rows<G>(out + r * cols, at(mean, r), at(rstd, r), inp + r * cols, rows - (r + G), gamma, beta, cols,
                      eps, stream, hints);
    };
#if defined(__AVX2__)
    if (kForwardGroup * cols > kMaxGroupFloats && 2 * cols <= kMaxGroupFloats && gamma != nullptr &&
        beta != nullptr) {
      forward_rows_pipelined(out, mean, rstd, inp, gamma, beta, rows, cols, eps, range.begin, range.end, stream,
                             kPipelinedReadRowsAhead);
    } else
#endif
    if (kForwardGroup * cols <= kMaxGroupFloats)
      for_row_groups<kForwardGroup>(range, cols, kMaxGroupFloats, [&](int64_t r) { group.template operator()<kForwardGroup>(r); }, row);
    else
      for_row_groups<2>(range, cols, kMaxGroupFloats, [&](int64_t r) { group.template operator()<2>(r); }, row);
#if defined(__AVX2__)
    if (stream) _mm_sfence();  // this thread's streaming stores are visible before the region ends
#endif
  });
}

void layer_norm_backward(float* dinp, float* dgamma, float* dbeta,                 // (rows, cols), (cols), (cols)
                         const float* dout, const float* inp, const float* gamma,  // (rows, cols), (rows, cols), (cols)
                         const float* mean, const float* rstd,                     // (rows), (rows)
                         int64_t rows, int64_t cols) {
  const bool parallel = rows * cols >= kMinParallelElements;
  const int num_threads = parallel_parts(parallel);  // parts: a partial buffer each
  const size_t width = size_t(cols);
  // dgamma/dbeta sum over rows: each thread adds its rows into its own (cols) partial buffers, in
  // double because a column sums thousands of rows; they are combined below in thread order.
  const bool need_param_grads = dgamma != nullptr || dbeta != nullptr;
  // Each part's buffers, allocated by the thread that runs it: the two threads' buffers never share
  // a page. One part (every call of a small model's step: 13 a step at 64 columns) reuses its
  // thread's buffers from call to call instead of allocating three; several parts allocate theirs
  // (a thread may run two parts of one call).
  auto partials = std::vector<std::vector<double>>(size_t(num_threads));  // (threads) x (2, cols)
  auto partial_of = std::vector<double*>(size_t(num_threads), nullptr);   // (threads) -> (2, cols)

  const int team = num_threads;
  run_parts(num_threads, [&](int64_t part) {
    const int thread = int(part);
    thread_local std::vector<double> single_partial;  // (2, cols)
    thread_local std::vector<float> single_g;         // (kBackwardGroup, cols)
    std::vector<double>& partial = team == 1 ? single_partial : partials[size_t(thread)];
    if (need_param_grads) partial.assign(2 * width, 0.0);
    partial_of[size_t(thread)] = partial.data();
    std::vector<float> own_g;
    std::vector<float>& g_rows = team == 1 ? single_g : own_g;  // g of a group, from pass 1 to pass 2
    if (g_rows.size() < 2 * kBackwardGroup * width) g_rows.resize(2 * kBackwardGroup * width);
    double* dgamma_thread = need_param_grads ? partial.data() : nullptr;         // (cols)
    double* dbeta_thread = need_param_grads ? partial.data() + width : nullptr;  // (cols)
    auto dx_at = [&](int64_t r) { return dinp != nullptr ? dinp + r * cols : nullptr; };
    auto row = [&](int64_t r) {
      const float *dy = dout + r * cols, *x = inp + r * cols;
      const bool last = r + 1 >= rows;
      float* dx = dx_at(r);
      const PrefetchNext<2> prefetch{{last ? dy : dy + cols, last ? x : x + cols}, dx != nullptr ? dx : g_rows.data()};
      backward_row(dx, dgamma_thread, dbeta_thread, g_rows.data(), dy, x, gamma, mean[r], rstd[r], cols, prefetch);
    };
    auto group = [&]<int G>(int64_t r) {
      backward_rows<G>(dx_at(r), dgamma_thread, dbeta_thread, g_rows.data(), dout + r * cols, inp + r * cols, gamma,
                       mean + r, rstd + r, rows - (r + G), cols);
    };
    const RowRange range = thread_rows(rows, thread, team);
#if defined(__AVX2__)
    if (need_param_grads && cols >= kLanes) {
      float* g_scratch = g_rows.data();                                // (kBackwardGroup, cols)
      float* xhat0_scratch = g_rows.data() + kBackwardGroup * width;  // (kBackwardGroup, cols)
      auto simd_rows = [&]<int G>(int64_t r) {
        const float *dy = dout + r * cols, *x = inp + r * cols;
        float* dx = dx_at(r);
        const int64_t remaining = rows - (r + G);
        auto prefetch_of = [&](int k) {
          const int64_t o = k * cols;
          return PrefetchNext<2>{{next_row(dy + o, dy + G * cols, k, remaining, cols),
                                  next_row(x + o, x + G * cols, k, remaining, cols)},
                                 dx != nullptr ? dx + o : g_scratch + o};
        };
        backward_rows_simd<G>(dx, dgamma_thread, dbeta_thread, g_scratch, xhat0_scratch, dy, x, gamma, mean + r,
                              rstd + r, cols, prefetch_of);
      };
#if defined(__AVX512F__)
      auto recompute_rows = [&]<int G>(int64_t r, auto prefetch_of, auto prefetch2) {
        const float *dy = dout + r * cols, *x = inp + r * cols;
        float* dx = dx_at(r);
        if (dx != nullptr)
          backward_rows_recompute<G, true>(dx, dgamma_thread, dbeta_thread, dy, x, gamma, mean + r, rstd + r, cols,
                                           prefetch_of, prefetch2);
        else
          backward_rows_recompute<G, false>(nullptr, dgamma_thread, dbeta_thread, dy, x, gamma, mean + r, rstd + r,
                                            cols, prefetch_of, prefetch2);
      };
      const bool grouped = kBackwardGroupSimd * cols <= kMaxBackwardGroupFloatsSimd;
      if (gamma != nullptr && !grouped && rows * cols >= kRecomputeStreamMinFloats &&
          cols <= kMaxPipelinedBackwardCols) {
        if (dinp != nullptr)
          backward_rows_pipelined<true>(dinp, dgamma_thread, dbeta_thread, dout, inp, gamma, mean, rstd, rows, cols,
                                        range.begin, range.end);
        else
          backward_rows_pipelined<false>(nullptr, dgamma_thread, dbeta_thread, dout, inp, gamma, mean, rstd, rows,
                                         cols, range.begin, range.end);
        return;
      }
      if (gamma != nullptr && !grouped && rows * cols >= kRecomputeStreamMinFloats) {
        auto ahead = [&](const float* row, int64_t r, int d) { return r + d < rows ? row + d * cols : row; };
        for (int64_t r = range.begin; r < range.end; r++) {
          const float *dy = dout + r * cols, *x = inp + r * cols;
          const PrefetchNext<2> reads{{ahead(dy, r, kRecomputeReadRowsAhead), ahead(x, r, kRecomputeReadRowsAhead)},
                                      nullptr};
          float* dx = dx_at(r);
          const float* dx_ahead = dx != nullptr ? ahead(dx, r, kRecomputeDxRowsAhead) : nullptr;
          recompute_rows.template operator()<1>(
              r, [&](int) { return reads; },
              [dx_ahead](int64_t j) {
                if (dx_ahead != nullptr) __builtin_prefetch(dx_ahead + j, 1, 3);
              });
        }
        return;
      }
      if (gamma != nullptr && grouped && rows * cols < kMinParallelElements) {
        // No prefetch hints: the call's rows sit in L1 and L2 (dout and x, 35 KB each at 138 x 64,
        // written by the ops just before), and the hints, two a line in pass 1, cost load slots
        // and gave nothing (the demo step's layer_norm backward 0.043-0.044 -> 0.040-0.041 ms).
        auto rows_of = [&]<int G>(int64_t r) {
          recompute_rows.template operator()<G>(r, [](int) { return NoPrefetch{}; }, [](int64_t) {});
        };
        for_row_groups<kBackwardGroupSimd>(
            range, cols, kMaxBackwardGroupFloatsSimd,
            [&](int64_t r) { rows_of.template operator()<kBackwardGroupSimd>(r); },
            [&](int64_t r) { rows_of.template operator()<1>(r); });
        return;
      }
#else
      if (gamma != nullptr && kBackwardGroupSimd * cols > kMaxBackwardGroupFloatsSimd &&
          cols <= kMaxPipelinedBackwardCols) {
        if (dinp != nullptr)
          backward_rows_pipelined_scratch<true>(dinp, dgamma_thread, dbeta_thread, g_rows.data(), dout, inp, gamma, mean,
                                                rstd, rows, cols, range.begin, range.end);
        else
          backward_rows_pipelined_scratch<false>(nullptr, dgamma_thread, dbeta_thread, g_rows.data(), dout, inp, gamma,
                                                 mean, rstd, rows, cols, range.begin, range.end);
        return;
      }
#endif
      for_row_groups<kBackwardGroupSimd>(
          range, cols, kMaxBackwardGroupFloatsSimd,
          [&](int64_t r) { simd_rows.template operator()<kBackwardGroupSimd>(r); },
          [&](int64_t r) { simd_rows.template operator()<1>(r); });
      return;
    }
#endif
    for_row_groups<kBackwardGroup>(range, cols, kMaxBackwardGroupFloats, [&](int64_t r) { group.template operator()<kBackwardGroup>(r); }, row);
  });

  // Fixed combination order (thread 0, 1, ...): the same bits on every run with this thread count.
  if (need_param_grads) {
    for (size_t j = 0; j < width; j++) {
      double dgamma_sum = 0.0;
      double dbeta_sum = 0.0;
      for (int t = 0; t < team; t++) {
        dgamma_sum += partial_of[size_t(t)][j];
        dbeta_sum += partial_of[size_t(t)][width + j];
      }
      if (dgamma != nullptr) dgamma[j] += float(dgamma_sum);
      if (dbeta != nullptr) dbeta[j] += float(dbeta_sum);
    }
  }
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
