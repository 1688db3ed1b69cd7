// Packed multi-head attention, computed the way flash attention does it: the (L, L) matrix of
// probabilities is never stored. Each (sequence, head) pair is worked through in blocks of
// kQueryBlock query rows; a block's scores against all the keys of its sequence live in a
// per-thread scratch (kQueryBlock, L), and only two numbers per query row are kept for the
// backward pass: the row's largest raw score and 1 / (sum of its exponentials). The backward pass
// recomputes the block's exponentials from them, bit for bit the forward's. (Sequences of at most
// 256 tokens keep their exponentials instead, at most 256 floats per row: see keeps_exps.)
//
// Why blocks of whole rows and not the online softmax over key tiles of GPU flash attention: a
// block's row of scores (kQueryBlock x L floats, 192 KB at L = 1024) fits in a CPU core's L2, and
// with the full row the softmax is the ordinary one (max, exp, sum), with nothing rescaled as key
// tiles arrive. What flash attention is for is kept: memory linear in L (the cache is 2 floats per
// token and head), and every product runs as a register-tiled kernel over blocks that stay in
// cache.
//
// Forward, per pair and query block Qb (rows i0..i0+rows of q, scale = 1/sqrt(hd)):
//   S = Qb K^T                       (rows, L)   raw scores
//   m_i = max_j S_ij,  e_ij = exp((S_ij - m_i) * scale),  inv_i = 1 / sum_j e_ij
//   Ob = (e V) * inv                 (rows, hd)  = P V with P = e * inv, normalized in hd numbers
// Backward, per pair and query block, with e recomputed from m:
//   dP = dOb V^T,  dS = P * (dP - rowsum(P * dP)) * scale = e * (dP - inv * rowsum(e * dP)) * inv * scale
//   dV += e^T (dOb * inv),  dQb = dS K,  dK += dS^T Qb

// Every product is one kernel: C (R, NV vectors) (+)= sum over k, in order, of A(r, k) * B(k, :),
// one fma chain per element of C, with A read through two strides (so e^T and dS^T are read in
// place, never transposed) and B's rows contiguous and padded to a multiple of 16 floats. The
// register tile (R, NV) differs per path; the order of every sum does not: fma chains over k,
// kQueryBlock the same on every path (dK and dV add one block's chain at a time), row sums over
// 16 fixed lanes. So every path gives the same bits.
#include "normlab/kernels/attention.hpp"
#include "attention_exp.hpp"
#include "isa_kernels.hpp"
#include "lanes.hpp"
#include "transpose.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/exact_fma.hpp"
#include "normlab/kernels/math.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {

// Query rows per block: the same on every path, since dK and dV are summed block by block.
constexpr int64_t kQueryBlock = 48;
// Rows of B (and of the scratch matrices) are padded to a multiple of this many floats.
constexpr int64_t kPad = 16;

inline int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// Row stride of the scratch matrices with Lp columns (kT, vT, S, E, dS): Lp floats and one more
// cache line when Lp is an even number of lines. The products walk down their columns (B's rows
// k = 0..hd, and e^T, dS^T read in place over a block's rows); at a stride of a power-of-two
// kilobytes every row of such a column lands in the same few sets of the L1 cache (one set at
// L = 1024), more rows than its ways, and each load misses. An odd number of lines spreads them
// over all the sets.
inline int64_t scratch_ld(int64_t Lp) { return (Lp / kPad) % 2 == 0 ? Lp + kPad : Lp; }

// ---- one vector of floats, per path -------------------------------------------------------------
#if defined(__AVX512F__)
constexpr int64_t kW = 16;
using vf = __m512;
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vf x) { _mm512_storeu_ps(p, x); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vfma(float a, vf b, vf c) { return _mm512_fmadd_ps(_mm512_set1_ps(a), b, c); }
inline vf vset1(float a) { return _mm512_set1_ps(a); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vexp(vf x) { return exp16_nonpositive(x); }
// x with the lanes from n on set to 0 (all kept when n >= kW)
inline vf keep_first(vf x, int64_t n) {
  return n >= kW ? x : _mm512_maskz_mov_ps(__mmask16((1u << std::max<int64_t>(n, 0)) - 1), x);
}
// Register tiles: (12, 2 zmm) = 24 accumulators, or (24, 1 zmm); of 32 zmm. When A's rows are
// far apart (row_stride > 1) each row needs its own pointer, and 24 of them do not fit the 16
// general registers: 8 rows then.
constexpr int kRowsWide = 12;
constexpr int kRowsNarrow = 24;
constexpr int kRowsStrided = 8;
#elif defined(__AVX2__)
constexpr int64_t kW = 8;
using vf = __m256;
inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vf x) { _mm256_storeu_ps(p, x); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vfma(float a, vf b, vf c) { return _mm256_fmadd_ps(_mm256_set1_ps(a), b, c); }
inline vf vset1(float a) { return _mm256_set1_ps(a); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vexp(vf x) { return exp8_nonpositive(x); }
inline vf keep_first(vf x, int64_t n) {
  if (n >= kW) return x;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::max<int64_t>(n, 0))), lane);
  return _mm256_and_ps(x, _mm256_castsi256_ps(keep));
}
// (6, 2 ymm) = 12 accumulators, or (12, 1 ymm); of 16 ymm. 6 rows when A's rows are apart.
constexpr int kRowsWide = 6;
constexpr int kRowsNarrow = 12;
constexpr int kRowsStrided = 6;
#else
// generic: four floats per "vector", held as doubles in two xmm registers, and the exact fma of
// math/exact_fma.hpp (the tile kernel below has its own generic version).
constexpr int64_t kW = 4;
// (2, 2 x 4 floats) = 8 xmm accumulators, or (4, 4 floats); of SSE2's 16.
constexpr int kRowsWide = 2;
constexpr int kRowsNarrow = 4;
constexpr int kRowsStrided = 2;
#endif

// ---- the product kernel -------------------------------------------------------------------------

// An operand read as a matrix: A(r, k) = data[r * row_stride + k * k_stride].
struct Strided {
  const float* data;
  int64_t row_stride;
  int64_t k_stride;
};

