#include "normlab/bench/layernorm.hpp"

#include <fmt/core.h>

#include <time.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/layer_norm.hpp"
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

// The wall and CPU times (calling thread) of repeated calls, in ms.
struct Samples {
  std::vector<double> wall_ms, cpu_ms;
};

// Runs body once; appends its wall time and its CPU time to samples.
template <typename F>
void time_call(F&& body, Samples& samples) {
  const double cpu_start = thread_cpu_ms();
  const auto start = std::chrono::steady_clock::now();
  body();
  const auto stop = std::chrono::steady_clock::now();
  const double cpu_stop = thread_cpu_ms();
  samples.wall_ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  samples.cpu_ms.push_back(cpu_stop - cpu_start);
}

// The kernels' arrays: x, dout (rows, cols) seeded normals, gamma ~ 1 + 0.1 N(0,1), beta ~ 0.1 N(0,1).
struct Buffers {
  Storage x, dout, y, dx;              // (rows, cols)
  Storage gamma, beta, dgamma, dbeta;  // (cols)
  Storage mean, rstd;                  // (rows)
};

Buffers make_buffers(int64_t rows, int64_t cols) {
  Rng rng(1234);
  const size_t n = size_t(rows) * size_t(cols);
  const size_t num_cols = size_t(cols);
  const size_t num_rows = size_t(rows);
  Buffers b{Storage(n),
            Storage(n),
            Storage(n),
            Storage(n, 0.0f),
            Storage(num_cols),
            Storage(num_cols),
            Storage(num_cols, 0.0f),
            Storage(num_cols, 0.0f),
            Storage(num_rows),
            Storage(num_rows)};
  for (auto& v : b.x) v = rng.normal();
  for (auto& v : b.dout) v = rng.normal();
  for (auto& v : b.gamma) v = 1.0f + 0.1f * rng.normal();
  for (auto& v : b.beta) v = 0.1f * rng.normal();
  return b;
}

// The streaming references: copy x into y (rows, cols), each thread its contiguous share of the
// rows, by glibc's memcpy or by stream_copy.
void copy_rows(float* y, const float* x, int64_t rows, int64_t cols, void (*copy)(float*, const float*, size_t)) {
  const int64_t threads = parallel_parts();
  run_parts(threads, [&](int64_t t) {
    const int64_t begin = rows * t / threads, end = rows * (t + 1) / threads;
    copy(y + begin * cols, x + begin * cols, size_t((end - begin) * cols));
  });
}

void memcpy_floats(float* y, const float* x, size_t n) { std::memcpy(y, x, n * sizeof(float)); }

// A copy whose stores bypass the cache (non-temporal): it moves two streams, read x and write y,
// where a copy with ordinary stores also reads each line of y before writing it. glibc's memcpy
// switches to such stores only above x86_non_temporal_threshold, a fraction of the L3 size the CPU
// reports: on a VM that reports a large L3 (508 MB on the EPYC of docs/PERFORMANCE.md, a threshold
// of 133 MB) a 25 MB memcpy uses ordinary stores, and this copy is the faster one.
void stream_copy_floats(float* y, const float* x, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i < n && reinterpret_cast<uintptr_t>(y + i) % 16 != 0; i++) y[i] = x[i];
  for (; i + 4 <= n; i += 4) _mm_stream_ps(y + i, _mm_loadu_ps(x + i));
  _mm_sfence();
#endif
  for (; i < n; i++) y[i] = x[i];
}

