#include "normlab/bench/layernorm.hpp"

#include <fmt/core.h>

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/kernels/reference/layer_norm.hpp"
#include "normlab/kernels/reference/mode.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"
#include "normlab/stats.hpp"
#include "normlab/tensor.hpp"

namespace normlab::bench {

namespace {

double thread_cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return double(now.tv_sec) * 1e3 + double(now.tv_nsec) * 1e-6;
}

// Runs body once; appends its wall time and its CPU time (calling thread) in ms.
template <typename F>
void time_call(F&& body, std::vector<double>& wall_ms, std::vector<double>& cpu_ms) {
  const double cpu_start = thread_cpu_ms();
  const auto start = std::chrono::steady_clock::now();
  body();
  const auto stop = std::chrono::steady_clock::now();
  const double cpu_stop = thread_cpu_ms();
  wall_ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  cpu_ms.push_back(cpu_stop - cpu_start);
}

}  // namespace

LayerNormBenchResult bench_layernorm(int64_t B, int64_t T, int64_t C, int repeats) {
  if (B <= 0 || T <= 0 || C <= 0 || repeats <= 0) {
    throw UsageError(fmt::format("bench_layernorm: sizes and repeats must be positive (got B={} T={} C={} repeats={})",
                                 B, T, C, repeats));
  }
  const int64_t rows = B * T;
  const int64_t cols = C;
  const size_t n = size_t(rows) * size_t(cols);

  Rng rng(1234);
  Storage x(n), dout(n), y(n), dx(n, 0.0f);
  const size_t num_cols = size_t(cols);
  const size_t num_rows = size_t(rows);
  Storage gamma(num_cols), beta(num_cols), dgamma(num_cols, 0.0f), dbeta(num_cols, 0.0f);
  Storage mean(num_rows), rstd(num_rows);
  for (auto& v : x) v = rng.normal();
  for (auto& v : dout) v = rng.normal();
  for (auto& v : gamma) v = 1.0f + 0.1f * rng.normal();
  for (auto& v : beta) v = 0.1f * rng.normal();
  const float eps = 1e-12f;

  // NORMLAB_KERNELS=reference times the plain loops instead.
  const bool reference = kernels::reference::reference_kernels_enabled();
  const auto forward_kernel = reference ? kernels::reference::layer_norm_forward : kernels::layer_norm_forward;
  const auto backward_kernel = reference ? kernels::reference::layer_norm_backward : kernels::layer_norm_backward;
  auto forward = [&] {
    forward_kernel(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows, cols, eps);
  };
  // dx, dgamma, dbeta keep accumulating over the repeats; the values stay O(repeats) and the
  // memory traffic is the same as with fresh buffers.
  auto backward = [&] {
    backward_kernel(dx.data(), dgamma.data(), dbeta.data(), dout.data(), x.data(), gamma.data(), mean.data(),
                    rstd.data(), rows, cols);
  };

  const int warmup = std::max(2, repeats / 10);
  for (int i = 0; i < warmup; i++) {
    forward();
    backward();
  }
  std::vector<double> forward_times, backward_times, forward_backward_times;
  std::vector<double> forward_cpu, backward_cpu, forward_backward_cpu;
  auto forward_backward = [&] {
    forward();
    backward();
  };
  for (int i = 0; i < repeats; i++) time_call(forward, forward_times, forward_cpu);
  for (int i = 0; i < repeats; i++) time_call(backward, backward_times, backward_cpu);
  for (int i = 0; i < repeats; i++) time_call(forward_backward, forward_backward_times, forward_backward_cpu);
  // The reference: copy x into y, each thread its contiguous share of the rows.
  auto copy = [&] {
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t begin = rows * t / threads, end = rows * (t + 1) / threads;
      std::memcpy(y.data() + begin * cols, x.data() + begin * cols, size_t((end - begin) * cols) * sizeof(float));
    }
  };
  std::vector<double> copy_times, copy_cpu;
  for (int i = 0; i < warmup; i++) copy();
  for (int i = 0; i < repeats; i++) time_call(copy, copy_times, copy_cpu);

  LayerNormBenchResult result;
  result.B = B;
  result.T = T;
  result.C = C;
  result.threads = num_threads();
  result.repeats = repeats;
  result.forward_ms = median(forward_times);
  result.backward_ms = median(backward_times);
  result.forward_backward_ms = median(forward_backward_times);
  result.forward_cpu_ms = median(forward_cpu);
  result.backward_cpu_ms = median(backward_cpu);
  result.forward_backward_cpu_ms = median(forward_backward_cpu);
  const double f = sizeof(float);
  const double elements = double(rows) * double(cols);
  result.forward_bytes = f * (2.0 * elements + 2.0 * double(cols) + 2.0 * double(rows));
  result.backward_bytes = f * (4.0 * elements + 2.0 * double(rows) + 3.0 * double(cols));
  result.forward_gbps = result.forward_bytes / (result.forward_ms * 1e-3) / 1e9;
  result.forward_backward_gbps =
      (result.forward_bytes + result.backward_bytes) / (result.forward_backward_ms * 1e-3) / 1e9;
  result.copy_ms = median(copy_times);
  result.copy_gbps = f * 2.0 * elements / (result.copy_ms * 1e-3) / 1e9;
  return result;
}

}  // namespace normlab::bench