#if defined(__AVX2__)
// The chains of one register tile: chain(r, v) = sum_{k < K} A(r, k) * B(k, v*kW : (v+1)*kW), B's
// row k at b + k * ldb, one fma chain per element, k in order; each handed to store(r, v, chain).
template <int R, int NV, class Store>
__attribute__((always_inline)) inline void tile_chains(Strided A, const float* b, int64_t ldb, int64_t K,
                                                       Store&& store) {
  vf acc[R][NV];
#pragma GCC unroll 32
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[r][v] = vzero();
  const float* a = A.data;
  for (int64_t k = 0; k < K; k++) {
    vf bk[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) bk[v] = vload(b + k * ldb + v * kW);
    const float* ak = a + k * A.k_stride;
#pragma GCC unroll 32
    for (int r = 0; r < R; r++) {
      const float x = ak[r * A.row_stride];
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) acc[r][v] = vfma(x, bk[v], acc[r][v]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) store(r, v, acc[r][v]);
}

// C (R, NV*kW) (+)= the tile's chains: C = chain, or C += chain when add.
template <int R, int NV>
__attribute__((always_inline)) inline void tile(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb,
                                                int64_t K, bool add, [[maybe_unused]] bool exact) {
  tile_chains<R, NV>(A, b, ldb, K, [&](int r, int v, vf chain) {
    float* cr = c + r * ldc + v * kW;
    vstore(cr, add ? vadd(vload(cr), chain) : chain);
  });
}

#else
// generic: the same chains, two columns per xmm register of doubles with math::sse2::fma_row
// (which redoes the rare step that may differ from std::fma with fma_exact); when the operands
// have tiny values (exact), the tile's chains run with math::fma_exact.
template <int R, int NV>
inline void tile(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int64_t K, bool add, bool exact) {
  constexpr int kCols = NV * int(kW);
  constexpr int kX = kCols / 2;  // xmm per row
  float acc[R][kCols];
  if (!exact) {
    using namespace math::sse2;
    __m128d x[R][kX];
#pragma GCC unroll 32
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
      for (int j = 0; j < kX; j++) x[r][j] = _mm_setzero_pd();
    for (int64_t k = 0; k < K; k++) {
      __m128d bk[kX];
      const float* bp = b + k * ldb;
#pragma GCC unroll 8
      for (int j = 0; j < kX; j += 2) {
        const __m128 b4 = _mm_loadu_ps(bp + 2 * j);
        bk[j] = _mm_cvtps_pd(b4);
        bk[j + 1] = _mm_cvtps_pd(_mm_movehl_ps(b4, b4));
      }
      const float* ak = A.data + k * A.k_stride;
#pragma GCC unroll 32
      for (int r = 0; r < R; r++) {
        const __m128d a = broadcast(ak[r * A.row_stride]);
#pragma GCC unroll 8
        for (int j = 0; j < kX; j += 2) fma_row(a, bk[j], bk[j + 1], x[r][j], x[r][j + 1]);
      }
    }
#pragma GCC unroll 32
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
      for (int j = 0; j < kX; j++) store2(acc[r] + 2 * j, x[r][j]);
  } else {
    for (int r = 0; r < R; r++)
      for (int j = 0; j < kCols; j++) {
        float chain = 0.0f;
        for (int64_t k = 0; k < K; k++)
          chain = math::fma_exact(A.data[r * A.row_stride + k * A.k_stride], b[k * ldb + j], chain);
        acc[r][j] = chain;
      }
  }
  for (int r = 0; r < R; r++) {
    float* cr = c + r * ldc;
    for (int j = 0; j < kCols; j++) cr[j] = add ? cr[j] + acc[r][j] : acc[r][j];
  }
}
#endif

// The last rows of C, 0 < n < R of them, as one tile of n rows (short sequences have blocks of a
// few rows, and single-row tiles would run one fma chain per vector at a time).
template <int R, int NV>
inline void tile_tail(int64_t n, float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int64_t K, bool add,
                      bool exact) {
  if constexpr (R > 1) {
    if (n == R - 1) {
      tile<R - 1, NV>(c, ldc, A, b, ldb, K, add, exact);
    } else {
      tile_tail<R - 1, NV>(n, c, ldc, A, b, ldb, K, add, exact);
    }
  }
}

// The rows [0, M) of C (M, NV*kW), in tiles of R rows, then one tile of the rows left.
template <int R, int NV>
inline void tile_rows(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int64_t M, int64_t K, bool add,
                      bool exact) {
  int64_t i = 0;
  for (; i + R <= M; i += R)
    tile<R, NV>(c + i * ldc, ldc, Strided{A.data + i * A.row_stride, A.row_stride, A.k_stride}, b, ldb, K, add, exact);
  if (i < M)
    tile_tail<R, NV>(M - i, c + i * ldc, ldc, Strided{A.data + i * A.row_stride, A.row_stride, A.k_stride}, b, ldb, K,
                     add, exact);
}

// C (M, N) (+)= A (M, K) @ B (K, N). N is a multiple of kPad; B's rows have stride ldb, C's ldc.
// Column panels of 2 vectors (B's slice, K x 2 vectors, stays in L1 while the rows go by), and a
// last panel of one vector when N leaves one.
void product(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int64_t M, int64_t K, int64_t N, bool add) {
  // generic: fma_row needs operands without tiny values (math/exact_fma.hpp). A is M rows of K
  // (k_stride 1) or K rows of M (row_stride 1); B is K rows of N.
#if defined(__AVX2__)
  constexpr bool exact = false;
#else
  const bool exact =
      (A.k_stride == 1 ? math::has_tiny(A.data, M, K, A.row_stride) : math::has_tiny(A.data, K, M, A.k_stride)) ||
      math::has_tiny(b, K, N, ldb);
#endif
  int64_t j = 0;
  if (A.row_stride == 1) {
    for (; j + 2 * kW <= N; j += 2 * kW) tile_rows<kRowsWide, 2>(c + j, ldc, A, b + j, ldb, M, K, add, exact);
    for (; j < N; j += kW) tile_rows<kRowsNarrow, 1>(c + j, ldc, A, b + j, ldb, M, K, add, exact);
  } else {
    for (; j + 2 * kW <= N; j += 2 * kW) tile_rows<kRowsStrided, 2>(c + j, ldc, A, b + j, ldb, M, K, add, exact);
    for (; j < N; j += kW) tile_rows<kRowsStrided, 1>(c + j, ldc, A, b + j, ldb, M, K, add, exact);
  }
}

// ---- row-wise pieces ----------------------------------------------------------------------------

// Rows of hd floats, element by element (the same operations on every path): dst = src * x,
// dst += src, dst = src. Short sequences do these per row as often as they do products.
inline void scale_row(float* dst, const float* src, float x, int64_t n) {
  int64_t c = 0;
#if defined(__AVX2__)
  const __m256 xv = _mm256_set1_ps(x);
  for (; c + 8 <= n; c += 8) _mm256_storeu_ps(dst + c, _mm256_mul_ps(_mm256_loadu_ps(src + c), xv));
#endif
  for (; c < n; c++) dst[c] = src[c] * x;
}
inline void add_row(float* dst, const float* src, int64_t n) {
  int64_t c = 0;
#if defined(__AVX2__)
  for (; c + 8 <= n; c += 8)
    _mm256_storeu_ps(dst + c, _mm256_add_ps(_mm256_loadu_ps(dst + c), _mm256_loadu_ps(src + c)));
#endif
  for (; c < n; c++) dst[c] += src[c];
}
inline void copy_row(float* dst, const float* src, int64_t n) {
  int64_t c = 0;
#if defined(__AVX2__)
  for (; c + 8 <= n; c += 8) _mm256_storeu_ps(dst + c, _mm256_loadu_ps(src + c));
#endif
  for (; c < n; c++) dst[c] = src[c];
}

// dst += src when accumulating, else dst = src.
inline void store_row(float* dst, const float* src, int64_t n, bool accumulate) {
  if (accumulate) add_row(dst, src, n);
  else copy_row(dst, src, n);
}

// dst (rows, ld) = src (rows, cols) with row stride src_ld, zero past cols.
void copy_padded(float* dst, int64_t ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    copy_row(dst + r * ld, src + r * src_ld, cols);
    std::fill(dst + r * ld + cols, dst + (r + 1) * ld, 0.0f);
  }
}

#if defined(__AVX2__)
// dst (8, ld) at columns [0, 8) = src (8 rows, 8 columns)^T, src's row stride src_ld; rows past n
// (n <= 8) read as zero.
inline void transpose8x8(float* dst, int64_t ld, const float* src, int64_t src_ld, int64_t n) {
  __m256 r[8];
  for (int i = 0; i < 8; i++) r[i] = i < n ? _mm256_loadu_ps(src + i * src_ld) : _mm256_setzero_ps();
  transpose8(r);
  for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + i * ld, r[i]);
}
#endif

// dst (cols, ld) = src (rows, cols)^T with src's row stride src_ld; dst is zero past rows. ld is a
// multiple of kPad (so a block of 8 columns of dst starting below rows fits in the row).
void transpose_padded(float* dst, int64_t ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; c++) std::fill(dst + c * ld + rows, dst + (c + 1) * ld, 0.0f);
  int64_t c0 = 0;
#if defined(__AVX2__)
  // 8 x 8 blocks; the last block of rows reads its missing rows as zero (dst's padding)
  for (; c0 + 8 <= cols; c0 += 8)
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
      transpose8x8(dst + c0 * ld + r0, ld, src + r0 * src_ld + c0, src_ld, std::min<int64_t>(8, rows - r0));
#endif
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = c0; c < cols; c++) dst[c * ld + r] = src[r * src_ld + c];
}

// sum of x[j] * y[j] over [0, n), n a multiple of kLanes: lane l sums j = l, l + 16, ... in order.
float lane_dot(const float* x, const float* y, int64_t n) {
#if defined(__AVX2__)
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += kLanes) {
    lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(x + j + 8), _mm256_loadu_ps(y + j + 8)));
  }
  return sum_halves(_mm256_add_ps(lo, hi));
#else
  float lanes[kLanes] = {};
  for (int64_t j = 0; j < n; j += kLanes)
#pragma omp simd
    for (int64_t l = 0; l < kLanes; l++) lanes[l] += x[j + l] * y[j + l];
  return sum_lanes(lanes);
#endif
}

// Every row loop below runs over whole chunks of kLanes floats (rows are padded to a multiple of
// kLanes), so it vectorizes with no scalar remainder: for rows of a few dozen keys a scalar tail
// of exps would cost as much as the vector body. `omp simd` on the 16-lane loops: without it GCC
// unrolls them into 16 scalar copies on the avx2 path (two ymm per chunk) and never vectorizes the
// exp, which made avx2 attention 4x slower than avx512 instead of 2x. Every lane is its own
// computation, so vectorizing changes no bits.

