#include "normlab/bench/gemm.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/matmul.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"
#include "normlab/stats.hpp"
#include "normlab/tensor.hpp"

namespace normlab::bench {

GemmBenchResult bench_gemm(std::string_view variant, int64_t M, int64_t K, int64_t N, int repeats) {
  if (variant != "nn" && variant != "nt" && variant != "tn") {
    throw UsageError(fmt::format("bench_gemm: variant must be nn, nt or tn (got \"{}\")", variant));
  }
  if (M <= 0 || K <= 0 || N <= 0 || repeats <= 0) {
    throw UsageError(fmt::format("bench_gemm: sizes and repeats must be positive (got M={} K={} N={} repeats={})", M, K,
                                 N, repeats));
  }
  Rng rng(1234);
  // nn: A (M,K), B (K,N).  nt: A (M,K), B (N,K).  tn: A (K,M), B (K,N). Same element counts.
  Storage A(size_t(M) * size_t(K)), B(size_t(K) * size_t(N)), C(size_t(M) * size_t(N));
  for (auto& v : A) v = rng.normal();
  for (auto& v : B) v = rng.normal();

  // NORMLAB_ISA=reference times the plain loops (the dispatch picks them).
  auto call = [&] {
    if (variant == "nn") kernels::matmul_nn(C.data(), A.data(), B.data(), M, K, N, false);
    if (variant == "nt") kernels::matmul_nt(C.data(), A.data(), B.data(), M, K, N, false);
    if (variant == "tn") kernels::matmul_tn(C.data(), A.data(), B.data(), M, K, N, false);
  };

  const int warmup = std::max(3, repeats / 10);
  for (int i = 0; i < warmup; i++) call();
  std::vector<double> times;
  times.reserve(size_t(repeats));
  for (int i = 0; i < repeats; i++) {
    auto start = std::chrono::steady_clock::now();
    call();
    auto stop = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }

  GemmBenchResult result;
  result.variant = std::string(variant);
  result.M = M;
  result.K = K;
  result.N = N;
  result.threads = num_threads();
  result.repeats = repeats;
  result.median_ms = median(times);
  result.min_ms = *std::min_element(times.begin(), times.end());
  result.flops = 2.0 * double(M) * double(N) * double(K);
  result.gflops = result.flops / (result.median_ms * 1e-3) / 1e9;
  result.gflops_best = result.flops / (result.min_ms * 1e-3) / 1e9;
  return result;
}

}  // namespace normlab::bench
