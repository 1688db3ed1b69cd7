#pragma once
// normlab's own single-precision GEMM (no BLAS). Row-major, all sizes int64_t.
//
// Three layouts cover every product the encoder needs without ever materializing a transpose
// (the packing and the micro-kernel read each operand in the layout it is stored in):
//   matmul_nn: C = A B        dX = dY W, attention probs @ V
//   matmul_nt: C = A B^T      Linear forward y = x W^T, attention scores q k^T
//   matmul_tn: C = A^T B      weight gradient dW = dY^T X
//
// `accumulate` = false: C = product (C's old contents are ignored, so C may be uninitialized).
// `accumulate` = true:  C += product.
// K = 0 is allowed: C = 0, or C unchanged when accumulating. M = 0 or N = 0 does nothing.
//
// `parallel` = true splits the output tiles over the threads of normlab's pool (parallel.hpp: one
// contiguous block of tiles per part); products smaller than about 2^17 multiply-adds run on the
// calling thread anyway (a region costs more). `parallel` = false runs on the calling thread only:
// use it from inside your own parallel loop (attention calls one GEMM per sequence and head); a
// call from inside a part or an OpenMP region runs as one part anyway.
// The serial path is safe to call from several threads at once.
//
// Determinism: every element of C is computed by exactly one thread, as
//   C[i][j] (+)= sum over K blocks of 256, in order, of (fma chain over k in order),
// which depends neither on the thread count, nor on `parallel`, nor on the kernel path (the
// multiply-add is always fused, std::fma: vfmadd on avx2/avx512, glibc's exact fmaf on generic):
// results are bit-identical run to run, for any number of threads and on every path.
#include <cstdint>

namespace normlab::kernels {

// C (M,N) (+)= A (M,K) @ B (K,N)
void matmul_nn(float* C,                        // (M, N)
               const float* A, const float* B,  // (M, K), (K, N)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool parallel = true);

// C (M,N) (+)= A (M,K) @ B^T, with B stored (N,K)
void matmul_nt(float* C,                        // (M, N)
               const float* A, const float* B,  // (M, K), (N, K)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool parallel = true);

// C (M,N) (+)= A^T @ B, with A stored (K,M) and B (K,N)
void matmul_tn(float* C,                        // (M, N)
               const float* A, const float* B,  // (K, M), (K, N)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool parallel = true);

}  // namespace normlab::kernels