// Largest of s[0..Lp), Lp a multiple of kLanes (padding set to -inf by the caller).
// Lane l keeps the largest of s[l], s[l + 16], ... (the first of equals: a NaN never enters, and
// of +0 and -0 the first stays); the lanes then fold in order, lane 0 first, the same way.
float row_max(const float* s, int64_t Lp) {
#if defined(__AVX2__)
  // max_ps(x, acc) = x > acc ? x : acc = std::max(acc, x), NaN and zeros alike
  __m256 lo = _mm256_set1_ps(-INFINITY), hi = lo;
  for (int64_t j = 0; j < Lp; j += kLanes) {
    lo = _mm256_max_ps(_mm256_loadu_ps(s + j), lo);
    hi = _mm256_max_ps(_mm256_loadu_ps(s + j + 8), hi);
  }
  // The lanes hold no NaN, so any order of folding gives the largest value; only its sign when it
  // is zero (+0 and -0 compare equal) depends on the order: then fold lane by lane as below.
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(_mm256_max_ps(lo, hi)), _mm256_extractf128_ps(_mm256_max_ps(lo, hi), 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
  const float m = _mm_cvtss_f32(x);
  if (m != 0.0f) return m;
  float lanes[kLanes];
  _mm256_storeu_ps(lanes, lo);
  _mm256_storeu_ps(lanes + 8, hi);
#else
  float lanes[kLanes];
  for (int64_t l = 0; l < kLanes; l++) lanes[l] = -INFINITY;
  for (int64_t j = 0; j < Lp; j += kLanes)
#pragma omp simd
    for (int64_t l = 0; l < kLanes; l++) lanes[l] = std::max(lanes[l], s[j + l]);
#endif
  float m0 = lanes[0];
  for (int64_t l = 1; l < kLanes; l++) m0 = std::max(m0, lanes[l]);
  return m0;
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// (min_j s_j - max) * scale over the real scores s[0..L): a lower bound of every real argument of
// the row's exponentials. NaN scores are left out (min_ps(x, acc) keeps acc for a NaN x): they
// give NaN arguments, which exp8_in_range takes.
inline float row_min_argument(const float* s, int64_t L, float m, float scale) {
  __m256 lo = _mm256_set1_ps(INFINITY);
  int64_t j = 0;
  for (; j + 8 <= L; j += 8) lo = _mm256_min_ps(_mm256_loadu_ps(s + j), lo);
  __m128 x = _mm_min_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1));
  x = _mm_min_ps(x, _mm_movehl_ps(x, x));
  x = _mm_min_ss(x, _mm_shuffle_ps(x, x, 1));
  float mn = _mm_cvtss_f32(x);
  for (; j < L; j++) mn = s[j] < mn ? s[j] : mn;
  return (mn - m) * scale;
}
#endif

// Row of raw scores s (Lp floats, the first L real) -> exponentials e_j = exp((s_j - max) * scale)
// in place, zero past L. stats gets {max raw score, 1 / sum of the exponentials}. The row is not
// normalized here: the caller scales the product e V by 1 / sum instead (hd numbers, not L).
void softmax_row(float* s, int64_t L, int64_t Lp, float scale, float* stats) {
  std::fill(s + L, s + Lp, -INFINITY);  // exp(-inf) = 0: the padding drops out of max and sum
  const float m = row_max(s, Lp);
  stats[0] = m;
#if defined(__AVX512F__)
  const __m512 mv = _mm512_set1_ps(m), sv = _mm512_set1_ps(scale);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < Lp; j += kLanes) {
    const __m512 e = exp16_nonpositive(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv), sv));
    _mm512_storeu_ps(s + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  // sum_lanes' additions on registers: lanes l + l+8, then sum_halves (the same order, the same
  // bits). Not through a stack array: GCC 12's AddressSanitizer with detect_stack_use_after_return
  // gives this frame a bad fake-stack address and the store faults (scripts/check/sanitize.sh).
  // (maskz extracts: GCC 12 warns about the undefined passthrough of the plain ones and of the cast)
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(sum), 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(sum), 1));
  stats[1] = 1.0f / sum_halves(_mm256_add_ps(lo, hi));
#elif defined(__AVX2__)
  const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(scale);
  __m256 lo = _mm256_setzero_ps(), hi = lo;
  // When the row's smallest real score gives an argument of at least -86, every real argument is
  // in [-86, 0] or a quiet NaN (s - max and the product by scale round monotonically), and the
  // whole chunks of real scores take exp8_in_range: the same bits in fewer instructions. The
  // chunk holding the padding (-inf) takes exp8_nonpositive; the sums run in the same order.
  int64_t j = 0;
  if (row_min_argument(s, L, m, scale) >= -86.0f) {
    for (; j + kLanes <= L; j += kLanes) {
      const __m256 e_lo = exp8_in_range(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv), sv));
      const __m256 e_hi = exp8_in_range(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), mv), sv));
      _mm256_storeu_ps(s + j, e_lo);
      _mm256_storeu_ps(s + j + 8, e_hi);
      lo = _mm256_add_ps(lo, e_lo);
      hi = _mm256_add_ps(hi, e_hi);
    }
  }
  for (; j < Lp; j += kLanes) {
    const __m256 e_lo = exp8_nonpositive(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv), sv));
    const __m256 e_hi = exp8_nonpositive(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), mv), sv));
    _mm256_storeu_ps(s + j, e_lo);
    _mm256_storeu_ps(s + j + 8, e_hi);
    lo = _mm256_add_ps(lo, e_lo);
    hi = _mm256_add_ps(hi, e_hi);
  }
  stats[1] = 1.0f / sum_halves(_mm256_add_ps(lo, hi));
#else
  float lanes[kLanes] = {};
  for (int64_t j = 0; j < Lp; j += kLanes)
#pragma omp simd
    for (int64_t l = 0; l < kLanes; l++) {
      const float e = math::exp((s[j + l] - m) * scale);
      s[j + l] = e;
      lanes[l] += e;
    }
  stats[1] = 1.0f / sum_lanes(lanes);
#endif
}

#if defined(__AVX2__)
// Rows [0, M) in tiles of R rows, then one tile of the rows left: f.template operator()<Rt>(i)
// does rows i..i+Rt.
template <int R, class F>
inline void row_tail(int64_t n, int64_t i, F& f) {
  if constexpr (R >= 1) {
    if (n == R) {
      f.template operator()<R>(i);
    } else {
      row_tail<R - 1>(n, i, f);
    }
  }
}
template <int R, class F>
inline void row_tiles(int64_t M, F&& f) {
  int64_t i = 0;
  for (; i + R <= M; i += R) f.template operator()<R>(i);
  if (i < M) row_tail<R - 1>(M - i, i, f);
}
#else
// The same exponentials from the raw scores and the max softmax_row kept: the same operations on
// the same numbers, so the same bits.
void recompute_exps(float* s, int64_t L, int64_t Lp, float scale, const float* stats) {
  std::fill(s + L, s + Lp, -INFINITY);
  const float m = stats[0];
  for (int64_t j = 0; j < Lp; j += kLanes)
#pragma omp simd
    for (int64_t l = 0; l < kLanes; l++) s[j + l] = math::exp((s[j + l] - m) * scale);
}
#endif

// The backward's exponentials of a query block, recomputed: e (rows, Lp) = exp((Qb K^T - max_i) *
// scale), zero past column L, from the max softmax_row kept (row i's at stats[2 * i]). The same
// chains and the same exp as the forward, so the same bits. On avx2/avx512 each register tile of
// scores becomes exponentials before it is stored: the scores never go through memory, and the
// exp's arithmetic overlaps the next tile's fma chains.
void scores_to_exps(float* e, int64_t lde, Strided Q, const float* kT, int64_t ldk, int64_t rows, int64_t K, int64_t Lp,
                    int64_t L, const float* stats, float scale) {
#if defined(__AVX2__)
  const vf sv = vset1(scale);
  auto panel = [&]<int NV>(int64_t j) {
    row_tiles<kRowsStrided>(rows, [&]<int R>(int64_t i) {
      const Strided A{Q.data + i * Q.row_stride, Q.row_stride, Q.k_stride};
      float* ei = e + i * lde + j;
      const float* st = stats + 2 * i;
      tile_chains<R, NV>(A, kT + j, ldk, K, [&](int r, int v, vf chain) {
        const vf x = vmul(vsub(chain, vset1(st[2 * r])), sv);
        vstore(ei + r * lde + v * kW, keep_first(vexp(x), L - (j + v * kW)));
      });
    });
  };
  int64_t j = 0;
  for (; j + 2 * kW <= Lp; j += 2 * kW) panel.template operator()<2>(j);
  for (; j < Lp; j += kW) panel.template operator()<1>(j);
#else
  product(e, lde, Q, kT, ldk, rows, K, Lp, false);
  for (int64_t i = 0; i < rows; i++) recompute_exps(e + i * lde, L, Lp, scale, stats + 2 * i);
#endif
}

// ---- scratch ------------------------------------------------------------------------------------

// Per-thread scratch, grown as needed and kept between calls (the encoder calls attention once
// per layer and step with about the same sizes).
float* scratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < floats) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

struct Pair {
  int64_t t0, L, h, b;  // first row, length, head, sequence
};

// Row t's statistics for head h: the cache is head-major, (NH, T, 2), so two threads working on
// two heads of one sequence write to different cache lines.
inline int64_t stats_index(int64_t t, int64_t h, int64_t T) { return (h * T + t) * 2; }

// Sequences up to kAttentionKeptExpsMaxLength (256) tokens also keep their exponentials e (L, Lp)
// per head in the cache, after the statistics: at most 256 floats per token and head, and the
// backward reads them instead of recomputing S = Q K^T and its exps (a fifth of the backward's
// products and all of its second pass of exps); beyond it, memory stays linear. Measured when
// chosen: a limit of 64 gave the step +4.6% on 1..64 tokens; 128 gives attention on 8 x 128 tokens
// 1.06 -> 0.87 ms (avx512) and 1.79 -> 1.38 ms (avx2), the step +6.6% on avx2; 256 gives attention
// on 8 x 256 tokens 6.1 -> 4.6-5.1 ms (avx2) and 3.4-3.9 -> 2.8-3.0 ms (avx512), the step 5-7% on
// avx2 and about nothing on avx512, where the GEMMs lose to the kept matrices' cache footprint
// (8 MiB a layer at 8 x 256 tokens and 4 heads) what attention gains. Writing them with streaming
// stores, past the caches, gave nothing measurable either way.
inline bool keeps_exps(int64_t L) { return L > 0 && L <= kAttentionKeptExpsMaxLength; }

