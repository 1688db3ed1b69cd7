#include "normlab/kernels/attention.hpp"
#include "isa_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/math.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {

void check_shapes(const char* where, const int64_t* offsets, int64_t B, int64_t C, int64_t NH) {
  const std::string fn(where);
  if (B < 0) throw UsageError(fn + ": batch size must be >= 0, got " + std::to_string(B));
  if (NH < 1 || C < 1 || C % NH != 0) {
    throw UsageError(fn + ": d_model must be a positive multiple of the number of heads (got C=" +
                     std::to_string(C) + ", NH=" + std::to_string(NH) + ")");
  }
  if (offsets == nullptr) throw UsageError(fn + ": offsets is null");
  if (offsets[0] < 0) throw UsageError(fn + ": offsets[0] must be >= 0");
  for (int64_t b = 0; b < B; b++) {
    if (offsets[b + 1] < offsets[b]) {
      throw UsageError(fn + ": offsets must be non-decreasing (offsets[" + std::to_string(b) +
                       "]=" + std::to_string(offsets[b]) + " > offsets[" + std::to_string(b + 1) +
                       "]=" + std::to_string(offsets[b + 1]) + ")");
    }
  }
}

int64_t max_length(const int64_t* offsets, int64_t B) {
  int64_t longest = 0;
  for (int64_t b = 0; b < B; b++) longest = std::max(longest, offsets[b + 1] - offsets[b]);
  return longest;
}

// Start of sequence b's block in the probability cache, (B+1) entries; the last is the total size.
std::vector<int64_t> cache_starts(const int64_t* offsets, int64_t B, int64_t NH) {
  std::vector<int64_t> starts(B + 1, 0);
  for (int64_t b = 0; b < B; b++) {
    const int64_t len = offsets[b + 1] - offsets[b];
    starts[b + 1] = starts[b] + NH * len * len;
  }
  return starts;
}

// The per-head products are small (L <= a few hundred, hd 8..64), serial (the threads already run
// over (sequence, head) pairs) and have row-major operands with arbitrary row strides, so they get
// their own matmul rather than the library's. An 8x8 block of C is accumulated in registers while
// k runs over K. Every entry is the fma chain over k = 0..K-1 in order, on every path.
constexpr int64_t kTileRows = 8;
constexpr int64_t kTileCols = 8;

// One full kTileRows x kTileCols tile of C = A @ B (or C += A @ B).
#if defined(__AVX2__)
// Spelled out with intrinsics: left to itself the vectorizer runs the 8 lanes over the tile's rows
// (a gather) instead of its columns.
inline void matmul_tile(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                        int64_t ldb, int64_t K, bool accumulate) {
  __m256 acc[kTileRows];
  for (int64_t ii = 0; ii < kTileRows; ii++) acc[ii] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    const __m256 bk = _mm256_loadu_ps(b + k * ldb);
    for (int64_t ii = 0; ii < kTileRows; ii++) acc[ii] = _mm256_fmadd_ps(_mm256_set1_ps(a[ii * lda + k]), bk, acc[ii]);
  }
  for (int64_t ii = 0; ii < kTileRows; ii++) {
    const __m256 result = accumulate ? _mm256_add_ps(_mm256_loadu_ps(c + ii * ldc), acc[ii]) : acc[ii];
    _mm256_storeu_ps(c + ii * ldc, result);
  }
}
#else
inline void matmul_tile(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                        int64_t ldb, int64_t K, bool accumulate) {
  float acc[kTileRows][kTileCols] = {};
  for (int64_t k = 0; k < K; k++) {
    const float* bk = b + k * ldb;
    for (int64_t ii = 0; ii < kTileRows; ii++) {
      const float aik = a[ii * lda + k];
      for (int64_t jj = 0; jj < kTileCols; jj++) acc[ii][jj] = std::fma(aik, bk[jj], acc[ii][jj]);
    }
  }
  for (int64_t ii = 0; ii < kTileRows; ii++) {
    float* cii = c + ii * ldc;
    for (int64_t jj = 0; jj < kTileCols; jj++) cii[jj] = accumulate ? cii[jj] + acc[ii][jj] : acc[ii][jj];
  }
}
#endif

