// normlab's GEMM: the packed, cache-blocked scheme of Goto & van de Geijn ("Anatomy of
// High-Performance Matrix Multiplication", 2008; the BLIS loop nest). Compiled once per kernel
// path (dispatch.hpp); the micro-kernel is intrinsics on avx512 and avx2, and SSE2 intrinsics on
// generic, which has no FMA instruction and computes each fused multiply-add exactly in double
// (kernels/exact_fma.hpp).
//
//   C (M,N) is cut into micro-tiles of kMR x kNR (8 x 32 on avx512, 6 x 16 on avx2, 4 x 4 on
//   generic). The micro-kernel keeps one micro-tile in registers and runs over a K block of up to
//   kKC = 256 steps: per step it broadcasts the kMR values of op(A) in column k and multiplies
//   them with kNR contiguous values of op(B) in row k (fma).
//
//   B is packed into panels of (K, kNR): kNR columns of C interleaved k by k, zero-padded past N.
//   This is where nt differs from nn / tn (its B is stored (N,K) and gets transposed here);
//   nothing else is ever transposed. On the FMA paths a B of nn / tn with short rows (N <= 256: a
//   small model's weight or activations) is read in place instead, its whole panels' rows a row
//   of B apart: with few rows of C the copy costs more than it saves.
//   A is read in place: the kernel broadcasts each of its values anyway, so packing A would only
//   cost a copy. Two exceptions are packed per tile and K block into (kc, kMR) panels: a last row
//   panel of fewer than kMR rows (zero-padded, so the kernel never reads past A; nn and nt on the
//   FMA paths read it in place instead, their kernel re-reading the last row for the missing
//   ones), and tn with M > 256, whose steps are a page apart in A. (generic converts A, per tile
//   and K block, and B, per B panel slice, to doubles instead: see its micro-kernel.)
//
//   The output is split into tiles of whole micro-tiles, distributed over threads with
//   schedule(static); each thread packs the B panels of its tile's columns into its own buffer.
//   Within a tile: for each K block, for each B panel (its slice stays in L1), for each row panel
//   of A (the tile's rows of the block stay in L2): micro-kernel.
//
//   tn with a small C (a weight gradient: K is the batch's tokens) is split over K blocks instead
//   (gemm_split_k), each thread a contiguous run of them (the block where two runs meet split by
//   its micro-tiles), added to C in block order.
//
// The sum for one element of C does not depend on the tile shape, the thread count or the path:
// an fma chain over k per K block, the blocks added to C in order.
#include "normlab/kernels/matmul.hpp"
#include "isa_kernels.hpp"
#include "matmul_bias.hpp"
#include "transpose.hpp"
#include "normlab/kernels/exact_fma.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace normlab::kernels::NORMLAB_KERNEL_ISA {
namespace {

// The micro-tile per path, sized to its vector registers: the kMR x kNR accumulator plus a row of
// B and a broadcast of A must fit without spilling.
#if defined(__AVX512F__)
constexpr int64_t kMR = 8;   // rows of C per micro-tile
constexpr int64_t kNR = 32;  // columns of C per micro-tile: 8 x 2 zmm = 16 of the 32 zmm
#elif defined(__AVX2__)
constexpr int64_t kMR = 6;  // 6 x 2 ymm = 12 of the 16 ymm (BLIS's Haswell kernel)
constexpr int64_t kNR = 16;
#else
// generic: 4 x 4 floats held as doubles in 8 xmm (math::sse2::fma_row), with room for a row of B,
// a broadcast of A and the temporaries of the 16 registers of SSE2.
constexpr int64_t kMR = 4;
constexpr int64_t kNR = 4;
#endif
// The K block is the same on every path: it decides where a partial sum is added to C, so it is
// part of the rounding (the tile sizes are not).
constexpr int64_t kKC = 256;  // K block: a packed B panel slice is kKC * kNR * 4 B <= 32 KB (L1)
// A tile covers at most 96 x 256 of C: the rows of A a tile reads per K block are
// 96 * kKC * 4 B = 96 KB (L2).
constexpr int64_t kMaxTileRowPanels = 96 / kMR;
constexpr int64_t kMaxTileColPanels = 256 / kNR;
// tn reads A (K,M) in place up to this M; beyond it, A's row panels are packed per tile.
constexpr int64_t kMaxInPlaceTnRows = 256;
// nn and nt on the FMA paths read a last row panel of fewer than kMR rows in place too, through the
// kernel's kClampRows (rows past the end re-read the last row), instead of packing it: at 135 rows
// (16 panels and 7 rows) its copy, element by element, was ~0.6% of the demo's step. tn (A^T)
// packs it: its rows are contiguous, the last row would read past A.
#if defined(__AVX2__)
constexpr bool kInPlaceRaggedA = true;
#else
constexpr bool kInPlaceRaggedA = false;
#endif
// nn and tn read B in place (the FMA paths) when its rows are at most this many floats apart (1 KB;
// at 4 KB a K block's rows of a panel fall into few L1 sets: 1030x256x1024 nn went 2.07 -> 2.32 ms)
// and it has at most this many elements (2 MB: the largest measured).
constexpr int64_t kMaxInPlaceBRowStride = 256;
constexpr int64_t kMaxInPlaceB = int64_t{1} << 19;
// Below this many multiply-adds a call runs on the calling thread: starting a team costs more.
constexpr int64_t kMinParallelMacs = int64_t{1} << 17;
// tn with several threads and a C of at most this many elements is split over K (gemm_split_k),
// as long as its per-block partials (one C per 256 steps of K) stay within this many floats
// (16 MiB): a batch of 16k tokens at C = 64 x 256.
constexpr int64_t kMaxSplitKOutput = 256 * 256;
constexpr int64_t kMaxSplitKPartials = int64_t{1} << 22;

// One fused multiply-add, one rounding, on every path: vfmadd on avx2/avx512; on generic the
// double-precision emulation of math/exact_fma.hpp (fma_row in the micro-kernel, fma_exact where
// it cannot be used), which gives the same bits without FMA instructions.
#if defined(__AVX2__)
inline float multiply_add(float a, float b, float c) { return std::fma(a, b, c); }
#else
inline float multiply_add(float a, float b, float c) { return math::fma_exact(a, b, c); }
#endif

// ReLU as relu_forward computes it (kernels/activations.cpp): NaN and -0 become +0.
inline float relu_of(float v) { return v > 0.0f ? v : 0.0f; }

// An operand read as a matrix op(X) with rows r and reduction index k:
//   op(X)(r, k) = data[r * row_stride + k * k_stride]
// A (M,K) row-major is {K, 1}; A stored (K,M) and read as A^T is {1, M}; B (K,N) read by column
// is {1, N}; B stored (N,K) read as B^T is {K, 1}.
struct Operand {
  const float* data;
  int64_t row_stride;
  int64_t k_stride;
};

// dst (kc, R): dst[k * R + r] = op(X)(r, k) for the first `rows` rows of a panel starting at
// `src`; rows >= `rows` are zero, so edge micro-tiles compute on zeros and never read past X.
template <int64_t R>
void pack_panel(float* __restrict dst, const float* __restrict src, int64_t row_stride, int64_t k_stride, int64_t rows,
                int64_t kc) {
  if (row_stride == 1) {
    // The R values of one k are contiguous in X: copy them k by k.
    for (int64_t k = 0; k < kc; ++k) {
      const float* s = src + k * k_stride;
      float* d = dst + k * R;
      if (rows == R) {
        for (int64_t r = 0; r < R; ++r) d[r] = s[r];
      } else {
        for (int64_t r = 0; r < rows; ++r) d[r] = s[r];
        for (int64_t r = rows; r < R; ++r) d[r] = 0.0f;
      }
    }
  } else {
    // Each row is contiguous in k (k_stride == 1): a weight stored (N, K) for nt. Whole panels go
    // through square transposes in registers (R x R rows of R floats: 16 k at a time on avx512,
    // 8 on avx2), the rest element by element: 138 x 64 x 192 nt at 1 thread went from 17.5 to
    // 15.3 us (the scalar transpose was an eighth of the call).
    int64_t k0 = 0;
#if defined(__AVX512F__)
    if constexpr (R % 16 == 0) {
      if (rows == R && k_stride == 1) {
        for (; k0 + 16 <= kc; k0 += 16)
          for (int64_t r0 = 0; r0 < R; r0 += 16) {
            __m512 t[16];
            for (int i = 0; i < 16; ++i) t[i] = _mm512_loadu_ps(src + (r0 + i) * row_stride + k0);
            transpose16(t);
            for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + (k0 + j) * R + r0, t[j]);
          }
      }
    }
#elif defined(__AVX2__)
    if constexpr (R % 8 == 0) {
      if (rows == R && k_stride == 1) {
        for (; k0 + 8 <= kc; k0 += 8)
          for (int64_t r0 = 0; r0 < R; r0 += 8) {
            __m256 t[8];
            for (int i = 0; i < 8; ++i) t[i] = _mm256_loadu_ps(src + (r0 + i) * row_stride + k0);
            transpose8(t);
            for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (k0 + j) * R + r0, t[j]);
          }
      }
    }
#endif
    if (k0 > 0) {
      for (int64_t k = k0; k < kc; ++k)
        for (int64_t r = 0; r < R; ++r) dst[k * R + r] = src[r * row_stride + k * k_stride];
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* s = src + r * row_stride;
      for (int64_t k = 0; k < kc; ++k) dst[k * R + r] = s[k * k_stride];
    }
    for (int64_t r = rows; r < R; ++r)
      for (int64_t k = 0; k < kc; ++k) dst[k * R + r] = 0.0f;
  }
}