// Where the kept exponentials start in the cache, per sequence (-1: not kept), and the cache's
// size: the statistics (2 T NH floats, rounded up to a cache line when exponentials follow), then
// for each short sequence its NH heads' (L, Lp) matrices one after the other.
struct ExpsLayout {
  std::vector<int64_t> start;  // (B)
  int64_t size = 0;
  // Pair p's (L, Lp) matrix within the cache, or null when its sequence does not keep one.
  template <class T>
  T* exps_of(T* cache, const Pair& p) const {
    const int64_t s = start[size_t(p.b)];
    return s >= 0 ? cache + s + p.h * p.L * padded(p.L) : nullptr;
  }
};
ExpsLayout exps_layout(const int64_t* offsets, int64_t B, int64_t NH) {
  ExpsLayout layout;
  layout.start.assign(size_t(std::max<int64_t>(B, 0)), -1);
  if (B <= 0) return layout;
  layout.size = 2 * offsets[B] * NH;  // the statistics
  int64_t next = padded(layout.size);
  for (int64_t b = 0; b < B; b++) {
    const int64_t L = offsets[b + 1] - offsets[b];
    if (!keeps_exps(L)) continue;
    layout.start[size_t(b)] = next;
    next += NH * L * padded(L);
    layout.size = next;
  }
  return layout;
}

#if defined(__AVX512F__)
// ---- short pairs on avx512: at most 16 tokens, head dim 16 --------------------------------------
// The small models' shape (d_model 64, 4 heads, sequences of a few tokens): a pair is a handful of
// 16-float rows, so the general path's fixed costs (scratch matrices, padding fills, transposes
// through memory, a call per row) outweigh its products. Here a pair lives in zmm registers, one
// per key (below): the same products (fma chains over k in order, from zero), the same softmax
// steps and the same lane folds as the general path, so the same bits.

// The forward works on the pair transposed: register j holds key j's scores against every query,
// lane i for query i (sT[j][i] = S_ij). What the general path does along a row (its max, its sum
// of exponentials, 1 / sum) is then lane-wise arithmetic across 16 registers, every query at once,
// instead of a chain of folds and a division per row; the (i, j) element meets the same operations
// in the same order as in softmax_row, so the same bits:
//   max:  row_max keeps the first of equal values (only +0 and -0 differ): the fold
//         m = max(s_j, m) over j = 0, 1, ... in order gives that same first one;
//   sum:  lanes j and j + 8, then + 4, + 2, + 1 (sum_halves): the same additions across registers.
// Query rows past L are lanes of zeros, never stored.

constexpr __mmask16 kAll = 0xFFFF;  // the maskz forms: GCC 12 warns about the plain ones' undefined passthrough

// transpose16 (transpose.hpp), forced inline so that the rows stay in registers: r[i][j] = old r[j][i].
__attribute__((always_inline)) inline void transpose16_inline(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(kAll, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_maskz_shuffle_ps(kAll, t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_maskz_shuffle_ps(kAll, t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_maskz_shuffle_ps(kAll, t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_maskz_shuffle_ps(kAll, t[i + 1], t[i + 3], 0xEE);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 16; h += 8)
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      t[h + i] = _mm512_maskz_shuffle_f32x4(kAll, r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_maskz_shuffle_f32x4(kAll, r[h + i], r[h + i + 4], 0xDD);
    }
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_maskz_shuffle_f32x4(kAll, t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_maskz_shuffle_f32x4(kAll, t[i], t[i + 8], 0xDD);
  }
}

// dst[2 i] = a[i], dst[2 i + 1] = b[i] for i < n (n <= 16): a pair's {max, 1/sum} statistics.
inline void store_interleaved(float* dst, __m512 a, __m512 b, int64_t n) {
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const int64_t n_first = std::min<int64_t>(n, 8), n_second = n - n_first;
  _mm512_mask_storeu_ps(dst, __mmask16((1u << (2 * n_first)) - 1), _mm512_permutex2var_ps(a, first, b));
  if (n_second > 0)
    _mm512_mask_storeu_ps(dst + 16, __mmask16((1u << (2 * n_second)) - 1), _mm512_permutex2var_ps(a, second, b));
}

// sum_halves of every lane across 16 registers: x[l] + x[l + 8], then + 4, + 2, + 1.
inline __m512 sum_across(const __m512 x[16]) {
  __m512 y[8];
#pragma GCC unroll 8
  for (int l = 0; l < 8; l++) y[l] = _mm512_add_ps(x[l], x[l + 8]);
#pragma GCC unroll 4
  for (int l = 0; l < 4; l++) y[l] = _mm512_add_ps(y[l], y[l + 4]);
  y[0] = _mm512_add_ps(y[0], y[2]);
  y[1] = _mm512_add_ps(y[1], y[3]);
  return _mm512_add_ps(y[0], y[1]);
}

// pair_forward for L <= 16 and hd = 16; the cache (stats and exps) written where given (training),
// not without it (inference, evaluation): the same output either way.
void pair_forward_short(float* out, float* stats, float* exps, const float* qkv, Pair p, int64_t T, int64_t C) {
  constexpr int64_t hd = 16;
  const int64_t C3 = 3 * C, L = p.L;
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = qkv + p.t0 * C3 + p.h * hd;
  const float* k = q + C;
  const float* v = q + 2 * C;
  __m512 x[16];  // qT[c]: lane i = query i's element c, zero past L
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) x[i] = i < L ? _mm512_loadu_ps(q + i * C3) : _mm512_setzero_ps();
  transpose16_inline(x);
  // sT[j] = key j's chain over c in order from zero (S_ij = q_i . k_j), eight keys' chains side by
  // side (one chain alone waits on each multiply-add's latency); keys past L are not scores
  alignas(64) static const float zero_row[16] = {};
  __m512 e[16];
  auto score_keys = [&](int j0) {
    const float* kj[8];
    __m512 acc[8];
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
      kj[u] = j0 + u < L ? k + (j0 + u) * C3 : zero_row;
      acc[u] = _mm512_setzero_ps();
    }
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++)
#pragma GCC unroll 8
      for (int u = 0; u < 8; u++) acc[u] = _mm512_fmadd_ps(_mm512_set1_ps(kj[u][c]), x[c], acc[u]);
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) e[j0 + u] = acc[u];
  };
  score_keys(0);
  if (L > 8) {
    score_keys(8);
  } else {
#pragma GCC unroll 8
    for (int j = 8; j < 16; j++) e[j] = _mm512_setzero_ps();
  }
  // row_max: lanes max(s_l, -inf), folded first of equals (a NaN score drops out: max keeps m)
  __m512 m = _mm512_maskz_max_ps(kAll, e[0], _mm512_set1_ps(-INFINITY));
#pragma GCC unroll 16
  for (int j = 1; j < 16; j++) {
    if (j >= L) break;
    m = _mm512_maskz_max_ps(kAll, e[j], m);
  }
  // e_ij = exp((s_ij - m_i) * scale); the padding keys' -inf gives the same value for every j >= L
  const __m512 sv = _mm512_set1_ps(scale);
  const __m512 pad = exp16_nonpositive(_mm512_mul_ps(_mm512_sub_ps(_mm512_set1_ps(-INFINITY), m), sv));
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) e[j] = j < L ? exp16_nonpositive(_mm512_mul_ps(_mm512_sub_ps(e[j], m), sv)) : pad;
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), sum_across(e));
  if (stats != nullptr) store_interleaved(stats + stats_index(p.t0, p.h, T), m, inv, L);
  if (L <= 8) {
    // O = (e V) / sum row by row, e_ij broadcast from the rows just stored (the cache, or the
    // stack without one) against V's rows in registers: query i's chain over the keys j < L in
    // order, the eight queries' chains side by side (a query past L reads row 0, not stored); no
    // transpose of O, and 8 L multiply-adds instead of 16 L. Longer pairs keep the transposed
    // form below: at L = 16 the row form measured 8% slower.
    transpose16_inline(e);  // e[i]: query i's exponentials, lane j
    alignas(64) float e_stack[8 * 16], inv_stack[16];
    float* e_rows = exps != nullptr ? exps : e_stack;
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
      if (i >= L) break;
      _mm512_storeu_ps(e_rows + i * 16, e[i]);
    }
    _mm512_store_ps(inv_stack, inv);
    __m512 vr[8], acc[8];
    const float* ei[8];
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
      vr[u] = u < L ? _mm512_loadu_ps(v + u * C3) : _mm512_setzero_ps();
      ei[u] = e_rows + (u < L ? u : 0) * 16;
      acc[u] = _mm512_setzero_ps();
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
      if (j >= L) break;