// A partial tile at the bottom or right edge of C: rows <= kTileRows, cols <= kTileCols.
inline void matmul_edge_tile(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                             int64_t ldb, int64_t K, int64_t rows, int64_t cols, bool accumulate) {
  float acc[kTileRows][kTileCols] = {};
  for (int64_t k = 0; k < K; k++) {
    const float* bk = b + k * ldb;
    for (int64_t ii = 0; ii < rows; ii++) {
      const float aik = a[ii * lda + k];
      for (int64_t jj = 0; jj < cols; jj++) acc[ii][jj] = std::fma(aik, bk[jj], acc[ii][jj]);
    }
  }
  for (int64_t ii = 0; ii < rows; ii++) {
    float* cii = c + ii * ldc;
    for (int64_t jj = 0; jj < cols; jj++) cii[jj] = accumulate ? cii[jj] + acc[ii][jj] : acc[ii][jj];
  }
}

// C (M, N) = A (M, K) @ B (K, N), or C += A @ B when accumulate; row strides lda, ldb, ldc.
void head_matmul(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb,
                 int64_t M, int64_t K, int64_t N, bool accumulate) {
  for (int64_t i = 0; i < M; i += kTileRows) {
    const int64_t rows = std::min(kTileRows, M - i);
    for (int64_t j = 0; j < N; j += kTileCols) {
      const int64_t cols = std::min(kTileCols, N - j);
      float* cij = c + i * ldc + j;
      const float* ai = a + i * lda;
      const float* bj = b + j;
      if (rows == kTileRows && cols == kTileCols) {
        matmul_tile(cij, ldc, ai, lda, bj, ldb, K, accumulate);
      } else {
        matmul_edge_tile(cij, ldc, ai, lda, bj, ldb, K, rows, cols, accumulate);
      }
    }
  }
}

// dst (cols, rows) = src (rows, cols)^T; src has row stride ld.
void transpose(float* dst, const float* src, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * ld + c];
  }
}

// One (sequence, head) pair of the forward: L tokens starting at row t0, head columns h*hd.
//   probs (L, L) = softmax(q k^T / sqrt(hd)),  out rows = probs v
// scratch: kT (hd, L).
void attention_head_forward(float* out, float* probs,                         // (T, C), (L, L)
                            const float* qkv, int64_t t0, int64_t L,          // (T, 3C)
                            int64_t C, int64_t h, int64_t hd, float* scratch) {
  const int64_t C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = qkv + t0 * C3 + h * hd;          // (L, hd), row stride 3C
  const float* k = qkv + t0 * C3 + C + h * hd;      // (L, hd), row stride 3C
  const float* v = qkv + t0 * C3 + 2 * C + h * hd;  // (L, hd), row stride 3C
  float* kT = scratch;                              // (hd, L)
  transpose(kT, k, C3, L, hd);
  head_matmul(probs, L, q, C3, kT, L, L, hd, L, false);  // raw scores q . k_j, unscaled
  for (int64_t i = 0; i < L; i++) {
    float* p = probs + i * L;
    // softmax of scale * scores, shifted by the row max so exp never overflows (scale > 0, so the
    // max of the scaled row is scale times the max of the raw one)
    float maxval = p[0];
    for (int64_t j = 1; j < L; j++) maxval = std::max(maxval, p[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < L; j++) {
      p[j] = math::exp((p[j] - maxval) * scale);
      sum += p[j];
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t j = 0; j < L; j++) p[j] *= inv_sum;
  }
  head_matmul(out + t0 * C + h * hd, C, probs, L, v, C3, L, L, hd, false);
}

// One (sequence, head) pair of the backward, with probs (L, L) from the forward. dqkv += the
// gradients of this head's q, k and v columns.
// scratch: vT (hd, L), ds (L, L), transposed (L, L).
void attention_head_backward(float* dqkv,                                     // (T, 3C)
                             const float* dout, const float* qkv,              // (T, C), (T, 3C)
                             const float* probs, int64_t t0, int64_t L,        // (L, L)
                             int64_t C, int64_t h, int64_t hd, float* scratch) {
  const int64_t C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* q = qkv + t0 * C3 + h * hd;          // (L, hd), row stride 3C
  const float* k = qkv + t0 * C3 + C + h * hd;      // (L, hd), row stride 3C
  const float* v = qkv + t0 * C3 + 2 * C + h * hd;  // (L, hd), row stride 3C
  const float* dO = dout + t0 * C + h * hd;         // (L, hd), row stride C
  float* dq = dqkv + t0 * C3 + h * hd;              // (L, hd), row stride 3C
  float* dk = dqkv + t0 * C3 + C + h * hd;          // (L, hd), row stride 3C
  float* dv = dqkv + t0 * C3 + 2 * C + h * hd;      // (L, hd), row stride 3C
  float* vT = scratch;                              // (hd, L)
  float* ds = vT + hd * L;                          // (L, L)
  float* transposed = ds + L * L;                   // (L, L): probs^T, then ds^T

  // out = probs v  =>  dv += probs^T dout,  dprobs = dout v^T
  transpose(transposed, probs, L, L, L);
  head_matmul(dv, C3, transposed, L, dO, C, L, L, hd, true);
  transpose(vT, v, C3, L, hd);
  head_matmul(ds, L, dO, C, vT, L, L, hd, L, false);
  // softmax backward, row by row: ds = probs * (dprobs - sum_j probs dprobs); the score scale is
  // folded in here so the two products below see d(raw scores)
  for (int64_t i = 0; i < L; i++) {
    const float* p = probs + i * L;
    float* dsi = ds + i * L;
    float p_dot_dp = 0.0f;
    for (int64_t j = 0; j < L; j++) p_dot_dp += p[j] * dsi[j];
    for (int64_t j = 0; j < L; j++) dsi[j] = p[j] * (dsi[j] - p_dot_dp) * scale;
  }
  // raw scores = q k^T  =>  dq += ds k,  dk += ds^T q
  head_matmul(dq, C3, ds, L, k, C3, L, L, hd, true);
  transpose(transposed, ds, L, L, L);
  head_matmul(dk, C3, transposed, L, q, C3, L, L, hd, true);
}

}  // namespace