// Row panels [p_begin, p_end) of op(A), steps [k0, k0 + kc), into consecutive (kc, kMR) panels;
// rows >= M are zero.
void pack_a_panels(float* __restrict dst, Operand A, int64_t M, int64_t p_begin, int64_t p_end, int64_t k0,
                   int64_t kc) {
  if (A.row_stride == 1) {
    // tn: step k of all the panels is one contiguous run of A (a row of the stored (K,M)), far
    // from the next step's: visit each row once, k outside, rather than once per panel.
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A.data + (k0 + k) * A.k_stride;
      for (int64_t p = p_begin; p < p_end; ++p) {
        float* d = dst + (p - p_begin) * kc * kMR + k * kMR;
        const float* s = src + p * kMR;
        const int64_t rows = std::min(kMR, M - p * kMR);
        if (rows == kMR) {
          for (int64_t r = 0; r < kMR; ++r) d[r] = s[r];
        } else {
          for (int64_t r = 0; r < rows; ++r) d[r] = s[r];
          for (int64_t r = rows; r < kMR; ++r) d[r] = 0.0f;
        }
      }
    }
    return;
  }
  for (int64_t p = p_begin; p < p_end; ++p) {
    const float* src = A.data + p * kMR * A.row_stride + k0 * A.k_stride;
    pack_panel<kMR>(dst + (p - p_begin) * kc * kMR, src, A.row_stride, A.k_stride, std::min(kMR, M - p * kMR), kc);
  }
}