#pragma GCC unroll 8
      for (int u = 0; u < 8; u++) acc[u] = _mm512_fmadd_ps(_mm512_set1_ps(ei[u][j]), vr[j], acc[u]);
    }
    float* out_rows = out + p.t0 * C + p.h * hd;
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
      if (u >= L) break;
      _mm512_storeu_ps(out_rows + u * C, _mm512_mul_ps(acc[u], _mm512_set1_ps(inv_stack[u])));
    }
    return;
  }
  // O = (e V) / sum: lane i of oT[c] is query i's chain over the keys j < L in order
  __m512 o[16];
#pragma GCC unroll 16
  for (int c = 0; c < 16; c++) o[c] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) {
    if (j >= L) break;
    const float* vj = v + j * C3;
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) o[c] = _mm512_fmadd_ps(_mm512_set1_ps(vj[c]), e[j], o[c]);
  }
#pragma GCC unroll 16
  for (int c = 0; c < 16; c++) o[c] = _mm512_mul_ps(o[c], inv);
  transpose16_inline(e);  // e[i]: query i's exponentials, lane j
  transpose16_inline(o);
  float* out_rows = out + p.t0 * C + p.h * hd;
  for (int64_t i = 0; i < L; i++) {
    if (exps != nullptr) _mm512_storeu_ps(exps + i * 16, e[i]);
    _mm512_storeu_ps(out_rows + i * C, o[i]);
  }
}

// dst = dst + x when accumulating, else x.
inline void store_or_add(float* dst, __m512 x, bool accumulate) {
  _mm512_storeu_ps(dst, accumulate ? _mm512_add_ps(_mm512_loadu_ps(dst), x) : x);
}

// pair_backward for L <= 16 and hd = 16, with the exponentials the forward kept. Transposed like
// the forward: dP^T and e^T one register per key, lanes the queries, so the row pass (rowsum(e *
// dP) and dS) runs for every query at once; dQ^T comes out of the same registers.
void pair_backward_short(float* dqkv, bool accumulate, const float* dout, const float* qkv, const float* stats,
                         const float* exps, Pair p, int64_t T, int64_t C) {
  constexpr int64_t hd = 16;
  const int64_t C3 = 3 * C, L = p.L;
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = qkv + p.t0 * C3 + p.h * hd;
  const float* k = q + C;
  const float* v = q + 2 * C;
  const float* dO = dout + p.t0 * C + p.h * hd;
  float* dq = dqkv + p.t0 * C3 + p.h * hd;
  float* dk = dq + C;
  float* dv = dq + 2 * C;
  const float* st = stats + stats_index(p.t0, p.h, T);  // row i's {max, 1/sum} at st + 2 i
  // inv: lane i = 1/sum of row i (the odd floats of st)
  const int64_t n_first = std::min<int64_t>(2 * L, 16), n_second = 2 * L - n_first;
  const __m512 st_first = _mm512_maskz_loadu_ps(__mmask16((1u << n_first) - 1), st);
  const __m512 st_second =
      n_second > 0 ? _mm512_maskz_loadu_ps(__mmask16((1u << n_second) - 1), st + 16) : _mm512_setzero_ps();
  const __m512 inv = _mm512_permutex2var_ps(
      st_first, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), st_second);
  // dP^T: d[j] lane i = query i's chain over c in order from zero; the padding keys' zero rows of
  // V give one value for every j >= L
  __m512 x[16];  // dO^T[c]: lane i = dO_i's element c
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) x[i] = i < L ? _mm512_loadu_ps(dO + i * C) : _mm512_setzero_ps();
  transpose16_inline(x);
  __m512 d[16];
  const __m512 zero = _mm512_setzero_ps();
  __m512 d_pad = zero;
  if (L < 16) {
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) d_pad = _mm512_fmadd_ps(zero, x[c], d_pad);
  }
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) {
    if (j >= L) {
      d[j] = d_pad;
      continue;
    }
    const float* vj = v + j * C3;
    __m512 acc = zero;
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) acc = _mm512_fmadd_ps(_mm512_set1_ps(vj[c]), x[c], acc);
    d[j] = acc;
  }
  // e^T: e[j] lane i = e_ij, the padding columns as the forward stored them
  __m512 e[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) e[i] = i < L ? _mm512_loadu_ps(exps + i * 16) : zero;
  transpose16_inline(e);
  // lane_dot(e_i, dP_i, 16): lanes l and l + 8 as two 8-float sums from zero, then sum_halves
  __m512 prod[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) prod[j] = _mm512_add_ps(zero, _mm512_mul_ps(e[j], d[j]));
  const __m512 p_dot_dp = _mm512_mul_ps(sum_across(prod), inv);
  const __m512 factor = _mm512_mul_ps(inv, _mm512_set1_ps(scale));
  // dS^T[j] = e * (dP - p_dot_dp) * factor, in d; it goes through the stack (dS_ij at ds_t[16 j +
  // i]) for dK's chains, which read it one float at a time
  alignas(64) float ds_t[16 * 16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) {
    d[j] = j < L ? _mm512_mul_ps(_mm512_mul_ps(e[j], _mm512_sub_ps(d[j], p_dot_dp)), factor) : zero;
    _mm512_store_ps(ds_t + 16 * j, d[j]);
  }
  if (L <= 8) {
    // dQ (+)= dS K row by row for short pairs (as the forward's O): query i's chain over the keys
    // j < L in order, dS_ij broadcast from ds_t against K's rows in registers, the eight queries
    // side by side (lanes past L of dS^T are in ds_t too, never stored); no transpose back
    __m512 kr[8], acc[8];
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
      kr[u] = u < L ? _mm512_loadu_ps(k + u * C3) : zero;
      acc[u] = zero;
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
      if (j >= L) break;
#pragma GCC unroll 8
      for (int u = 0; u < 8; u++) acc[u] = _mm512_fmadd_ps(_mm512_set1_ps(ds_t[16 * j + u]), kr[j], acc[u]);
    }
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
      if (u >= L) break;
      store_or_add(dq + u * C3, acc[u], accumulate);
    }
  } else {
    // dQ (+)= dS K: lane i of x[c] is query i's chain over the keys j < L in order
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) x[c] = zero;
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
      if (j >= L) break;
      const float* kj = k + j * C3;
#pragma GCC unroll 16
      for (int c = 0; c < 16; c++) x[c] = _mm512_fmadd_ps(_mm512_set1_ps(kj[c]), d[j], x[c]);
    }
    transpose16_inline(x);
    for (int64_t i = 0; i < L; i++) store_or_add(dq + i * C3, x[i], accumulate);
  }
  // dV (+)= e^T (dO / sum) and dK (+)= dS^T Q: key j's chains over the queries i in order, for the
  // keys j < NJ, L rounded up to 4 (the keys from L on are not stored)
  auto dv_dk = [&]<int NJ>() {
    __m512 acc_v[NJ], acc_k[NJ];
#pragma GCC unroll 16
    for (int j = 0; j < NJ; j++) acc_v[j] = acc_k[j] = zero;
    for (int64_t i = 0; i < L; i++) {
      const __m512 dob_i = _mm512_mul_ps(_mm512_loadu_ps(dO + i * C), _mm512_set1_ps(st[2 * i + 1]));
      const __m512 q_i = _mm512_loadu_ps(q + i * C3);
      const float* ei = exps + i * 16;
#pragma GCC unroll 16
      for (int j = 0; j < NJ; j++) {
        acc_v[j] = _mm512_fmadd_ps(_mm512_set1_ps(ei[j]), dob_i, acc_v[j]);
        acc_k[j] = _mm512_fmadd_ps(_mm512_set1_ps(ds_t[16 * j + i]), q_i, acc_k[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < NJ; j++) {
      if (j >= L) break;
      store_or_add(dv + j * C3, acc_v[j], accumulate);
      store_or_add(dk + j * C3, acc_k[j], accumulate);
    }
  };
  if (L <= 4) dv_dk.template operator()<4>();
  else if (L <= 8) dv_dk.template operator()<8>();
  else if (L <= 12) dv_dk.template operator()<12>();
  else dv_dk.template operator()<16>();
}

// Whether a pair takes the short path: its rows are single registers, and the cache is there.
inline bool short_pair(int64_t L, int64_t hd) { return hd == 16 && L >= 1 && L <= 16; }

#elif defined(__AVX2__)
// ---- short pairs on avx2 ------------------------------------------------------------------------
// The avx512 forward's way (see there) with 8 queries a register: a pair of L <= 16 tokens is one
// or two groups of queries, each against all the keys. The same operations as softmax_row's avx2
// form on every element (exp8_nonpositive gives exp8_in_range's bits where that one applies).

// dst[2 i] = a[i], dst[2 i + 1] = b[i] for i < n (n <= 8).
inline void store_interleaved(float* dst, __m256 a, __m256 b, int64_t n) {
  const __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);  // pairs 0 1 4 5, 2 3 6 7
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  auto first_n = [&](int64_t count) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), lane); };
  _mm256_maskstore_ps(dst, first_n(std::min<int64_t>(2 * n, 8)), _mm256_permute2f128_ps(lo, hi, 0x20));
  if (n > 4) _mm256_maskstore_ps(dst + 8, first_n(2 * n - 8), _mm256_permute2f128_ps(lo, hi, 0x31));
}

