#pragma once
// Micro-benchmark of normlab's GEMM (normlab bench gemm; bench/bench_gemm.py compares it with
// OpenBLAS sgemm through NumPy). Timing: std::chrono::steady_clock around each call (accumulate =
// false), median and minimum over `repeats` calls after warmup calls, at the current
// normlab::num_threads().
#include <cstdint>
#include <string>
#include <string_view>

namespace normlab::bench {

struct GemmBenchResult {
  std::string variant;          // "nn", "nt" or "tn" (kernels/matmul.hpp)
  int64_t M = 0, K = 0, N = 0;  // C (M,N) = op(A) (M,K) @ op(B) (K,N)
  int threads = 0;
  int repeats = 0;
  double median_ms = 0;
  double min_ms = 0;
  double flops = 0;        // 2*M*N*K: one multiply and one add per term
  double gflops = 0;       // flops / median / 1e9
  double gflops_best = 0;  // flops / min / 1e9 (the machine is shared: the least disturbed call)
};

// A, B are seeded normals stored as the variant reads them. Throws normlab::UsageError for an
// unknown variant or non-positive sizes or repeats.
GemmBenchResult bench_gemm(std::string_view variant, int64_t M, int64_t K, int64_t N, int repeats);

// The calling thread's multiply-add peak on the active kernel path, GFLOP/s: 12 independent chains
// of vector fused multiply-adds (enough to fill two FMA pipes of 4 cycles' latency), 2 flops per
// lane, the best of `runs` runs of about 3 ms. What no kernel of that path can beat on this core:
// a GEMM's share of it says how much is left. 0 on the generic and reference paths (no fixed
// vector width: what the compiler makes of plain loops).
double fma_peak_gflops(int runs = 20);

}  // namespace normlab::bench