#if defined(__AVX512F__)
// The avx512 micro-kernel, spelled out with intrinsics like the avx2 one below. Same arithmetic as
// every path: acc = fma(a_ik, b_kj, acc) for k in order from +0, then C = acc (+ bias) or
// C += acc, then residual + that (the residual sum fused into a linear layer), then the ReLU.
// Residual, when given, is C's own (rows, cols) tile in a matrix of C's shape, row stride ldc:
// the drivers pass it with the last K block only. Sixteen named zmm accumulators: the plain C++ kernel kept them in
// registers too, but zeroed a 1 KB array on the stack on every call (a `rep stos`, 3% of the
// kernel's time at K = 64) and stored a partial tile element by element from that array. Here a
// tile of fewer than kMR rows stores only its rows, one of fewer than kNR columns through masks.
// Bp's rows are b_stride apart: kNR in a packed panel, B's row stride when read in place.
template <bool kARowsContiguous, bool kClampRows = false>
inline void micro_kernel(float* C, int64_t ldc, const float* __restrict A, int64_t a_stride, const float* __restrict Bp,
                         int64_t kc, int64_t rows, int64_t cols, bool add, const float* bias,
                         const float* residual, bool relu, [[maybe_unused]] bool exact, int64_t b_stride = kNR) {
  static_assert(kMR == 8 && kNR == 32);
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  const int64_t row_step = kARowsContiguous ? 1 : a_stride;  // distance between A(i, k) and A(i+1, k)
  const int64_t k_step = kARowsContiguous ? a_stride : 1;    // distance between A(i, k) and A(i, k+1)
  // Row i's offset in A. With kClampRows (a last row panel of fewer than kMR rows read in place),
  // the rows past `rows` re-read the last one, A having no more: their sums are never stored.
  const int64_t r1 = kClampRows ? std::min<int64_t>(1, rows - 1) * row_step : row_step;
  const int64_t r2 = kClampRows ? std::min<int64_t>(2, rows - 1) * row_step : 2 * row_step;
  const int64_t r3 = kClampRows ? std::min<int64_t>(3, rows - 1) * row_step : 3 * row_step;
  const int64_t r4 = kClampRows ? std::min<int64_t>(4, rows - 1) * row_step : 4 * row_step;
  const int64_t r5 = kClampRows ? std::min<int64_t>(5, rows - 1) * row_step : 5 * row_step;
  const int64_t r6 = kClampRows ? std::min<int64_t>(6, rows - 1) * row_step : 6 * row_step;
  const int64_t r7 = kClampRows ? std::min<int64_t>(7, rows - 1) * row_step : 7 * row_step;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(Bp + k * b_stride);
    const __m512 b1 = _mm512_loadu_ps(Bp + k * b_stride + 16);
    const float* a = A + k * k_step;
    __m512 a_ik = _mm512_set1_ps(a[0]);
    c00 = _mm512_fmadd_ps(a_ik, b0, c00);
    c01 = _mm512_fmadd_ps(a_ik, b1, c01);
    a_ik = _mm512_set1_ps(a[r1]);
    c10 = _mm512_fmadd_ps(a_ik, b0, c10);
    c11 = _mm512_fmadd_ps(a_ik, b1, c11);
    a_ik = _mm512_set1_ps(a[r2]);
    c20 = _mm512_fmadd_ps(a_ik, b0, c20);
    c21 = _mm512_fmadd_ps(a_ik, b1, c21);
    a_ik = _mm512_set1_ps(a[r3]);
    c30 = _mm512_fmadd_ps(a_ik, b0, c30);
    c31 = _mm512_fmadd_ps(a_ik, b1, c31);
    a_ik = _mm512_set1_ps(a[r4]);
    c40 = _mm512_fmadd_ps(a_ik, b0, c40);
    c41 = _mm512_fmadd_ps(a_ik, b1, c41);
    a_ik = _mm512_set1_ps(a[r5]);
    c50 = _mm512_fmadd_ps(a_ik, b0, c50);
    c51 = _mm512_fmadd_ps(a_ik, b1, c51);
    a_ik = _mm512_set1_ps(a[r6]);
    c60 = _mm512_fmadd_ps(a_ik, b0, c60);
    c61 = _mm512_fmadd_ps(a_ik, b1, c61);
    a_ik = _mm512_set1_ps(a[r7]);
    c70 = _mm512_fmadd_ps(a_ik, b0, c70);
    c71 = _mm512_fmadd_ps(a_ik, b1, c71);
  }
  // Columns [0, 16) and [16, 32) of the tile that are stored.
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : 0;
  __m512 bias0 = _mm512_setzero_ps(), bias1 = bias0;
  if (!add && bias != nullptr) {
    bias0 = _mm512_maskz_loadu_ps(m0, bias);
    bias1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  }
  const bool whole = cols == kNR;
  auto store_row = [&](int64_t i, __m512 v0, __m512 v1) {
    float* c = C + i * ldc;
    if (add) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), v1);
    } else if (bias != nullptr) {
      v0 = _mm512_add_ps(v0, bias0);
      v1 = _mm512_add_ps(v1, bias1);
    }
    if (residual != nullptr) {  // residual + f, add_forward's order
      const float* r = residual + i * ldc;
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, r), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, r + 16), v1);
    }
    if (relu) {  // max_ps(v, 0) = v > 0 ? v : 0, NaN and -0 included: relu_of
      v0 = _mm512_max_ps(v0, _mm512_setzero_ps());
      v1 = _mm512_max_ps(v1, _mm512_setzero_ps());
    }
    if (whole) {
      _mm512_storeu_ps(c, v0);
      _mm512_storeu_ps(c + 16, v1);
    } else {
      _mm512_mask_storeu_ps(c, m0, v0);
      _mm512_mask_storeu_ps(c + 16, m1, v1);
    }
  };
  store_row(0, c00, c01);
  if (rows > 1) store_row(1, c10, c11);
  if (rows > 2) store_row(2, c20, c21);
  if (rows > 3) store_row(3, c30, c31);
  if (rows > 4) store_row(4, c40, c41);
  if (rows > 5) store_row(5, c50, c51);
  if (rows > 6) store_row(6, c60, c61);
  if (rows > 7) store_row(7, c70, c71);
}
#elif defined(__AVX2__)
// The avx2 micro-kernel is spelled out with intrinsics: GCC vectorizes the plain loops below into
// 128-bit pieces with shuffles for a 6 x 16 tile. Same arithmetic: acc = fma(a_ik, b_kj, acc) for
// k in order, then C = acc (+ bias) or C += acc, then residual + that, then the ReLU.
template <bool kARowsContiguous, bool kClampRows = false>
void micro_kernel(float* C, int64_t ldc, const float* __restrict A, int64_t a_stride, const float* __restrict Bp,
                  int64_t kc, int64_t rows, int64_t cols, bool add, const float* bias, const float* residual,
                  bool relu, [[maybe_unused]] bool exact, int64_t b_stride = kNR) {
  static_assert(kMR == 6 && kNR == 16);
  // Twelve named accumulators, not an array: with an array GCC stores it to the stack every step.
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const int64_t row_step = kARowsContiguous ? 1 : a_stride;  // distance between A(i, k) and A(i+1, k)
  const int64_t k_step = kARowsContiguous ? a_stride : 1;    // distance between A(i, k) and A(i, k+1)
  // Row i's offset in A. With kClampRows (a last row panel of fewer than kMR rows read in place),
  // the rows past `rows` re-read the last one, A having no more: their sums are never stored.
  const int64_t r1 = kClampRows ? std::min<int64_t>(1, rows - 1) * row_step : row_step;
  const int64_t r2 = kClampRows ? std::min<int64_t>(2, rows - 1) * row_step : 2 * row_step;
  const int64_t r3 = kClampRows ? std::min<int64_t>(3, rows - 1) * row_step : 3 * row_step;
  const int64_t r4 = kClampRows ? std::min<int64_t>(4, rows - 1) * row_step : 4 * row_step;
  const int64_t r5 = kClampRows ? std::min<int64_t>(5, rows - 1) * row_step : 5 * row_step;
  // The k loop for a B row stride known at compile time (kNR: a packed panel) or not (B read in
  // place), so the packed case runs the code it ran before in-place B (with a run-time stride it
  // measured 1-3% slower at 512^3 in one stretch, within the noise in another).
  auto steps = [&](auto stride) {
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_loadu_ps(Bp + k * stride);
      const __m256 b1 = _mm256_loadu_ps(Bp + k * stride + 8);
      const float* a = A + k * k_step;
      __m256 a_ik = _mm256_broadcast_ss(a);
      c00 = _mm256_fmadd_ps(a_ik, b0, c00);
      c01 = _mm256_fmadd_ps(a_ik, b1, c01);
      a_ik = _mm256_broadcast_ss(a + r1);
      c10 = _mm256_fmadd_ps(a_ik, b0, c10);
      c11 = _mm256_fmadd_ps(a_ik, b1, c11);
      a_ik = _mm256_broadcast_ss(a + r2);
      c20 = _mm256_fmadd_ps(a_ik, b0, c20);
      c21 = _mm256_fmadd_ps(a_ik, b1, c21);
      a_ik = _mm256_broadcast_ss(a + r3);
      c30 = _mm256_fmadd_ps(a_ik, b0, c30);
      c31 = _mm256_fmadd_ps(a_ik, b1, c31);
      a_ik = _mm256_broadcast_ss(a + r4);
      c40 = _mm256_fmadd_ps(a_ik, b0, c40);
      c41 = _mm256_fmadd_ps(a_ik, b1, c41);
      a_ik = _mm256_broadcast_ss(a + r5);
      c50 = _mm256_fmadd_ps(a_ik, b0, c50);
      c51 = _mm256_fmadd_ps(a_ik, b1, c51);
    }
  };
  if (b_stride == kNR) steps(std::integral_constant<int64_t, kNR>{});
  else steps(b_stride);
  alignas(32) float tile[kMR][kNR];
  const __m256 acc[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (rows == kMR && cols == kNR) {
    const __m256 zero = _mm256_setzero_ps();
    for (int i = 0; i < kMR; ++i) {
      float* c = C + i * ldc;
      __m256 v0 = acc[i][0], v1 = acc[i][1];
      if (add) {
        v0 = _mm256_add_ps(_mm256_loadu_ps(c), v0);
        v1 = _mm256_add_ps(_mm256_loadu_ps(c + 8), v1);
      } else if (bias != nullptr) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(bias));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(bias + 8));
      }
      if (residual != nullptr) {  // residual + f, add_forward's order
        const float* r = residual + i * ldc;
        v0 = _mm256_add_ps(_mm256_loadu_ps(r), v0);
        v1 = _mm256_add_ps(_mm256_loadu_ps(r + 8), v1);
      }
      if (relu) {  // max_ps(v, 0) = v > 0 ? v : 0, NaN and -0 included
        v0 = _mm256_max_ps(v0, zero);
        v1 = _mm256_max_ps(v1, zero);
      }
      _mm256_storeu_ps(c, v0);
      _mm256_storeu_ps(c + 8, v1);
    }
    return;
  }
  for (int i = 0; i < kMR; ++i) {
    _mm256_store_ps(tile[i], acc[i][0]);
    _mm256_store_ps(tile[i] + 8, acc[i][1]);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float v = add ? C[i * ldc + j] + tile[i][j] : bias != nullptr ? tile[i][j] + bias[j] : tile[i][j];
      if (residual != nullptr) v = residual[i * ldc + j] + v;
      C[i * ldc + j] = relu ? relu_of(v) : v;
    }
}
#else
// generic: the micro-kernel reads its operands as doubles, converted once per K block and tile
// (A) or per B panel and K block (B) rather than in its loop: SSE2 has no broadcast from a float
// and no conversion that is not an instruction of its own, and in the loop those took the same
// pipes as the chains' additions and roundings (a 4 x 4 step: ~17 cycles with floats, ~12.5 with
// doubles read as they are used). A panel holds op(A)(i, k) twice, the two lanes of the register
// its row is multiplied with.
struct DoublePanels {
  std::vector<double> a;  // (p_end - p_begin) panels of (kc, kMR, 2), zero past row M
  std::vector<double> b;  // (kc, kNR)
  // which block of A `a` holds (row_panels_times checks it)
  const float* a_data = nullptr;
  int64_t p_begin = -1, p_end = -1, k0 = -1, kc = -1;
};
thread_local DoublePanels t_doubles;