// pair_forward for L <= 16 and hd = 16, the cache (stats and exps) written where given. AVX2 has 16 ymm
// registers, not the 16 x 16 the avx512 way keeps live, so a group's transposed queries and its
// scores and exponentials (one row of 8 lanes per key) live in two small stack arrays, and each
// product runs in halves of the head's 16 elements that fit the registers; a score's chain over c
// is continued from where the first half stored it, in the same order.
void pair_forward_short(float* out, float* stats, float* exps, const float* qkv, Pair p, int64_t T, int64_t C) {
  constexpr int64_t hd = 16;
  static const float zero_row[16] = {};  // the keys from L on (their scores are not used)
  const int64_t C3 = 3 * C, L = p.L;
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = qkv + p.t0 * C3 + p.h * hd;
  const float* k = q + C;
  const float* v = q + 2 * C;
  const __m256 sv = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  alignas(32) float qt[16 * 8];  // row c: lane i = query i0 + i's element c
  alignas(32) float et[16 * 8];  // row j: key j's scores, then exponentials, lane i for query i0 + i
  for (int64_t i0 = 0; i0 < L; i0 += 8) {
    const int64_t n = std::min<int64_t>(8, L - i0);  // the group's queries i0 .. i0 + n
    for (int half = 0; half < 2; half++) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) r[i] = i < n ? _mm256_loadu_ps(q + (i0 + i) * C3 + half * 8) : zero;
      transpose8(r);
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) _mm256_store_ps(qt + (half * 8 + c) * 8, r[c]);
    }
    // S^T: key j's chain over c in order from zero, elements 0..7 then 8..15, four keys at a time
    for (int half = 0; half < 2; half++) {
      __m256 x[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) x[c] = _mm256_load_ps(qt + (half * 8 + c) * 8);
      for (int64_t j0 = 0; j0 < L; j0 += 4) {
        __m256 acc[4];
        const float* kj[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
          acc[u] = half == 0 ? zero : _mm256_load_ps(et + (j0 + u) * 8);
          kj[u] = (j0 + u < L ? k + (j0 + u) * C3 : zero_row) + half * 8;
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
#pragma GCC unroll 4
          for (int u = 0; u < 4; u++) acc[u] = _mm256_fmadd_ps(_mm256_set1_ps(kj[u][c]), x[c], acc[u]);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) _mm256_store_ps(et + (j0 + u) * 8, acc[u]);
      }
    }
    // row_max: the fold of the first of equals (see the avx512 forward)
    __m256 m = _mm256_max_ps(_mm256_load_ps(et), _mm256_set1_ps(-INFINITY));
    for (int64_t j = 1; j < L; j++) m = _mm256_max_ps(_mm256_load_ps(et + j * 8), m);
    const __m256 pad = exp8_nonpositive(_mm256_mul_ps(_mm256_sub_ps(_mm256_set1_ps(-INFINITY), m), sv));
    for (int64_t j = 0; j < 16; j++) {
      const __m256 e = j < L ? exp8_nonpositive(_mm256_mul_ps(_mm256_sub_ps(_mm256_load_ps(et + j * 8), m), sv)) : pad;
      _mm256_store_ps(et + j * 8, e);
    }
    // sum_halves across the 16 keys: lanes j and j + 8, then + 4, + 2, + 1
    __m256 y[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; l++) y[l] = _mm256_add_ps(_mm256_load_ps(et + l * 8), _mm256_load_ps(et + (l + 8) * 8));
#pragma GCC unroll 4
    for (int l = 0; l < 4; l++) y[l] = _mm256_add_ps(y[l], y[l + 4]);
    y[0] = _mm256_add_ps(y[0], y[2]);
    y[1] = _mm256_add_ps(y[1], y[3]);
    const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(y[0], y[1]));
    if (stats != nullptr) store_interleaved(stats + stats_index(p.t0 + i0, p.h, T), m, inv, n);
    // O = (e V) / sum, elements 0..7 then 8..15: lane i of o[c] is query i0 + i's chain over the
    // keys j < L in order
    float* out_rows = out + (p.t0 + i0) * C + p.h * hd;
    for (int half = 0; half < 2; half++) {
      __m256 o[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) o[c] = zero;
      for (int64_t j = 0; j < L; j++) {
        const __m256 e = _mm256_load_ps(et + j * 8);
        const float* vj = v + j * C3 + half * 8;
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) o[c] = _mm256_fmadd_ps(_mm256_set1_ps(vj[c]), e, o[c]);
      }
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) o[c] = _mm256_mul_ps(o[c], inv);
      transpose8(o);  // o[i]: query i0 + i's elements 8 half .. 8 half + 8
      for (int64_t i = 0; i < n; i++) _mm256_storeu_ps(out_rows + i * C + half * 8, o[i]);
    }
    // the exponentials as rows: query i0 + i's keys 0..7, then 8..15
    if (exps == nullptr) continue;
    float* exp_rows = exps + i0 * 16;
    for (int kb = 0; kb < 2; kb++) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int u = 0; u < 8; u++) r[u] = _mm256_load_ps(et + (kb * 8 + u) * 8);
      transpose8(r);
      for (int64_t i = 0; i < n; i++) _mm256_storeu_ps(exp_rows + i * 16 + kb * 8, r[i]);
    }
  }
}

// dst (8 floats) = dst + x when accumulating, else x.
inline void store_or_add(float* dst, __m256 x, bool accumulate) {
  _mm256_storeu_ps(dst, accumulate ? _mm256_add_ps(_mm256_loadu_ps(dst), x) : x);
}

// pair_backward for L <= 16 and hd = 16, with the exponentials the forward kept: the general
// path's operations (its products' chains, lane_dot's two 8-lane sums from zero, the dS row
// pass), rows as two ymm registers, without its scratch, fills and calls.
void pair_backward_short(float* dqkv, bool accumulate, const float* dout, const float* qkv, const float* stats,
                         const float* exps, Pair p, int64_t T, int64_t C) {
  constexpr int64_t hd = 16;
  const int64_t C3 = 3 * C, L = p.L;
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = qkv + p.t0 * C3 + p.h * hd;
  const float* k = q + C;
  const float* v = q + 2 * C;
  const float* dO = dout + p.t0 * C + p.h * hd;
  float* dq = dqkv + p.t0 * C3 + p.h * hd;
  float* dk = dq + C;
  float* dv = dq + 2 * C;
  const float* st = stats + stats_index(p.t0, p.h, T);  // row i's {max, 1/sum} at st + 2 i
  // vt[16 kb + c]: lane l = value 8 kb + l's element c, zero past L
  __m256 vt[32];
#pragma GCC unroll 2
  for (int kb = 0; kb < 2; kb++)
#pragma GCC unroll 2
    for (int half = 0; half < 2; half++) {
      __m256* r = vt + kb * 16 + half * 8;
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++)
        r[i] = kb * 8 + i < L ? _mm256_loadu_ps(v + (kb * 8 + i) * C3 + half * 8) : _mm256_setzero_ps();
      transpose8(r);
    }
  // dP = dO V^T, then dS = e * (dP - inv * rowsum(e * dP)) * inv * scale, row by row; dS and
  // dO / sum go through the stack for the products below, which read them one float at a time.
  alignas(32) float dS[16 * 16];
  alignas(32) float dob[16 * 16];
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t i = 0; i < L; i++) {
    const float* doi = dO + i * C;
    __m256 acc_lo = zero, acc_hi = zero;
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) {
      const __m256 d = _mm256_set1_ps(doi[c]);
      acc_lo = _mm256_fmadd_ps(d, vt[c], acc_lo);
      acc_hi = _mm256_fmadd_ps(d, vt[16 + c], acc_hi);
    }
    const float inv = st[2 * i + 1];
    const __m256 inv_v = _mm256_set1_ps(inv);
    _mm256_store_ps(dob + i * 16, _mm256_mul_ps(_mm256_loadu_ps(doi), inv_v));
    _mm256_store_ps(dob + i * 16 + 8, _mm256_mul_ps(_mm256_loadu_ps(doi + 8), inv_v));
    const __m256 e_lo = _mm256_loadu_ps(exps + i * 16), e_hi = _mm256_loadu_ps(exps + i * 16 + 8);
    // lane_dot(e, dP, 16): two 8-float sums from zero, then sum_halves
    const __m256 lo = _mm256_add_ps(zero, _mm256_mul_ps(e_lo, acc_lo));
    const __m256 hi = _mm256_add_ps(zero, _mm256_mul_ps(e_hi, acc_hi));
    const __m256 p_dot_dp = _mm256_set1_ps(sum_halves(_mm256_add_ps(lo, hi)) * inv);
    const __m256 factor = _mm256_set1_ps(inv * scale);
    _mm256_store_ps(dS + i * 16, _mm256_mul_ps(_mm256_mul_ps(e_lo, _mm256_sub_ps(acc_lo, p_dot_dp)), factor));
    _mm256_store_ps(dS + i * 16 + 8, _mm256_mul_ps(_mm256_mul_ps(e_hi, _mm256_sub_ps(acc_hi, p_dot_dp)), factor));
  }
  // key j's chains over the queries i in order: dst_j (+)= sum_i a(i, j) b_i, for four keys at a
  // time (the keys from L on read the rows' padding and are not stored)
  auto key_chains = [&](float* dst, const float* a, const float* b, int64_t ldb) {
    for (int64_t j0 = 0; j0 < L; j0 += 4) {
      __m256 acc[4][2];
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) acc[j][0] = acc[j][1] = zero;
      for (int64_t i = 0; i < L; i++) {
        const __m256 b_lo = _mm256_loadu_ps(b + i * ldb), b_hi = _mm256_loadu_ps(b + i * ldb + 8);
        const float* ai = a + i * 16 + j0;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
          const __m256 x = _mm256_set1_ps(ai[j]);
          acc[j][0] = _mm256_fmadd_ps(x, b_lo, acc[j][0]);
          acc[j][1] = _mm256_fmadd_ps(x, b_hi, acc[j][1]);
        }
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        if (j0 + j >= L) break;
        store_or_add(dst + (j0 + j) * C3, acc[j][0], accumulate);
        store_or_add(dst + (j0 + j) * C3 + 8, acc[j][1], accumulate);
      }
    }
  };
  key_chains(dv, exps, dob, 16);  // dV (+)= e^T (dO / sum)
  key_chains(dk, dS, q, C3);      // dK (+)= dS^T Q
  // dQ (+)= dS K: query i's chain over the keys j in order
  for (int64_t i = 0; i < L; i++) {
    const float* dsi = dS + i * 16;
    __m256 acc_lo = zero, acc_hi = zero;
    for (int64_t j = 0; j < L; j++) {
      const __m256 x = _mm256_set1_ps(dsi[j]);
      acc_lo = _mm256_fmadd_ps(x, _mm256_loadu_ps(k + j * C3), acc_lo);
      acc_hi = _mm256_fmadd_ps(x, _mm256_loadu_ps(k + j * C3 + 8), acc_hi);
    }
    store_or_add(dq + i * C3, acc_lo, accumulate);
    store_or_add(dq + i * C3 + 8, acc_hi, accumulate);
  }
}