int64_t attention_cache_size(const int64_t* offsets, int64_t B, int64_t NH) {
  int64_t size = 0;
  for (int64_t b = 0; b < B; b++) {
    const int64_t len = offsets[b + 1] - offsets[b];
    size += NH * len * len;
  }
  return size;
}

void attention_forward(float* out, float* att, const float* qkv, const int64_t* offsets, int64_t B,
                       int64_t C, int64_t NH) {
  check_shapes("attention_forward", offsets, B, C, NH);
  const int64_t hd = C / NH;
  const int64_t longest = max_length(offsets, B);
  const std::vector<int64_t> starts = cache_starts(offsets, B, NH);
  // Per thread: kT (hd, L), and the (L, L) probabilities when they are not cached.
  const int64_t scratch_per_thread = hd * longest + (att == nullptr ? longest * longest : 0);
  const int64_t num_pairs = B * NH;
#pragma omp parallel
  {
    // Allocated by each thread itself, so a call from inside another parallel region is safe too.
    std::vector<float> scratch(static_cast<size_t>(scratch_per_thread));
#pragma omp for schedule(static)
    for (int64_t pair = 0; pair < num_pairs; pair++) {
      const int64_t b = pair / NH;
      const int64_t h = pair % NH;
      const int64_t t0 = offsets[b];
      const int64_t L = offsets[b + 1] - t0;
      if (L == 0) continue;
      float* probs = att != nullptr ? att + starts[b] + h * L * L : scratch.data() + hd * longest;
      attention_head_forward(out, probs, qkv, t0, L, C, h, hd, scratch.data());
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        const int64_t* offsets, int64_t B, int64_t C, int64_t NH) {
  check_shapes("attention_backward", offsets, B, C, NH);
  if (att == nullptr) throw UsageError("attention_backward: needs the probability cache (att is null)");
  const int64_t hd = C / NH;
  const int64_t longest = max_length(offsets, B);
  const std::vector<int64_t> starts = cache_starts(offsets, B, NH);
  // Per thread: vT (hd, L) + ds (L, L) + a transposed (L, L).
  const int64_t scratch_per_thread = hd * longest + 2 * longest * longest;
  const int64_t num_pairs = B * NH;
#pragma omp parallel
  {
    std::vector<float> scratch(static_cast<size_t>(scratch_per_thread));
#pragma omp for schedule(static)
    for (int64_t pair = 0; pair < num_pairs; pair++) {
      const int64_t b = pair / NH;
      const int64_t h = pair % NH;
      const int64_t t0 = offsets[b];
      const int64_t L = offsets[b + 1] - t0;
      if (L == 0) continue;
      const float* probs = att + starts[b] + h * L * L;
      attention_head_backward(dqkv, dout, qkv, probs, t0, L, C, h, hd, scratch.data());
    }
  }
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