// Medians and bandwidths from the samples; bytes as layernorm.hpp counts them.
LayerNormBenchResult summarize(int64_t B, int64_t T, int64_t C, int repeats, const Samples& forward,
                               const Samples& backward, const Samples& forward_backward, const Samples& memcpy_copy,
                               const Samples& stream_copy) {
  const int64_t rows = B * T;
  const int64_t cols = C;
  LayerNormBenchResult result;
  result.B = B;
  result.T = T;
  result.C = C;
  result.threads = num_threads();
  result.repeats = repeats;
  result.forward_ms = median(forward.wall_ms);
  result.backward_ms = median(backward.wall_ms);
  result.forward_backward_ms = median(forward_backward.wall_ms);
  result.forward_cpu_ms = median(forward.cpu_ms);
  result.backward_cpu_ms = median(backward.cpu_ms);
  result.forward_backward_cpu_ms = median(forward_backward.cpu_ms);
  const double f = sizeof(float);
  const double elements = double(rows) * double(cols);
  result.forward_bytes = f * (2.0 * elements + 2.0 * double(cols) + 2.0 * double(rows));
  result.backward_bytes = f * (4.0 * elements + 2.0 * double(rows) + 3.0 * double(cols));
  result.forward_gbps = result.forward_bytes / (result.forward_ms * 1e-3) / 1e9;
  result.forward_backward_gbps =
      (result.forward_bytes + result.backward_bytes) / (result.forward_backward_ms * 1e-3) / 1e9;
  const double copy_bytes = f * 2.0 * elements;
  result.memcpy_ms = median(memcpy_copy.wall_ms);
  result.memcpy_gbps = copy_bytes / (result.memcpy_ms * 1e-3) / 1e9;
  result.stream_copy_ms = median(stream_copy.wall_ms);
  result.stream_copy_gbps = copy_bytes / (result.stream_copy_ms * 1e-3) / 1e9;
  result.memcpy_cpu_ms = median(memcpy_copy.cpu_ms);
  result.stream_copy_cpu_ms = median(stream_copy.cpu_ms);
  const bool stream_faster = result.stream_copy_ms < result.memcpy_ms;
  result.copy_ms = stream_faster ? result.stream_copy_ms : result.memcpy_ms;
  result.copy_cpu_ms = stream_faster ? result.stream_copy_cpu_ms : result.memcpy_cpu_ms;
  result.copy_gbps = copy_bytes / (result.copy_ms * 1e-3) / 1e9;
  result.copy_kind = stream_faster ? "stream copy" : "memcpy";
  return result;
}

}  // namespace

LayerNormBenchResult bench_layernorm(int64_t B, int64_t T, int64_t C, int repeats) {
  if (B <= 0 || T <= 0 || C <= 0 || repeats <= 0) {
    throw UsageError(fmt::format("bench_layernorm: sizes and repeats must be positive (got B={} T={} C={} repeats={})",
                                 B, T, C, repeats));
  }
  const int64_t rows = B * T;
  const int64_t cols = C;
  Buffers b = make_buffers(rows, cols);
  const float eps = 1e-12f;

  // NORMLAB_ISA=reference times the plain loops (the dispatch picks them).
  auto forward = [&] {
    kernels::layer_norm_forward(b.y.data(), b.mean.data(), b.rstd.data(), b.x.data(), b.gamma.data(), b.beta.data(),
                                rows, cols, eps);
  };
  // dx, dgamma, dbeta keep accumulating over the repeats; the values stay O(repeats) and the
  // memory traffic is the same as with fresh buffers.
  auto backward = [&] {
    kernels::layer_norm_backward(b.dx.data(), b.dgamma.data(), b.dbeta.data(), b.dout.data(), b.x.data(),
                                 b.gamma.data(), b.mean.data(), b.rstd.data(), rows, cols);
  };
  auto forward_backward = [&] {
    forward();
    backward();
  };
  auto memcpy_copy = [&] { copy_rows(b.y.data(), b.x.data(), rows, cols, memcpy_floats); };
  auto stream_copy = [&] { copy_rows(b.y.data(), b.x.data(), rows, cols, stream_copy_floats); };

  const int warmup = std::max(2, repeats / 10);
  for (int i = 0; i < warmup; i++) forward_backward();
  Samples forward_samples, backward_samples, forward_backward_samples, memcpy_samples, stream_copy_samples;
  for (int i = 0; i < repeats; i++) time_call(forward, forward_samples);
  for (int i = 0; i < repeats; i++) time_call(backward, backward_samples);
  for (int i = 0; i < repeats; i++) time_call(forward_backward, forward_backward_samples);
  for (int i = 0; i < warmup; i++) {
    memcpy_copy();
    stream_copy();
  }
  // Alternated, so a slow phase of a shared machine falls on both copies alike.
  for (int i = 0; i < repeats; i++) {
    time_call(memcpy_copy, memcpy_samples);
    time_call(stream_copy, stream_copy_samples);
  }
  return summarize(B, T, C, repeats, forward_samples, backward_samples, forward_backward_samples, memcpy_samples,
                   stream_copy_samples);
}

}  // namespace normlab::bench
