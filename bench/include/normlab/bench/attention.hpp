#pragma once
// Micro-benchmark of the packed attention kernels (normlab bench attention): B sequences of L
// tokens each, d_model C, NH heads; forward (keeping the backward's cache) and backward, timed
// with std::chrono::steady_clock, median over `repeats` calls after warmup calls, at the current
// normlab::num_threads(). With `normlab bench step` on the same shapes it gives attention's share
// of a training step (bench/bench_equal_work.py).
#include <cstdint>

namespace normlab::bench {

struct AttentionBenchResult {
  int64_t B = 0, L = 0, C = 0, NH = 0;
  int threads = 0;
  int repeats = 0;
  double forward_ms = 0;           // median of attention_forward
  double forward_backward_ms = 0;  // median of forward then backward, timed together
  // Multiply-adds counted as 2 flops: q k^T and p v forward (2 * 2 * B * NH * L^2 * hd), the four
  // products of the backward (4 * 2 * B * NH * L^2 * hd); the fast kernel also recomputes q k^T in
  // the backward, which is not counted.
  double forward_gflops = 0;
  double forward_backward_gflops = 0;
  int64_t cache_floats = 0;  // what the forward keeps for the backward
};

// Inputs are seeded normals. Throws normlab::UsageError for non-positive sizes or repeats, or a C
// that NH does not divide.
AttentionBenchResult bench_attention(int64_t B, int64_t L, int64_t C, int64_t NH, int repeats);

}  // namespace normlab::bench
