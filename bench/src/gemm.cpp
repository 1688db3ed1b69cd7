#include "normlab/bench/gemm.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <immintrin.h>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/kernels/matmul.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"
#include "normlab/stats.hpp"
#include "normlab/tensor.hpp"

namespace normlab::bench {

namespace {

// kChains independent chains acc = acc * a + b, `iterations` times; returns the sum of the lanes so
// that the compiler keeps every chain. Compiled for its ISA here: the rest of bench/ is not.
constexpr int kChains = 12;

__attribute__((target("avx512f"))) float fma_chains_avx512(long iterations) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; j++) acc[j] = _mm512_set1_ps(1e-3f * float(j));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < iterations; i++) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; j++) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  alignas(64) float lanes[16];
  float sum = 0.0f;
  for (int j = 0; j < kChains; j++) {
    _mm512_store_ps(lanes, acc[j]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(long iterations) {
  __m256 acc[kChains];
  for (int j = 0; j < kChains; j++) acc[j] = _mm256_set1_ps(1e-3f * float(j));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iterations; i++) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; j++) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  alignas(32) float lanes[8];
  float sum = 0.0f;
  for (int j = 0; j < kChains; j++) {
    _mm256_store_ps(lanes, acc[j]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

}  // namespace

double fma_peak_gflops(int runs) {
  const kernels::Isa isa = kernels::active_isa();
  if (isa != kernels::Isa::avx512 && isa != kernels::Isa::avx2) return 0.0;
  const int lanes = isa == kernels::Isa::avx512 ? 16 : 8;
  const long iterations = 2'000'000;  // about 3 ms on either path (the avx2 peak is half as many flops a cycle)
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int r = 0; r < runs; r++) {
    const auto start = std::chrono::steady_clock::now();
    sink = sink + (isa == kernels::Isa::avx512 ? fma_chains_avx512(iterations) : fma_chains_avx2(iterations));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(iterations) * kChains * lanes * 2.0 / s / 1e9);
  }
  return best;
}

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