inline bool short_pair(int64_t L, int64_t hd) { return hd == 16 && L >= 1 && L <= 16; }
#endif

// ---- one (sequence, head) pair ------------------------------------------------------------------

// Forward of one pair: out rows t0..t0+L, head columns; stats (2 floats per row) if not null, and
// the exponentials (L, Lp) into exps if not null.
void pair_forward(float* out, float* stats, float* exps, const float* qkv, Pair p, int64_t T, int64_t C, int64_t NH) {
  const int64_t hd = C / NH, C3 = 3 * C, L = p.L, Lp = padded(L), hp = padded(hd);
#if defined(__AVX2__)
  // Short pairs with their cache or without any (a forward without grad); a cache of statistics
  // without the exponentials is never asked of them (sequences of up to 256 tokens keep both).
  if (short_pair(L, hd) && (stats == nullptr) == (exps == nullptr))
    return pair_forward_short(out, stats, exps, qkv, p, T, C);
#endif
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = qkv + p.t0 * C3 + p.h * hd;
  const float* k = q + C;
  const float* v = q + 2 * C;
  const int64_t ld = scratch_ld(Lp);
  float* kT = scratch(hd * ld + L * hp + kQueryBlock * ld + kQueryBlock * hp);  // (hd, Lp), stride ld
  float* vp = kT + hd * ld;                                                     // (L, hp)
  float* s = vp + L * hp;                                                       // (block, Lp), stride ld
  float* ob = s + kQueryBlock * ld;                                             // (block, hp)
  transpose_padded(kT, ld, k, C3, L, hd);
  // B operands are read in place when a head's hd floats are whole vectors (hd a multiple of kPad)
  const bool whole = hd == hp;
  if (!whole) copy_padded(vp, hp, v, C3, L, hd);
  const float* vb = whole ? v : vp;
  const int64_t ldv = whole ? C3 : hp;
  float block_stats[2 * kQueryBlock];  // inference (no cache): the block's own statistics
  for (int64_t i0 = 0; i0 < L; i0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, L - i0);
    // {max, 1/sum} of the block's row i: in the cache when there is one
    auto row_stats = [&](int64_t i) {
      return stats != nullptr ? stats + stats_index(p.t0 + i0 + i, p.h, T) : block_stats + 2 * i;
    };
    // the block's scores, then exponentials: in the scratch, or where the cache keeps them
    float* sb = exps != nullptr ? exps + i0 * Lp : s;
    const int64_t lds = exps != nullptr ? Lp : ld;
    product(sb, lds, Strided{q + i0 * C3, C3, 1}, kT, ld, rows, hd, Lp, false);
    for (int64_t i = 0; i < rows; i++) softmax_row(sb + i * lds, L, Lp, scale, row_stats(i));
    // Ob = (e V) / sum, row by row
    product(ob, hp, Strided{sb, lds, 1}, vb, ldv, rows, L, hp, false);
    for (int64_t i = 0; i < rows; i++) {
      const float inv = row_stats(i)[1];
      float* o = out + (p.t0 + i0 + i) * C + p.h * hd;
      scale_row(o, ob + i * hp, inv, hd);
    }
  }
}

// Backward of one pair: dqkv (+)= this pair's gradients (its rows, its head's columns): added when
// accumulate, else written. Each element is stored once either way. exps: the exponentials the
// forward kept (L, Lp), or null to recompute them.
void pair_backward(float* dqkv, bool accumulate, const float* dout, const float* qkv, const float* stats,
                   const float* exps, Pair p, int64_t T, int64_t C, int64_t NH) {
  const int64_t hd = C / NH, C3 = 3 * C, L = p.L, Lp = padded(L), hp = padded(hd);
  const int64_t Bq = kQueryBlock;
#if defined(__AVX2__)
  if (short_pair(L, hd) && exps != nullptr)
    return pair_backward_short(dqkv, accumulate, dout, qkv, stats, exps, p, T, C);
#endif
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = qkv + p.t0 * C3 + p.h * hd;
  const float* k = q + C;
  const float* v = q + 2 * C;
  const float* dO = dout + p.t0 * C + p.h * hd;
  float* dq = dqkv + p.t0 * C3 + p.h * hd;
  float* dk = dq + C;
  float* dv = dq + 2 * C;
  const int64_t ld = scratch_ld(Lp);                                          // the row stride of kT, vT, E and dS
  float* kT = scratch(2 * hd * ld + 3 * L * hp + 2 * Bq * ld + 3 * Bq * hp);  // (hd, Lp)
  float* vT = kT + hd * ld;                                                   // (hd, Lp)
  float* kp = vT + hd * ld;                                                   // (L, hp)
  float* dk_acc = kp + L * hp;                                                // (L, hp)
  float* dv_acc = dk_acc + L * hp;                                            // (L, hp)
  float* E = dv_acc + L * hp;                                                 // (block, Lp) exponentials
  float* dS = E + Bq * ld;                                                    // (block, Lp)
  float* qb = dS + Bq * ld;                                                   // (block, hp)
  float* dob = qb + Bq * hp;                                                  // (block, hp)
  float* dqb = dob + Bq * hp;                                                 // (block, hp)
  transpose_padded(kT, ld, k, C3, L, hd);
  transpose_padded(vT, ld, v, C3, L, hd);
  // When a head's hd floats are whole vectors (hd a multiple of kPad), q and k are read in place
  // as B operands, and the products store straight into dqkv: dq + chain (or the chain alone when
  // not accumulating), and for a single block dk + chain and dv + chain, the additions the copies
  // through scratch made.
  const bool whole = hd == hp;
  const bool direct_kv = whole && L <= Bq;
  if (!whole) copy_padded(kp, hp, k, C3, L, hd);
  const float* kb = whole ? k : kp;
  const int64_t ldk = whole ? C3 : hp;
  for (int64_t i0 = 0; i0 < L; i0 += Bq) {
    const int64_t rows = std::min(Bq, L - i0);
    const bool first = i0 == 0;
    const float* st = stats + stats_index(p.t0 + i0, p.h, T);  // row i's stats at st + 2 * i
    if (!whole) copy_padded(qb, hp, q + i0 * C3, C3, rows, hd);
    const float* qbb = whole ? q + i0 * C3 : qb;
    const int64_t ldq = whole ? C3 : hp;
    // dOb / sum row by row: P^T dOb = e^T (dOb / sum)
    for (int64_t i = 0; i < rows; i++) {
      const float inv = st[2 * i + 1];
      const float* src = dO + (i0 + i) * C;
      float* dst = dob + i * hp;
      scale_row(dst, src, inv, hd);
      std::fill(dst + hd, dst + hp, 0.0f);
    }
    // e: kept by the forward, or recomputed: S = Qb K^T, then the forward's exponentials from the
    // kept max (the same operations on the same numbers: the same bits)
    const float* Eb = E;
    int64_t lde = ld;
    if (exps != nullptr) {
      Eb = exps + i0 * Lp;
      lde = Lp;
    } else {
      scores_to_exps(E, ld, Strided{q + i0 * C3, C3, 1}, kT, ld, rows, hd, Lp, L, st, scale);
    }
    // dP = dOb V^T; then with P = e / sum:  dS = P * (dP - sum_j P dP) * scale, in place
    product(dS, ld, Strided{dO + i0 * C, C, 1}, vT, ld, rows, hd, Lp, false);
    for (int64_t i = 0; i < rows; i++) {
      const float inv = st[2 * i + 1];
      const float* ei = Eb + i * lde;
      float* di = dS + i * ld;
      const float p_dot_dp = lane_dot(ei, di, Lp) * inv;
      const float factor = inv * scale;
      for (int64_t j = 0; j < Lp; j += kLanes)
#pragma omp simd
        for (int64_t l = 0; l < kLanes; l++) di[j + l] = ei[j + l] * (di[j + l] - p_dot_dp) * factor;
    }
    // dV (+)= e^T (dOb / sum) and dK (+)= dS^T Qb: A(r = key j, k = query i) read in place
    if (direct_kv) {
      product(dv, C3, Strided{Eb, 1, lde}, dob, hp, L, rows, hp, accumulate);
      product(dk, C3, Strided{dS, 1, ld}, qbb, ldq, L, rows, hp, accumulate);
    } else {
      product(dv_acc, hp, Strided{Eb, 1, lde}, dob, hp, L, rows, hp, !first);
      product(dk_acc, hp, Strided{dS, 1, ld}, qbb, ldq, L, rows, hp, !first);
    }
    // dQb = dS K, added to dq
    if (whole) {
      product(dq + i0 * C3, C3, Strided{dS, ld, 1}, kb, ldk, rows, L, hp, accumulate);
    } else {
      product(dqb, hp, Strided{dS, ld, 1}, kb, ldk, rows, L, hp, false);
      for (int64_t i = 0; i < rows; i++) store_row(dq + (i0 + i) * C3, dqb + i * hp, hd, accumulate);
    }
  }
  if (direct_kv) return;
  for (int64_t j = 0; j < L; j++) {
    float* dkj = dk + j * C3;
    float* dvj = dv + j * C3;
    store_row(dkj, dk_acc + j * hp, hd, accumulate);
    store_row(dvj, dv_acc + j * hp, hd, accumulate);
  }
}

