#include "normlab/bench/step.hpp"

#include <fmt/format.h>

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
  for (int i = 0; i < warmup + repeats; ++i) {
    const data::Batch& batch = batches[size_t(i)];
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
  return result;
}

}  // namespace normlab::bench