// Row panels [p_begin, p_end) of op(A), steps [k0, k0 + kc), into t_doubles.a. Called by the
// drivers for every K block of every tile, before its B panels: A's values may change between
// calls at the same address, so a block is never reused across calls.
void a_to_doubles(Operand A, int64_t M, int64_t p_begin, int64_t p_end, int64_t k0, int64_t kc) {
  DoublePanels& d = t_doubles;
  const auto size = static_cast<size_t>((p_end - p_begin) * kc * kMR * 2);
  if (d.a.size() < size) d.a.resize(size);
  for (int64_t p = p_begin; p < p_end; ++p) {
    double* dst = d.a.data() + (p - p_begin) * kc * kMR * 2;
    for (int64_t i = 0; i < kMR; ++i) {
      const int64_t row = p * kMR + i;
      double* di = dst + i * 2;
      if (row >= M) {
        for (int64_t k = 0; k < kc; ++k) di[k * kMR * 2] = di[k * kMR * 2 + 1] = 0.0;
        continue;
      }
      const float* src = A.data + row * A.row_stride + k0 * A.k_stride;
      for (int64_t k = 0; k < kc; ++k) di[k * kMR * 2] = di[k * kMR * 2 + 1] = double(src[k * A.k_stride]);
    }
  }
  d.a_data = A.data;
  d.p_begin = p_begin;
  d.p_end = p_end;
  d.k0 = k0;
  d.kc = kc;
}

