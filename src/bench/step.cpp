#include "normlab/bench/step.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "normlab/error.hpp"
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

BenchStepResult bench_step(const train::RunConfig& config, int repeats, int warmup) {
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
  double total_s = 0.0, total_tokens = 0.0;
  for (int i = 0; i < warmup + repeats; ++i) {
    const data::Batch& batch = batches[size_t(i)];
    const auto begin = std::chrono::steady_clock::now();
    trainer.train_step(batch, false);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (i < warmup) continue;
    times_ms.push_back(seconds * 1e3);
    total_s += seconds;
    total_tokens += double(batch.num_real_tokens);
  }
  result.step_ms = median(times_ms);
  const auto [fastest, slowest] = std::minmax_element(times_ms.begin(), times_ms.end());
  result.min_step_ms = *fastest;
  result.max_step_ms = *slowest;
  result.mean_tokens = total_tokens / double(repeats);
  result.tokens_per_s = total_s > 0 ? total_tokens / total_s : 0.0;
  result.peak_rss_mib = peak_rss_mib();
  return result;
}

}  // namespace normlab::bench