void check_shapes(const char* fn, const int64_t* offsets, int64_t B, int64_t C, int64_t NH) {
  if (B < 0) throw UsageError(std::string(fn) + ": batch size must be >= 0, got " + std::to_string(B));
  if (NH < 1 || C < 1 || C % NH != 0) {
    throw UsageError(std::string(fn) + ": d_model must be a positive multiple of the number of heads (got C=" + std::to_string(C) +
                     ", NH=" + std::to_string(NH) + ")");
  }
  if (offsets == nullptr) throw UsageError(std::string(fn) + ": offsets is null");
  if (offsets[0] < 0) throw UsageError(std::string(fn) + ": offsets[0] must be >= 0");
  for (int64_t b = 0; b < B; b++) {
    if (offsets[b + 1] < offsets[b]) {
      throw UsageError(std::string(fn) + ": offsets must be non-decreasing (offsets[" + std::to_string(b) +
                       "]=" + std::to_string(offsets[b]) + " > offsets[" + std::to_string(b + 1) +
                       "]=" + std::to_string(offsets[b + 1]) + ")");
    }
  }
}

// The (sequence, head) pairs with at least one token, longest first: their cost grows as L^2, and
// handing the long ones out first evens the threads' loads when they are handed out one at a time.
std::vector<Pair> pairs_of(const int64_t* offsets, int64_t B, int64_t NH) {
  std::vector<Pair> pairs;
  for (int64_t b = 0; b < B; b++) {
    const int64_t L = offsets[b + 1] - offsets[b];
    if (L > 0)
      for (int64_t h = 0; h < NH; h++) pairs.push_back({offsets[b], L, h, b});
  }
  std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& x, const Pair& y) { return x.L > y.L; });
  return pairs;
}

// Below this much work (for_each_pair's estimate, about L^2 * hd per pair) the pairs run on the
// calling thread.
constexpr int64_t kMinParallelWork = int64_t{1} << 16;
// A pair's fixed cost, in the multiply-adds of its products (for_each_pair).
constexpr int64_t kPairOverhead = 128;

// Runs fn on every (sequence, head) pair, over the threads. Preferably each thread takes one
// contiguous run of pairs in (sequence, head) order, cut where the cumulative work crosses
// t / threads of the total: its rows of qkv, out and dqkv are then mostly the rows the row-split
// GEMMs before and after it give the same thread, and stay in that core's cache, while a cut may
// fall between two heads of one sequence, so the shares differ by at most about one pair's work.
// When even that cannot balance (one long sequence and a single head, say), the pairs are dealt
// out longest first, one part each, to whichever thread is free. Each pair writes only its own rows and head columns,
// so the split never changes a bit.
template <class F>
void for_each_pair(const int64_t* offsets, int64_t B, int64_t C, int64_t NH, F&& fn) {
  const int64_t hd = C / NH;
  // The pairs [p_begin, p_end) of the order p = b * NH + h (one division, not one per pair).
  auto run_pairs = [&](int64_t p_begin, int64_t p_end) {
    int64_t b = p_begin / NH, h = p_begin % NH;
    for (int64_t p = p_begin; p < p_end; p++) {
      const int64_t L = offsets[b + 1] - offsets[b];
      if (L > 0) fn(Pair{offsets[b], L, h, b});
      if (++h == NH) {
        h = 0;
        b++;
      }
    }
  };
  // A pair's work, in multiply-adds: the products run over L x Lp (Lp = L rounded up to 16), and
  // the per-pair steps (transposes, statistics, scratch) cost about what 128 more would. Measured
  // fwd+bwd at hd = 16: 0.4 us at L = 1, 1.3 at 16, 14 at 64; L^2 alone undercounts short ones 3x.
  auto work_of_sequence = [&](int64_t b) {
    const int64_t L = offsets[b + 1] - offsets[b];
    return L > 0 ? (L * padded(L) + kPairOverhead) * hd : 0;
  };
  const int64_t n = B * NH;
  int64_t total = 0;
  for (int64_t b = 0; b < B; b++) total += work_of_sequence(b) * NH;
  const int64_t threads = parallel_parts(total >= kMinParallelWork);
  if (threads == 1) {
    run_pairs(0, n);
    return;
  }
  // cuts[t]: the first pair of thread t's run.
  std::vector<int64_t> cuts(size_t(threads) + 1, n);
  cuts[0] = 0;
  int64_t done = 0, largest = 0, share_start = 0;
  for (int64_t p = 0, t = 1; p < n; p++) {
    done += work_of_sequence(p / NH);
    if (t < threads && done * threads >= total * t) {
      cuts[size_t(t)] = p + 1;
      largest = std::max(largest, done - share_start);
      share_start = done;
      t++;
    }
  }
  largest = std::max(largest, total - share_start);
  if (largest * threads * 8 <= total * 9) {  // every share within 12.5% of the mean
    run_parts(threads, [&](int64_t t) { run_pairs(cuts[size_t(t)], cuts[size_t(t) + 1]); });
    return;
  }
  const std::vector<Pair> pairs = pairs_of(offsets, B, NH);
  const auto count = static_cast<int64_t>(pairs.size());
  run_parts(count, [&](int64_t i) { fn(pairs[size_t(i)]); });
}

}  // namespace

int64_t attention_cache_size(const int64_t* offsets, int64_t B, int64_t NH) { return exps_layout(offsets, B, NH).size; }

void attention_forward(float* out, float* att, const float* qkv, const int64_t* offsets, int64_t B, int64_t C,
                       int64_t NH) {
  check_shapes("attention_forward", offsets, B, C, NH);
  const int64_t T = B > 0 ? offsets[B] : 0;
  const ExpsLayout layout = exps_layout(offsets, B, NH);
  for_each_pair(offsets, B, C, NH, [&](Pair p) {
    pair_forward(out, att, att != nullptr ? layout.exps_of(att, p) : nullptr, qkv, p, T, C, NH);
  });
}

void attention_backward(GradOut dqkv, const float* dout, const float* qkv, const float* att, const int64_t* offsets,
                        int64_t B, int64_t C, int64_t NH) {
  check_shapes("attention_backward", offsets, B, C, NH);
  if (att == nullptr) throw UsageError("attention_backward: needs the row statistics (att is null)");
  const int64_t T = B > 0 ? offsets[B] : 0;
  const ExpsLayout layout = exps_layout(offsets, B, NH);
  // Rows before the first sequence belong to no pair: an overwrite gives them their gradient, 0.
  if (!dqkv.accumulate) std::fill(dqkv.data, dqkv.data + (B > 0 ? offsets[0] : 0) * 3 * C, 0.0f);
  for_each_pair(offsets, B, C, NH, [&](Pair p) {
    pair_backward(dqkv.data, dqkv.accumulate, dout, qkv, att, layout.exps_of(att, p), p, T, C, NH);
  });
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