// The fma chains of a 4 x 4 micro-tile, acc[i][j] = fma(op(A)(i, k), B(k, j), acc) for k in order
// from +0, a and b as a_to_doubles and row_panels_times lay them out; two columns per xmm
// register of doubles, one row of four chains per math::sse2::fma_row (which redoes the rare step
// that may differ from std::fma with fma_exact). Operands must have no tiny values (has_tiny).
// Not inlined: inside the tile loop GCC runs out of the 16 xmm registers and spills the
// accumulators, which puts a store and a load into every chain step.
__attribute__((noinline)) void chain_fast(float (&acc)[kMR][kNR], const double* __restrict a,
                                          const double* __restrict b, int64_t kc) {
  static_assert(kMR == 4 && kNR == 4);
  using math::sse2::fma_row;
  __m128d c00 = _mm_setzero_pd(), c01 = c00, c10 = c00, c11 = c00;
  __m128d c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  for (int64_t k = 0; k < kc; ++k) {
    const __m128d b0 = _mm_load_pd(b + k * kNR);
    const __m128d b1 = _mm_load_pd(b + k * kNR + 2);
    const double* ak = a + k * kMR * 2;
    fma_row(_mm_load_pd(ak), b0, b1, c00, c01);
    fma_row(_mm_load_pd(ak + 2), b0, b1, c10, c11);
    fma_row(_mm_load_pd(ak + 4), b0, b1, c20, c21);
    fma_row(_mm_load_pd(ak + 6), b0, b1, c30, c31);
  }
  using math::sse2::store2;
  store2(acc[0], c00);
  store2(acc[0] + 2, c01);
  store2(acc[1], c10);
  store2(acc[1] + 2, c11);
  store2(acc[2], c20);
  store2(acc[2] + 2, c21);
  store2(acc[3], c30);
  store2(acc[3] + 2, c31);
}

// C (rows, cols) with row stride ldc (+)= op(A) (kMR, kc) @ B (kc, kNR), both as doubles (a: one
// panel of a_to_doubles, b: as row_panels_times converts it); only the top-left rows x cols of the
// kMR x kNR micro-tile are stored. When not adding and bias is given, C = product + bias[j] (the
// linear layer's bias, in the same store). With residual (the last K block of a fused linear +
// residual sum; C's tile in a matrix of C's shape), residual + the value; with relu (the last K
// block of a fused linear + ReLU), what is stored is relu_of the value. exact: an operand has tiny
// values, and every step is fma_exact.
void micro_kernel(float* C, int64_t ldc, const double* __restrict a, const double* __restrict b, int64_t kc,
                  int64_t rows, int64_t cols, bool add, const float* bias, const float* residual, bool relu,
                  bool exact) {
  float acc[kMR][kNR];
  if (!exact) {
    chain_fast(acc, a, b, kc);
  } else {
    for (int64_t i = 0; i < kMR; ++i)
      for (int64_t j = 0; j < kNR; ++j) acc[i][j] = 0.0f;
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t i = 0; i < kMR; ++i) {
        const float a_ik = float(a[(k * kMR + i) * 2]);
        for (int64_t j = 0; j < kNR; ++j) acc[i][j] = multiply_add(a_ik, float(b[k * kNR + j]), acc[i][j]);
      }
  }
  if (!relu && residual == nullptr && rows == kMR && cols == kNR) {  // whole tile: loops of constant length
    if (add) {
      for (int64_t i = 0; i < kMR; ++i)
        for (int64_t j = 0; j < kNR; ++j) C[i * ldc + j] += acc[i][j];
    } else if (bias != nullptr) {
      for (int64_t i = 0; i < kMR; ++i)
        for (int64_t j = 0; j < kNR; ++j) C[i * ldc + j] = acc[i][j] + bias[j];
    } else {
      for (int64_t i = 0; i < kMR; ++i)
        for (int64_t j = 0; j < kNR; ++j) C[i * ldc + j] = acc[i][j];
    }
  } else {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float v = add ? C[i * ldc + j] + acc[i][j] : bias != nullptr ? acc[i][j] + bias[j] : acc[i][j];
        if (residual != nullptr) v = residual[i * ldc + j] + v;  // residual + f, add_forward's order
        C[i * ldc + j] = relu ? relu_of(v) : v;
      }
  }
}

// generic's row_panels_times (the avx paths' is below): the same contract, with A read from
// t_doubles (a_to_doubles of this block; converted here if the caller did not) and b (kc, kNR)
// converted to doubles once for all the row panels. packed_a and pack_begin are not used: a
// ragged last panel is zero-padded by a_to_doubles.
template <bool kARowsContiguous>
void row_panels_times(float* C, int64_t ldc, Operand A, int64_t M, const float* /*packed_a*/,
                      int64_t /*pack_begin*/, int64_t p_begin, int64_t p_end, int64_t k0, int64_t kc, const float* b,
                      [[maybe_unused]] int64_t b_stride, int64_t cols, bool add, const float* bias,
                      const float* residual, bool relu, bool exact) {
  assert(b_stride == kNR);  // generic always packs B
  DoublePanels& d = t_doubles;
  if (d.a_data != A.data || d.p_begin != p_begin || d.p_end != p_end || d.k0 != k0 || d.kc != kc)
    a_to_doubles(A, M, p_begin, p_end, k0, kc);
  if (d.b.size() < static_cast<size_t>(kc * kNR)) d.b.resize(static_cast<size_t>(kc * kNR));
  double* bd = d.b.data();
  for (int64_t k = 0; k < kc; ++k) {
    const __m128 b4 = _mm_loadu_ps(b + k * kNR);
    _mm_store_pd(bd + k * kNR, _mm_cvtps_pd(b4));
    _mm_store_pd(bd + k * kNR + 2, _mm_cvtps_pd(_mm_movehl_ps(b4, b4)));
  }
  for (int64_t p = p_begin; p < p_end; ++p)
    micro_kernel(C + p * kMR * ldc, ldc, d.a.data() + (p - p_begin) * kc * kMR * 2, bd, kc,
                 std::min(kMR, M - p * kMR), cols, add, bias, residual ? residual + p * kMR * ldc : nullptr, relu,
                 exact);
}
#endif

