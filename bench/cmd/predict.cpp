// normlab bench predict --run DIR [--data FILE] [--threads N] [--batch-size N] [--repeats R] [--json]
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/bench/predict.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/parallel.hpp"

namespace normlab::cli {

namespace {

struct BenchPredictOptions {
  std::string run_dir;
  std::string data;  // "": the run's validation inputs
  int threads = 0;   // 0: OMP_NUM_THREADS or all cores
  int64_t batch_size = 256;
  int repeats = 20;
  bool json = false;
};

std::vector<std::string> file_lines(const std::string& path, int64_t max_bytes) {
  const std::string contents = io::read_file(path, size_t(max_bytes));
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == std::string::npos) end = contents.size();
    lines.push_back(contents.substr(start, end - start));
    start = end + 1;
  }
  if (lines.empty()) throw InputError(fmt::format("{}: no input lines", path));
  return lines;
}

void run(const BenchPredictOptions& options) {
  if (options.repeats < 1 || options.repeats > 10000)
    throw InputError(fmt::format("--repeats: must be between 1 and 10000 (got {})", options.repeats));
  if (options.batch_size < 1 || options.batch_size > 65536)
    throw InputError(fmt::format("--batch-size: must be between 1 and 65536 (got {})", options.batch_size));
  if (options.threads > 0) set_num_threads(options.threads);
  refuse_compare_dir(options.run_dir, "bench predict");
  train::LoadedRun loaded = train::load_run(options.run_dir);
  const std::vector<std::string> inputs = options.data.empty()
                                              ? bench::validation_inputs(loaded)
                                              : file_lines(options.data, loaded.task.file.max_file_bytes);
  const bench::BenchPredictResult r = bench::bench_predict(loaded, inputs, options.batch_size, options.repeats);
  if (options.json) {
    nlohmann::json out = {{"benchmark", "predict"},
                          {"run", options.run_dir},
                          {"data", options.data.empty() ? "task.valid_file" : options.data},
                          {"inputs", r.inputs},
                          {"tokens", r.tokens},
                          {"batch_size", r.batch_size},
                          {"threads", r.threads},
                          {"repeats", r.repeats},
                          {"statistic", "median"},
                          {"pass_s", r.median_s},
                          {"min_pass_s", r.min_s},
                          {"max_pass_s", r.max_s},
                          {"sequences_per_s", r.sequences_per_s},
                          {"tokens_per_s", r.tokens_per_s},
                          {"kernels", r.kernels}};
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print("predict: {} inputs ({} tokens) of {}, batches of {}, {} thread{}, kernels: {}, median of {} passes\n",
             r.inputs, r.tokens, options.data.empty() ? "the run's task.valid_file" : options.data, r.batch_size,
             r.threads, r.threads == 1 ? "" : "s", r.kernels, r.repeats);
  fmt::print("  pass        {:9.4f} s  (min {:.4f}, max {:.4f})\n", r.median_s, r.min_s, r.max_s);
  fmt::print("  throughput  {:9.0f} sequences/s  ({:.0f} tokens/s)\n", r.sequences_per_s, r.tokens_per_s);
}

}  // namespace

void add_bench_predict(CLI::App& bench) {
  auto options = std::make_shared<BenchPredictOptions>();
  CLI::App* cmd = bench.add_subcommand("predict", "Time `normlab predict --data`: input lines predicted per second");
  cmd->add_option("--run", options->run_dir, "Run directory (holds checkpoint.safetensors)")->required();
  cmd->add_option("--data", options->data, "Inputs, one a line (default: the run's validation file's texts)");
  cmd->add_option("--threads", options->threads, "Threads (0: OMP_NUM_THREADS or all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--batch-size", options->batch_size, "Sequences per forward pass")->capture_default_str();
  cmd->add_option("--repeats", options->repeats, "Timed passes; the median is reported")->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
