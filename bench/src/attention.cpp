#include "normlab/bench/attention.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/attention.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"
#include "normlab/stats.hpp"
#include "normlab/tensor.hpp"

namespace normlab::bench {

AttentionBenchResult bench_attention(int64_t B, int64_t L, int64_t C, int64_t NH, int repeats) {
  if (B <= 0 || L <= 0 || C <= 0 || NH <= 0 || repeats <= 0 || C % NH != 0) {
    throw UsageError(
        fmt::format("bench_attention: sizes and repeats must be positive and NH must divide C (got "
                    "B={} L={} C={} NH={} repeats={})",
                    B, L, C, NH, repeats));
  }
  std::vector<int64_t> offsets(size_t(B) + 1);
  for (int64_t b = 0; b <= B; b++) offsets[size_t(b)] = b * L;
  const int64_t T = B * L;

  // NORMLAB_ISA=reference times the plain loops (and their (L, L) cache): the dispatch picks them.

  Rng rng(1234);
  // Tensor storage (cache-line aligned), as in training: threads then write disjoint cache lines.
  Storage qkv(size_t(T * 3 * C)), dout(size_t(T * C)), out(size_t(T * C)), dqkv(size_t(T * 3 * C), 0.0f);
  Storage cache(size_t(kernels::attention_cache_size(offsets.data(), B, NH)));
  for (auto& v : qkv) v = rng.normal();
  for (auto& v : dout) v = rng.normal();
  auto forward = [&] { kernels::attention_forward(out.data(), cache.data(), qkv.data(), offsets.data(), B, C, NH); };
  // dqkv keeps accumulating over the repeats, as the backward's += contract allows.
  auto backward = [&] {
    kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), cache.data(), offsets.data(), B, C, NH);
  };
  auto elapsed_ms = [](auto&& body) {
    const auto start = std::chrono::steady_clock::now();
    body();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };

  const int warmup = std::max(2, repeats / 10);
  for (int i = 0; i < warmup; i++) {
    forward();
    backward();
  }
  std::vector<double> forward_times, forward_backward_times;
  for (int i = 0; i < repeats; i++) forward_times.push_back(elapsed_ms(forward));
  for (int i = 0; i < repeats; i++) {
    forward_backward_times.push_back(elapsed_ms([&] {
      forward();
      backward();
    }));
  }

  AttentionBenchResult result;
  result.B = B;
  result.L = L;
  result.C = C;
  result.NH = NH;
  result.threads = num_threads();
  result.repeats = repeats;
  result.forward_ms = median(forward_times);
  result.forward_backward_ms = median(forward_backward_times);
  const double product_flops = 2.0 * double(B) * double(NH) * double(L) * double(L) * double(C / NH);
  result.forward_gflops = 2.0 * product_flops / (result.forward_ms * 1e-3) / 1e9;
  result.forward_backward_gflops = 6.0 * product_flops / (result.forward_backward_ms * 1e-3) / 1e9;
  result.cache_floats = int64_t(cache.size());
  return result;
}

}  // namespace normlab::bench
