#pragma once
// `normlab bench step`: the time of one training step (forward, backward, clip, optimizer update)
// of the model a config describes, on batches of its task. The batches are drawn before the clock
// starts, so data generation is not timed.
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/nn/encoder.hpp"
#include "normlab/parallel.hpp"
#include "normlab/train/config.hpp"

namespace normlab::bench {

struct BenchStepResult {
  int threads = 1;
  int repeats = 0;  // timed steps
  int warmup = 0;   // untimed steps before them
  int64_t batch_size = 0;
  int64_t num_parameters = 0;
  double mean_tokens = 0.0;  // real tokens per batch, averaged over the timed batches
  double step_ms = 0.0;      // median over the timed steps
  double min_step_ms = 0.0;
  double max_step_ms = 0.0;
  double tokens_per_s = 0.0;  // all real tokens of the timed steps / their total time
  double peak_rss_mib = 0.0;  // the process's peak resident set size after the steps (VmHWM), MiB
  std::string kernels;        // the kernel path that ran: "generic", "avx2", "avx512" or "reference"
  std::string openmp_wait;    // what idle OpenMP threads do (openmp_wait_setting)
  // Model FLOPs of the timed steps (step_flops), docs/PERFORMANCE.md "MFU": the matrix products of
  // every Linear, forward and backward, 6 * rows * in * out, and attention's 12 * d_model * L^2
  // per layer and sequence (q k^T and P v forward, four products backward). Elementwise work,
  // norms, softmax and the optimizer are not counted, nor the scores the backward recomputes.
  double flops_per_step = 0.0;  // mean over the timed batches
  double gflops = 0.0;          // flops_per_step / median step time
  // The machine's 1-thread GEMM rate on the same path: median of 512 x 512 x 512 nn calls, timed
  // right after the steps; mfu = gflops / gemm_1t_gflops (so above 1 is possible with threads).
  double gemm_1t_gflops = 0.0;
  double mfu = 0.0;
  // The path's multiply-add peak on one thread (fma_peak_gflops, bench/gemm.hpp; 0 on the generic
  // and reference paths), and the step's products alone at that peak on every thread: flops_per_step / (peak *
  // threads). No step of this model on this path and thread count can be shorter; what the rest of
  // the step (norms, softmax, the optimizer, ...) may take, against a target time, is what is left.
  double fma_peak_gflops = 0.0;
  double products_at_peak_ms = 0.0;
  // With breakdown: where the step's time goes (autograd.hpp, OpTimes), one row per op and phase,
  // the median over the timed steps of that op's time in a step; largest first.
  struct Part {
    std::string phase;  // "forward", "backward" or "other"
    std::string name;   // the op (a node's name) or the phase of the step
    double ms = 0.0;
  };
  std::vector<Part> breakdown;
  // What ran the timed steps (docs/PERFORMANCE.md, "Threads"): the pool's counts over them
  // (part_counts: parts run by the caller and by the workers, regions the caller ran alone while the
  // pool rested, rests started), their wall time, this process's CPU time and involuntary context
  // switches (getrusage), and the machine's, from /proc/stat at the kernel tick's resolution
  // (10 ms): the time the hypervisor ran something else on the cores (steal) and the CPU time of
  // other processes (every core's busy time minus this process's). At 2 threads a worker spins
  // between regions, so process_cpu_ms near 2 x wall_ms says both threads ran throughout.
  PartCounts pool;
  double wall_ms = 0.0, process_cpu_ms = 0.0, steal_ms = 0.0, others_cpu_ms = 0.0;
  int64_t involuntary_switches = 0;
};

// Model FLOPs of one training step of this model on a batch with these sequence lengths (see
// flops_per_step).
double step_flops(const nn::ModelOptions& model, const std::vector<int64_t>& lengths);

// This process's peak resident set size so far (VmHWM of /proc/self/status), MiB; 0 where the
// kernel does not tell. VmHWM, not getrusage's ru_maxrss: ru_maxrss survives exec, so a process
// started by a big one (a Python benchmark script) would report its parent's size.
double peak_rss_mib();

// Uses the config's thread count as it stands (set it with set_num_threads before calling).
// UsageError if repeats < 1 or warmup < 0.
BenchStepResult bench_step(const train::RunConfig& config, int repeats, int warmup = 3, bool breakdown = false);

}  // namespace normlab::bench