// Scratch buffers reused across calls (grow only). thread_local, so the serial path can run on
// several threads at once and each thread of the pool has its own.
float* thread_buffer(std::vector<float>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
  return buffer.data();
}
thread_local std::vector<float> t_packed_a;
thread_local std::vector<float> t_packed_b;

// Split `panels` into `groups` nearly equal contiguous ranges: group g is [begin, end).
inline int64_t group_begin(int64_t g, int64_t panels, int64_t groups) { return g * panels / groups; }

#if defined(__AVX2__)
// Row panels [p_begin, p_end) of op(A), K block [k0, k0 + kc), times one B panel slice b
// (kc, kNR), its rows b_stride apart (kNR when packed; in place, B's row stride): C's rows of those
// panels, first `cols` columns, (+)= the product (micro_kernel's add, bias and residual, the
// latter laid out like C). Panels from pack_begin on are read from packed_a (consecutive (kc, kMR)
// panels, the first being panel pack_begin), the others in place.
template <bool kARowsContiguous>
void row_panels_times(float* C, int64_t ldc, Operand A, int64_t M, const float* packed_a, int64_t pack_begin,
                      int64_t p_begin, int64_t p_end, int64_t k0, int64_t kc, const float* b,
                      int64_t b_stride, int64_t cols, bool add, const float* bias, const float* residual, bool relu,
                      bool exact) {
  const int64_t a_stride = kARowsContiguous ? A.k_stride : A.row_stride;
  for (int64_t p = p_begin; p < p_end; ++p) {
    float* c = C + p * kMR * ldc;
    const float* r = residual ? residual + p * kMR * ldc : nullptr;
    if (p < pack_begin) {
      const float* a = A.data + p * kMR * A.row_stride + k0 * A.k_stride;
      const int64_t rows = std::min(kMR, M - p * kMR);  // < kMR only for nn / nt (kInPlaceRaggedA)
      if (!kARowsContiguous && rows < kMR)
        micro_kernel<kARowsContiguous, true>(c, ldc, a, a_stride, b, kc, rows, cols, add, bias, r, relu, exact,
                                             b_stride);
      else micro_kernel<kARowsContiguous>(c, ldc, a, a_stride, b, kc, kMR, cols, add, bias, r, relu, exact, b_stride);
    } else {
      const float* a = packed_a + (p - pack_begin) * kc * kMR;
      micro_kernel<true>(c, ldc, a, kMR, b, kc, std::min(kMR, M - p * kMR), cols, add, bias, r, relu, exact,
                         b_stride);
    }
  }
}
#endif

// Pass 1's work, in the order the parts share it: K block by K block, within a block column panel
// by column panel (q), within a panel row panel by row panel (p). Each micro-tile (kb, q, p) of a
// block's partial costs about its kc steps plus kTileOverheadSteps (its accumulators' stores and the
// kernel's entry); part t takes the micro-tiles whose cost prefix lies in [total * t / parts,
// total * (t + 1) / parts): contiguous K, about its own rows, and the parts within one micro-tile's
// cost of each other (cut at whole K blocks, they could be half a block apart). Who computes a
// micro-tile never changes its chain or the order the blocks are added in: the same bits.
constexpr int64_t kTileOverheadSteps = 8;
struct SplitKWork {
  int64_t K, tiles;  // tiles: micro-tiles per block (col_panels * row_panels)
  int64_t block_cost(int64_t kb) const { return (std::min(kKC, K - kb * kKC) + kTileOverheadSteps) * tiles; }
  int64_t total() const {
    const int64_t full = K / kKC;
    return full * (kKC + kTileOverheadSteps) * tiles + (K % kKC ? block_cost(full) : 0);
  }
  // The first micro-tile, as a global index kb * tiles + u, whose cost prefix reaches `cost`.
  int64_t first_tile_at(int64_t cost) const {
    const int64_t full_cost = (kKC + kTileOverheadSteps) * tiles;
    int64_t kb = std::min(cost / full_cost, K / kKC);
    int64_t rest = cost - kb * full_cost;
    const int64_t k_blocks = (K + kKC - 1) / kKC;
    if (kb >= k_blocks) return k_blocks * tiles;
    const int64_t per_tile = std::min(kKC, K - kb * kKC) + kTileOverheadSteps;
    return kb * tiles + std::min(tiles, (rest + per_tile / 2) / per_tile);
  }
};

