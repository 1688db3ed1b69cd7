#include "normlab/bench/step.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "normlab/autograd.hpp"
#include "normlab/bench/gemm.hpp"
#include "normlab/error.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/parallel.hpp"
#include "normlab/stats.hpp"
#include "normlab/train/trainer.hpp"

namespace normlab::bench {

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:   1234 kB"
  }
  return 0.0;
}

double step_flops(const nn::ModelOptions& model, const std::vector<int64_t>& lengths) {
  const double d = double(model.encoder.d_model), ffn = double(model.encoder.dim_feedforward);
  const double layers = double(model.encoder.num_layers), classes = double(model.num_classes);
  double tokens = 0.0, sum_sq = 0.0;
  for (int64_t L : lengths) {
    tokens += double(L);
    sum_sq += double(L) * double(L);
  }
  // Per layer: in_proj (d -> 3d), out_proj (d -> d), linear1 (d -> ffn), linear2 (ffn -> d).
  const double linear_weights = layers * (4.0 * d * d + 2.0 * d * ffn);
  const double head_rows = model.head == nn::Head::token ? tokens : double(lengths.size());
  return 6.0 * tokens * linear_weights + 6.0 * head_rows * d * classes + layers * 12.0 * d * sum_sq;
}

namespace {

// This process's CPU time (ms) and involuntary context switches so far.
struct ProcessUsage {
  double cpu_ms = 0.0;
  int64_t involuntary_switches = 0;
};
ProcessUsage process_usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto ms = [](const timeval& t) { return double(t.tv_sec) * 1e3 + double(t.tv_usec) * 1e-3; };
  return {ms(u.ru_utime) + ms(u.ru_stime), int64_t(u.ru_nivcsw)};
}

// The machine's busy and steal time so far, all cores, from the "cpu" line of /proc/stat (ms, at
// the tick's resolution); zeros where there is none.
struct MachineTimes {
  double busy_ms = 0.0, steal_ms = 0.0;
};
MachineTimes machine_times() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return {};
  const double ms_per_tick = 1e3 / double(sysconf(_SC_CLK_TCK));
  return {(user + nice + system + irq + softirq) * ms_per_tick, steal * ms_per_tick};
}

}  // namespace

BenchStepResult bench_step(const train::RunConfig& config, int repeats, int warmup, bool breakdown) {
  if (repeats < 1 || warmup < 0) {
    throw UsageError(fmt::format("bench_step: repeats {} must be >= 1 and warmup {} >= 0", repeats, warmup));
  }
  train::Trainer trainer(config);
  std::vector<data::Batch> batches;
  for (int i = 0; i < warmup + repeats; ++i) batches.push_back(trainer.next_batch());

  BenchStepResult result;
  result.threads = num_threads();
  result.repeats = repeats;
  result.warmup = warmup;
  result.batch_size = config.train.batch_size;
  result.num_parameters = trainer.model().num_parameters();
  std::vector<double> times_ms;
  double total_s = 0.0, total_tokens = 0.0, total_flops = 0.0;
  std::map<std::pair<std::string, std::string>, std::vector<double>> parts_ms;  // (phase, name) -> per step
  PartCounts pool_before;
  ProcessUsage usage_before;
  MachineTimes machine_before;
  std::chrono::steady_clock::time_point timed_begin;
  for (int i = 0; i < warmup + repeats; ++i) {
    const data::Batch& batch = batches[size_t(i)];
    if (i == warmup) {
      pool_before = part_counts();
      usage_before = process_usage();
      machine_before = machine_times();
      timed_begin = std::chrono::steady_clock::now();
    }
    OpTimes times;
    if (breakdown) set_op_times(&times);
    const auto begin = std::chrono::steady_clock::now();
    times.mark = begin;
    trainer.train_step(batch, false);
    if (breakdown) {
      times.charge(times.other_s, "rest of the step (after the update)");
      set_op_times(nullptr);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (i < warmup) continue;
    for (const auto& [phase, bucket] : {std::pair{"forward", &times.forward_s},
                                        std::pair{"backward", &times.backward_s}, std::pair{"other", &times.other_s}})
      for (const auto& [name, s] : *bucket) parts_ms[{phase, name}].push_back(s * 1e3);
    times_ms.push_back(seconds * 1e3);
    total_s += seconds;
    total_tokens += double(batch.num_real_tokens);
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < batch.batch_size(); ++b) lengths.push_back(batch.length(b));
    total_flops += step_flops(trainer.model().model_options, lengths);
  }
  {
    const auto timed_end = std::chrono::steady_clock::now();
    const PartCounts pool = part_counts();
    const ProcessUsage usage = process_usage();
    const MachineTimes machine = machine_times();
    result.pool = {pool.by_caller - pool_before.by_caller, pool.by_workers - pool_before.by_workers,
                   pool.alone_regions - pool_before.alone_regions, pool.rests - pool_before.rests};
    result.wall_ms = std::chrono::duration<double, std::milli>(timed_end - timed_begin).count();
    result.process_cpu_ms = usage.cpu_ms - usage_before.cpu_ms;
    result.involuntary_switches = usage.involuntary_switches - usage_before.involuntary_switches;
    result.steal_ms = machine.steal_ms - machine_before.steal_ms;
    result.others_cpu_ms = std::max(0.0, machine.busy_ms - machine_before.busy_ms - result.process_cpu_ms);
  }
  result.step_ms = median(times_ms);
  for (auto& [key, values] : parts_ms) {
    values.resize(size_t(repeats), 0.0);  // a step without this op: 0
    result.breakdown.push_back({key.first, key.second, median(values)});
  }
  std::sort(result.breakdown.begin(), result.breakdown.end(),
            [](const BenchStepResult::Part& a, const BenchStepResult::Part& b) { return a.ms > b.ms; });
  const auto [fastest, slowest] = std::minmax_element(times_ms.begin(), times_ms.end());
  result.min_step_ms = *fastest;
  result.max_step_ms = *slowest;
  result.mean_tokens = total_tokens / double(repeats);
  result.tokens_per_s = total_s > 0 ? total_tokens / total_s : 0.0;
  result.peak_rss_mib = peak_rss_mib();
  result.kernels = kernels::active_isa_name();
  result.openmp_wait = openmp_wait_setting();
  result.flops_per_step = total_flops / double(repeats);
  result.gflops = result.flops_per_step / (result.step_ms * 1e-3) / 1e9;
  // The 1-thread GEMM rate, after the peak RSS is read (its 3 MiB would count otherwise).
  const int threads = num_threads();
  set_num_threads(1);
  result.gemm_1t_gflops = bench_gemm("nn", 512, 512, 512, 10).gflops;
  set_num_threads(threads);
  result.mfu = result.gflops / result.gemm_1t_gflops;
  result.fma_peak_gflops = fma_peak_gflops();
  if (result.fma_peak_gflops > 0.0)
    result.products_at_peak_ms = result.flops_per_step / (result.fma_peak_gflops * 1e9 * result.threads) * 1e3;
  return result;
}

}  // namespace normlab::bench
