// normlab bench step --config FILE [--threads N] [--repeats R] [--warmup W] [--set K=V]... [--json]
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/bench/step.hpp"
#include "normlab/error.hpp"
#include "normlab/parallel.hpp"
#include "normlab/train/config.hpp"

namespace normlab::cli {

namespace {

struct BenchStepOptions {
  std::string config;
  std::vector<std::string> overrides;
  int threads = -1;  // -1: as the config says
  int repeats = 20;
  int warmup = 3;
  bool json = false;
  bool breakdown = false;
};

void run(const BenchStepOptions& options) {
  if (options.repeats < 1 || options.repeats > 10000) {
    throw InputError(fmt::format("--repeats: must be between 1 and 10000 (got {})", options.repeats));
  }
  if (options.warmup < 0 || options.warmup > 10000) {
    throw InputError(fmt::format("--warmup: must be between 0 and 10000 (got {})", options.warmup));
  }
  std::vector<std::string> overrides = options.overrides;
  if (options.threads >= 0) overrides.push_back(fmt::format("train.threads={}", options.threads));
  train::RunConfig config = train::load_config(options.config, overrides);
  if (config.train.threads > 0) set_num_threads(static_cast<int>(config.train.threads));

  bench::BenchStepResult r = bench::bench_step(config, options.repeats, options.warmup, options.breakdown);
  const train::ModelConfig& m = config.model;
  if (options.json) {
    nlohmann::json out = {{"benchmark", "step"},
                          {"config", options.config},
                          {"task", data::to_string(config.task.name)},
                          {"d_model", m.d_model},
                          {"heads", m.num_heads},
                          {"layers", m.num_layers},
                          {"ffn", m.dim_feedforward},
                          {"norm", m.norm.name()},
                          {"placement", nn::to_string(m.placement)},
                          {"optimizer", optim::to_string(config.optim.name)},
                          {"batch_size", r.batch_size},
                          {"lengths", {config.task.min_len, config.task.max_len}},
                          {"num_parameters", r.num_parameters},
                          {"threads", r.threads},
                          {"openmp_wait", r.openmp_wait},
                          {"repeats", r.repeats},
                          {"warmup", r.warmup},
                          {"statistic", "median"},
                          {"step_ms", r.step_ms},
                          {"min_step_ms", r.min_step_ms},
                          {"max_step_ms", r.max_step_ms},
                          {"mean_tokens_per_batch", r.mean_tokens},
                          {"tokens_per_s", r.tokens_per_s},
                          {"peak_rss_mib", r.peak_rss_mib},
                          {"kernels", r.kernels},
                          {"flops_per_step", r.flops_per_step},
                          {"gflops", r.gflops},
                          {"gemm_1t_gflops", r.gemm_1t_gflops},
                          {"mfu", r.mfu},
                          {"fma_peak_gflops_per_thread",
                           r.fma_peak_gflops > 0.0 ? nlohmann::json(r.fma_peak_gflops) : nlohmann::json(nullptr)},
                          {"products_at_peak_ms",
                           r.fma_peak_gflops > 0.0 ? nlohmann::json(r.products_at_peak_ms) : nlohmann::json(nullptr)},
                          {"products_at_peak_definition",
                           "flops_per_step / (fma_peak_gflops_per_thread * threads): the step's products alone at the "
                           "path's multiply-add peak (12 independent FMA chains), a bound no step can beat; null on "
                           "the generic and reference paths"},
                          {"flops_definition",
                           "6*rows*in*out per Linear + 12*d_model*L^2 per layer and sequence (docs/PERFORMANCE.md)"},
                          {"tokens_per_s_definition", "real (unpadded) tokens of the timed steps / their total time"}};
    out["pool"] = {{"by_caller", r.pool.by_caller},
                   {"by_workers", r.pool.by_workers},
                   {"alone_regions", r.pool.alone_regions},
                   {"rests", r.pool.rests}};
    out["cpu"] = {{"wall_ms", r.wall_ms},
                  {"process_ms", r.process_cpu_ms},
                  {"involuntary_switches", r.involuntary_switches},
                  {"steal_ms", r.steal_ms},
                  {"others_ms", r.others_cpu_ms}};
    out["pool_definition"] =
        "over the timed steps: parts run by the caller and by the pool's workers, regions the caller ran alone "
        "while the pool rested, rests started (docs/PERFORMANCE.md, Threads); cpu: their wall time, this process's "
        "CPU time and involuntary switches, the machine's steal and other processes' CPU time (/proc/stat, 10 ms "
        "ticks)";
    if (options.breakdown) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& part : r.breakdown)
        rows.push_back({{"phase", part.phase}, {"name", part.name}, {"ms", part.ms}});
      out["breakdown"] = rows;
    }
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print("training step: {} task, d_model {}, {} heads, {} layers, ffn {}, {} {}, {}; batch {} of lengths {}-{}\n",
             data::to_string(config.task.name), m.d_model, m.num_heads, m.num_layers, m.dim_feedforward,
             nn::to_string(m.placement), m.norm.name(), optim::to_string(config.optim.name), r.batch_size,
             config.task.min_len, config.task.max_len);
  fmt::print("  {} parameters, {} thread{}{}, kernels: {}, median of {} steps after {} warmup\n", r.num_parameters,
             r.threads, r.threads == 1 ? "" : "s", r.threads == 1 ? "" : " (normlab's pool)", r.kernels, r.repeats,
             r.warmup);
  fmt::print("  step        {:9.3f} ms  (min {:.3f}, max {:.3f})\n", r.step_ms, r.min_step_ms, r.max_step_ms);
  fmt::print("  throughput  {:9.0f} tokens/s  ({:.0f} real tokens per batch)\n", r.tokens_per_s, r.mean_tokens);
  fmt::print("  compute     {:9.1f} GFLOP/s  ({:.1f} MFLOP per step: matrix and attention products)\n", r.gflops,
             r.flops_per_step / 1e6);
  fmt::print("  MFU         {:9.1f} %  of this path's 1-thread GEMM rate ({:.1f} GFLOP/s, 512^3){}\n", 100.0 * r.mfu,
             r.gemm_1t_gflops, r.threads > 1 ? fmt::format("; {:.1f} % per thread", 100.0 * r.mfu / r.threads) : "");
  if (r.fma_peak_gflops > 0.0)
    fmt::print(
        "  bound       {:9.3f} ms  the products alone at the path's multiply-add peak ({:.1f} GFLOP/s a thread)\n",
        r.products_at_peak_ms, r.fma_peak_gflops);
  fmt::print("  peak RSS    {:9.1f} MiB  (the whole process, VmHWM)\n", r.peak_rss_mib);
  if (!options.breakdown) return;
  double sum_ms = 0.0;
  for (const auto& part : r.breakdown) sum_ms += part.ms;
  fmt::print("where the step goes (median ms per step of each part; they sum to {:.3f} ms):\n", sum_ms);
  for (const auto& part : r.breakdown)
    fmt::print("  {:8.3f} ms {:5.1f} %  {:<9} {}\n", part.ms, 100.0 * part.ms / r.step_ms, part.phase, part.name);
}

}  // namespace

void add_bench_step(CLI::App& bench) {
  auto options = std::make_shared<BenchStepOptions>();
  CLI::App* cmd = bench.add_subcommand("step", "Time one training step (forward, backward, optimizer update)");
  cmd->add_option("--config", options->config, "Config file (e.g. configs/bench-step.json)")->required();
  cmd->add_option("--set", options->overrides, "Override a config key (repeatable)");
  cmd->add_option("--threads", options->threads, "Threads (overrides train.threads; 0: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--repeats", options->repeats, "Timed steps; the median is reported")->capture_default_str();
  cmd->add_option("--warmup", options->warmup, "Untimed steps before them (their batches are the first ones drawn)")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->add_flag("--breakdown", options->breakdown,
                "Also time each op of the step (forward, backward) and the optimizer");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