// A weight gradient dW = dY^T X (tn), split over K instead of over C. K is the batch's tokens
// there and C is small, so a split of C makes every thread read every token's rows of dY and X,
// half of them from the other core's cache, where the row-split GEMMs and row-wise kernels before
// it left them. Here thread t takes a contiguous run of K, about its own rows (SplitKWork). Each
// block's chain is computed from zero into that block's partial matrix, exactly as the tiled path
// computes it; then the partials are added to C block by block, in order: C = ((C + b0) + b1) +
// ..., or (b0 + b1) + ... when not accumulating, the tiled path's sequence of stores. So the bits
// are the same.
template <bool kARowsContiguous>
void gemm_split_k(float* C, Operand A, Operand B, int64_t M, int64_t K, int64_t N, bool accumulate, int64_t threads,
                  bool exact) {
  const int64_t row_panels = (M + kMR - 1) / kMR;
  const int64_t col_panels = (N + kNR - 1) / kNR;
  const int64_t k_blocks = (K + kKC - 1) / kKC;
  const bool pack_a = kARowsContiguous && M > kMaxInPlaceTnRows;
  // Row panels from pack_begin on are packed per block: all of them when pack_a, else only a
  // ragged last one.
  const int64_t pack_begin = pack_a ? 0 : (M % kMR != 0 ? row_panels - 1 : row_panels);
  thread_local std::vector<float> t_partials;
  float* partials = thread_buffer(t_partials, k_blocks * M * N);  // (k_blocks, M, N)

  const int64_t team = threads;
  const SplitKWork work{K, col_panels * row_panels};
  const int64_t total = work.total();
  // Pass 1: part t computes the micro-tiles [first, last) of the blocks' partials (SplitKWork).
  run_parts(team, [&](int64_t t) {
    const int64_t first = work.first_tile_at(total * t / team), last = work.first_tile_at(total * (t + 1) / team);
    for (int64_t kb = first / work.tiles; kb * work.tiles < last; ++kb) {
      const int64_t u_begin = std::max(first - kb * work.tiles, int64_t{0});
      const int64_t u_end = std::min(last - kb * work.tiles, work.tiles);
      const int64_t k0 = kb * kKC, kc = std::min(kKC, K - k0);
      float* packed_a = thread_buffer(t_packed_a, (row_panels - pack_begin) * kc * kMR);
      pack_a_panels(packed_a, A, M, pack_begin, row_panels, k0, kc);
#if !defined(__AVX2__)
      a_to_doubles(A, M, 0, row_panels, k0, kc);  // generic: the micro-kernel reads A as doubles
#endif
      float* packed_b = thread_buffer(t_packed_b, kc * kNR);
      float* part = partials + kb * M * N;
      for (int64_t q = u_begin / row_panels; q * row_panels < u_end; ++q) {
        const int64_t p_begin = std::max(u_begin - q * row_panels, int64_t{0});
        const int64_t p_end = std::min(u_end - q * row_panels, row_panels);
        const int64_t cols = std::min(kNR, N - q * kNR);
        pack_panel<kNR>(packed_b, B.data + q * kNR * B.row_stride + k0 * B.k_stride, B.row_stride, B.k_stride, cols,
                        kc);
        row_panels_times<kARowsContiguous>(part + q * kNR, N, A, M, packed_a, pack_begin, p_begin, p_end, k0, kc,
                                           packed_b, kNR, cols, false, nullptr, nullptr, false, exact);
      }
    }
  });
  // Pass 2: the partials into C, block by block in order; rows split over the parts.
  run_parts(team, [&](int64_t t) {
    const int64_t i_begin = M * t / team, i_end = M * (t + 1) / team;
    for (int64_t i = i_begin; i < i_end; ++i) {
      float* c = C + i * N;
      const float* b0 = partials + i * N;
      if (accumulate) {
        for (int64_t j = 0; j < N; ++j) c[j] += b0[j];
      } else {
        for (int64_t j = 0; j < N; ++j) c[j] = b0[j];
      }
      for (int64_t kb = 1; kb < k_blocks; ++kb) {
        const float* b = partials + (kb * M + i) * N;
        for (int64_t j = 0; j < N; ++j) c[j] += b[j];
      }
    }
  });
}

// C (M,N) (+)= op(A) (M,K) @ op(B) (K,N). The Operand B describes op(B)^T: its rows are the
// columns of C. kARowsContiguous is A.row_stride == 1 (tn), as a template parameter for the
// kernel.
template <bool kARowsContiguous>
void gemm(float* C, Operand A, Operand B, int64_t M, int64_t K, int64_t N, bool accumulate, bool parallel,
          const float* bias = nullptr, const float* residual = nullptr, bool relu = false) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float& c = C[i * N + j];
        if (!accumulate) c = bias != nullptr ? bias[j] : 0.0f;
        if (residual != nullptr) c = residual[i * N + j] + c;
        if (relu) c = relu_of(c);
      }
    return;
  }
  if (M * N * K < kMinParallelMacs) parallel = false;
    // generic: the micro-kernel's fast fma needs operands without tiny values (math/exact_fma.hpp);
    // A and B are each one contiguous block of M * K and K * N floats in every layout.
#if defined(__AVX2__)
  constexpr bool exact = false;
#else
  const bool exact = math::has_tiny(A.data, M * K) || math::has_tiny(B.data, K * N);
#endif
  // A resting pool runs the parts on this thread anyway: then one part, which is split-K's partials
  // and their sum saved (the bits do not depend on the split).
  const int64_t threads = parallel_parts(parallel && !pool_resting());
  if (kARowsContiguous && !relu && residual == nullptr && threads > 1 && M * N <= kMaxSplitKOutput &&
      (K + kKC - 1) / kKC * M * N <= kMaxSplitKPartials && K >= kKC * threads) {
    gemm_split_k<kARowsContiguous>(C, A, B, M, K, N, accumulate, threads, exact);
    return;
  }
  const int64_t row_panels = (M + kMR - 1) / kMR;
  const int64_t col_panels = (N + kNR - 1) / kNR;

  // Tiles: a grid of row_groups x col_groups, each tile packs the B panels of its columns itself
  // (no barrier, and the packed panels sit in the cache of the core that uses them). With several
  // threads, refine the grid until the tile count is a multiple of the thread count, so that
  // schedule(static) gives every thread the same work. Split the columns when N >= M: every
  // thread then reads all of A (M x K) but packs only its share of B; split the rows otherwise:
  // every thread packs all of B (K x N), the smaller operand. The grid only decides who computes
  // what, never how an element is summed.
  int64_t row_groups = (row_panels + kMaxTileRowPanels - 1) / kMaxTileRowPanels;
  int64_t col_groups = (col_panels + kMaxTileColPanels - 1) / kMaxTileColPanels;
  const bool split_columns_first = N >= M;
  while ((row_groups * col_groups) % threads != 0) {
    if (split_columns_first && col_groups < col_panels) ++col_groups;
    else if (row_groups < row_panels) ++row_groups;
    else if (col_groups < col_panels) ++col_groups;
    else break;
  }
  const int64_t tiles = row_groups * col_groups;
  const int64_t max_tile_col_panels = (col_panels + col_groups - 1) / col_groups;

  // A is read in place, except for tn with many rows: its step k then reads 8 floats at a
  // stride of M floats, a new page every few steps, and the L1 and TLB miss on every step.
  const bool pack_a = kARowsContiguous && M > kMaxInPlaceTnRows;

  // nn and tn on the FMA paths, when B's rows are short (N <= 256: a weight's or a model's
  // activations): its whole panels are read in place, their rows B.k_stride = N apart, instead of
  // copied into packed panels first; the kernels read the same values in the same order. At 135
  // rows a packed panel serves only 17 row panels, and the copy was 3-11% of each product
  // (135x64x256 tn 18.8 -> 16.8 us); at 1040 rows 64x1040x256 tn 148 -> 130 us, the others
  // within +-2%.
