#pragma once
// Micro-benchmark of the LayerNorm kernels (normlab bench layernorm; bench/bench_layernorm.py
// compares it with PyTorch). Timing: std::chrono::steady_clock around each call, median over
// `repeats` calls after warmup calls, at the current normlab::num_threads().
#include <cstdint>

namespace normlab::bench {

struct LayerNormBenchResult {
  int64_t B = 0, T = 0, C = 0;  // x is (B, T, C), normalized over C: rows = B*T, cols = C
  int threads = 0;
  int repeats = 0;
  double forward_ms = 0;           // median of layer_norm_forward
  double backward_ms = 0;          // median of layer_norm_backward alone
  double forward_backward_ms = 0;  // median of forward then backward, timed together
  // The same medians in CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID). With one thread
  // this is the kernel's own time even when other processes compete for the cores (wall time then
  // also counts the slices the scheduler gave to them); with more threads it misses the workers.
  double forward_cpu_ms = 0;
  double backward_cpu_ms = 0;
  double forward_backward_cpu_ms = 0;
  // Effective bandwidth = bytes below / median time. Counted once per array an ideal kernel must
  // move, in bytes (float32):
  //   forward:  read x (rows*cols) + write y (rows*cols) + read gamma, beta (cols each)
  //             + write mean, rstd (rows each)
  //   backward: read dout, x (rows*cols each) + read mean, rstd (rows each) + read gamma (cols)
  //             + read and write dx (rows*cols, twice: the kernel accumulates dx += ...)
  //             + write dgamma, dbeta (cols each)
  double forward_bytes = 0;
  double backward_bytes = 0;
  double forward_gbps = 0;           // forward_bytes / forward_ms, 1 GB = 1e9 bytes
  double forward_backward_gbps = 0;  // (forward_bytes + backward_bytes) / forward_backward_ms
  // The streaming reference on the same machine, threads and sizes: a copy of x into y (the
  // forward's two big arrays), split over the threads like the kernels' rows; bytes = read x +
  // write y. Timed two ways, alternating: glibc's memcpy, and a copy with non-temporal stores
  // (two streams: read x, write y, where ordinary stores also read each line of y first; glibc's
  // memcpy uses them only above a threshold derived from the L3 size the CPU reports). copy_* is
  // the faster of the two, the least time these bytes take on this machine. The kernels' GB/s
  // divided by copy_gbps is how close they come to moving memory only.
  double copy_ms = 0;
  double copy_gbps = 0;
  const char* copy_kind = "";  // which copy copy_* is: "memcpy" or "stream copy"
  double memcpy_ms = 0;
  double memcpy_gbps = 0;
  double stream_copy_ms = 0;
  double stream_copy_gbps = 0;
  // Their CPU times as above (the calling thread's): at one thread, a busy machine's slices to
  // other processes left out of both the kernels' and the copy's times.
  double copy_cpu_ms = 0;
  double memcpy_cpu_ms = 0;
  double stream_copy_cpu_ms = 0;
};

// Inputs are seeded normals (x, dout) and gamma ~ 1 + 0.1 N(0,1), beta ~ 0.1 N(0,1); eps = 1e-12.
// Throws normlab::UsageError for non-positive sizes or repeats.
LayerNormBenchResult bench_layernorm(int64_t B, int64_t T, int64_t C, int repeats);

}  // namespace normlab::bench