#if defined(__AVX2__)
  const bool b_in_place = B.row_stride == 1 && N <= kMaxInPlaceBRowStride && K * N <= kMaxInPlaceB;
#else
  constexpr bool b_in_place = false;
#endif
  // Tile t covers column group t / row_groups and row group t % row_groups: the consecutive
  // tiles a thread gets under schedule(static) mostly share their columns, and packed_col_group
  // (the group whose B panels the thread's buffer holds) lets them reuse the packed panels.
  auto run_tile = [&](int64_t t, int64_t& packed_col_group) {
    const int64_t col_group = t / row_groups, row_group = t % row_groups;
    const int64_t p_begin = group_begin(row_group, row_panels, row_groups);
    const int64_t p_end = group_begin(row_group + 1, row_panels, row_groups);
    const int64_t q_begin = group_begin(col_group, col_panels, col_groups);
    const int64_t q_end = group_begin(col_group + 1, col_panels, col_groups);

    // packed B: the tile's column panels, each (K, kNR), zero-padded past N (only a last panel of
    // fewer than kNR columns when b_in_place). Packed even when its layout would allow reading it
    // in place if its rows are long: a panel's slice for one K block is then contiguous and stays in L1
    // while the row panels of A stream past it.
    float* packed_b = thread_buffer(t_packed_b, max_tile_col_panels * K * kNR);
    if (packed_col_group != col_group) {
      for (int64_t q = q_begin; q < q_end; ++q) {
        if (b_in_place && N - q * kNR >= kNR) continue;
        pack_panel<kNR>(packed_b + (q - q_begin) * K * kNR, B.data + q * kNR * B.row_stride, B.row_stride, B.k_stride,
                        std::min(kNR, N - q * kNR), K);
      }
      packed_col_group = col_group;
    }

    // Row panels [pack_begin, p_end) are copied into (kc, kMR) panels before use: every panel of
    // the tile when pack_a, else only a last panel of fewer than kMR rows (zero-padded), unless
    // the kernel reads that one in place too (kInPlaceRaggedA).
    const bool ragged = p_end == row_panels && M % kMR != 0 && !(kInPlaceRaggedA && !kARowsContiguous);
    const int64_t pack_begin = pack_a ? p_begin : (ragged ? p_end - 1 : p_end);
    float* packed_a = thread_buffer(t_packed_a, (p_end - pack_begin) * kKC * kMR);
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      pack_a_panels(packed_a, A, M, pack_begin, p_end, k0, kc);
#if !defined(__AVX2__)
      a_to_doubles(A, M, p_begin, p_end, k0, kc);  // generic: the micro-kernel reads A as doubles
#endif
      // The first K block overwrites C (with the bias added, if any) unless accumulating; later
      // blocks add to it. The last one adds the residual and applies the ReLU, if any, as it stores.
      const bool add = accumulate || k0 > 0;
      const bool last_block = k0 + kc == K;
      const bool relu_now = relu && last_block;
      for (int64_t q = q_begin; q < q_end; ++q) {
        const int64_t cols = std::min(kNR, N - q * kNR);
        const bool in_place = b_in_place && cols == kNR;
        const float* b = in_place ? B.data + q * kNR + k0 * B.k_stride : packed_b + (q - q_begin) * K * kNR + k0 * kNR;
        const float* bias_q = bias != nullptr ? bias + q * kNR : nullptr;
        const float* residual_q = residual != nullptr && last_block ? residual + q * kNR : nullptr;
        row_panels_times<kARowsContiguous>(C + q * kNR, N, A, M, packed_a, pack_begin, p_begin, p_end, k0, kc, b,
                                           in_place ? B.k_stride : kNR, cols, add, bias_q, residual_q, relu_now,
                                           exact);
      }
    }
  };

  if (threads > 1) {
    for_blocks(tiles, threads, [&](int64_t begin, int64_t end) {
      int64_t packed_col_group = -1;
      for (int64_t t = begin; t < end; ++t) run_tile(t, packed_col_group);
    });
  } else {
    int64_t packed_col_group = -1;
    for (int64_t t = 0; t < tiles; ++t) run_tile(t, packed_col_group);
  }
}

}  // namespace

void matmul_nn(float* C, const float* A, const float* B, int64_t M, int64_t K, int64_t N, bool accumulate,
               bool parallel) {
  // A (M,K): A(i,k) = A[i*K + k].  B (K,N): column j of C reads B[k*N + j].
  gemm<false>(C, Operand{A, K, 1}, Operand{B, 1, N}, M, K, N, accumulate, parallel);
}

void matmul_nt(float* C, const float* A, const float* B, int64_t M, int64_t K, int64_t N, bool accumulate,
               bool parallel) {
  // A (M,K): A(i,k) = A[i*K + k].  B stored (N,K): column j of C reads B[j*K + k].
  gemm<false>(C, Operand{A, K, 1}, Operand{B, K, 1}, M, K, N, accumulate, parallel);
}

void matmul_nt_bias(float* C, const float* A, const float* B, const float* bias, const float* residual, int64_t M,
                    int64_t K, int64_t N, bool relu) {
  gemm<false>(C, Operand{A, K, 1}, Operand{B, K, 1}, M, K, N, /*accumulate=*/false, /*parallel=*/true, bias, residual,
              relu);
}

void matmul_tn(float* C, const float* A, const float* B, int64_t M, int64_t K, int64_t N, bool accumulate,
               bool parallel) {
  // A stored (K,M): A^T(i,k) = A[k*M + i].  B (K,N): column j of C reads B[k*N + j].
  gemm<true>(C, Operand{A, 1, M}, Operand{B, 1, N}, M, K, N, accumulate, parallel);
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
