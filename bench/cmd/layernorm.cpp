// normlab bench layernorm --shape B,T,C [--threads N] [--repeats R] [--json]
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "parse_dims.hpp"
#include "normlab/bench/layernorm.hpp"
#include "normlab/error.hpp"
#include "normlab/parallel.hpp"

namespace normlab::cli {

namespace {

// Largest B*T*C accepted: five float arrays of this size are 1.3 GB.
constexpr int64_t kMaxBenchElements = int64_t{1} << 26;

struct BenchLayerNormOptions {
  std::string shape;
  int threads = 0;
  bool threads_given = false;  // otherwise keep the current thread count (OMP_NUM_THREADS or all cores)
  int repeats = 50;
  bool json = false;
};

std::vector<int64_t> parse_layernorm_shape(const std::string& text) {
  const char* expected = "three positive integers B,T,C like 64,128,768";
  auto bad = [&](const std::string& why) {
    return InputError(fmt::format("--shape: {} (got \"{}\", expected {})", why, text, expected));
  };
  std::vector<int64_t> dims = parse_dims(text, "--shape", 3, expected, kMaxBenchElements);
  if (dims[0] * dims[1] > kMaxBenchElements || dims[0] * dims[1] * dims[2] > kMaxBenchElements) {
    throw bad(fmt::format("B*T*C must be at most {}", kMaxBenchElements));
  }
  return dims;
}

void run(const BenchLayerNormOptions& options) {
  std::vector<int64_t> shape = parse_layernorm_shape(options.shape);
  if (options.threads_given && (options.threads < 1 || options.threads > 1024)) {
    throw InputError(fmt::format("--threads: must be between 1 and 1024 (got {})", options.threads));
  }
  if (options.repeats < 1 || options.repeats > 100000) {
    throw InputError(fmt::format("--repeats: must be between 1 and 100000 (got {})", options.repeats));
  }
  if (options.threads_given) set_num_threads(options.threads);

  bench::LayerNormBenchResult r = bench::bench_layernorm(shape[0], shape[1], shape[2], options.repeats);
  if (options.json) {
    nlohmann::json out = {
        {"benchmark", "layernorm"},
        {"shape", {r.B, r.T, r.C}},
        {"rows", r.B * r.T},
        {"cols", r.C},
        {"eps", 1e-12},
        {"threads", r.threads},
        {"repeats", r.repeats},
        {"statistic", "median"},
        {"forward_ms", r.forward_ms},
        {"backward_ms", r.backward_ms},
        {"forward_backward_ms", r.forward_backward_ms},
        {"forward_cpu_ms", r.forward_cpu_ms},
        {"backward_cpu_ms", r.backward_cpu_ms},
        {"forward_backward_cpu_ms", r.forward_backward_cpu_ms},
        {"forward_gbps", r.forward_gbps},
        {"forward_backward_gbps", r.forward_backward_gbps},
        {"copy_ms", r.copy_ms},
        {"copy_gbps", r.copy_gbps},
        {"copy_kind", r.copy_kind},
        {"copy_cpu_ms", r.copy_cpu_ms},
        {"memcpy_ms", r.memcpy_ms},
        {"memcpy_gbps", r.memcpy_gbps},
        {"memcpy_cpu_ms", r.memcpy_cpu_ms},
        {"stream_copy_ms", r.stream_copy_ms},
        {"stream_copy_gbps", r.stream_copy_gbps},
        {"stream_copy_cpu_ms", r.stream_copy_cpu_ms},
        {"forward_fraction_of_copy", r.forward_gbps / r.copy_gbps},
        {"forward_backward_fraction_of_copy", r.forward_backward_gbps / r.copy_gbps},
        {"forward_bytes", r.forward_bytes},
        {"backward_bytes", r.backward_bytes},
        {"bytes_definition",
         {{"forward", "4 * (read x + write y: 2*rows*cols, read gamma+beta: 2*cols, write mean+rstd: 2*rows)"},
          {"backward",
           "4 * (read dout + x: 2*rows*cols, read+write dx (accumulated): 2*rows*cols, read mean+rstd: 2*rows, "
           "read gamma + write dgamma+dbeta: 3*cols)"},
          {"gbps", "bytes / median seconds / 1e9; forward_backward_gbps uses forward_bytes + backward_bytes"},
          {"copy",
           "x into y, rows split over the threads, by glibc memcpy and by a copy with non-temporal stores, "
           "timed alternately; copy_ms is the faster of the two medians; *_gbps count read x + write y"},
          {"cpu_ms",
           "median CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID): the kernel's own time at "
           "1 thread on a busy machine; misses worker threads when threads > 1"}}},
    };
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print("layernorm x [{}, {}, {}] (rows {}, cols {}), eps 1e-12, {} thread{}, median of {}\n", r.B, r.T, r.C,
             r.B * r.T, r.C, r.threads, r.threads == 1 ? "" : "s", r.repeats);
  fmt::print("  {:19}{:>12}  {:>7}   {:>12}\n", "", "wall", "GB/s", "thread CPU");
  fmt::print("  forward            {:9.3f} ms  {:7.1f}   {:9.3f} ms\n", r.forward_ms, r.forward_gbps, r.forward_cpu_ms);
  fmt::print("  backward           {:9.3f} ms  {:7.1f}   {:9.3f} ms\n", r.backward_ms,
             r.backward_bytes / (r.backward_ms * 1e-3) / 1e9, r.backward_cpu_ms);
  fmt::print("  forward+backward   {:9.3f} ms  {:7.1f}   {:9.3f} ms\n", r.forward_backward_ms, r.forward_backward_gbps,
             r.forward_backward_cpu_ms);
  fmt::print("  memcpy x -> y      {:9.3f} ms  {:7.1f}   {:9.3f} ms\n", r.memcpy_ms, r.memcpy_gbps, r.memcpy_cpu_ms);
  fmt::print("  stream copy x -> y {:9.3f} ms  {:7.1f}   {:9.3f} ms  (non-temporal stores)\n", r.stream_copy_ms,
             r.stream_copy_gbps, r.stream_copy_cpu_ms);
  fmt::print("  reference: the faster copy, {} ({:.1f} GB/s): forward at {:.0f}%, forward+backward at {:.0f}% of it\n",
             r.copy_kind, r.copy_gbps, 100.0 * r.forward_gbps / r.copy_gbps,
             100.0 * r.forward_backward_gbps / r.copy_gbps);
  fmt::print("  (GB/s counts each array once: forward x, y; backward dout, x, dx read+write; see --json)\n");
}

}  // namespace

void add_bench_layernorm(CLI::App& bench) {
  auto options = std::make_shared<BenchLayerNormOptions>();
  CLI::App* cmd = bench.add_subcommand("layernorm", "Time the LayerNorm forward and backward kernels");
  cmd->add_option("--shape", options->shape, "Input shape B,T,C (normalized over C), e.g. 64,128,768")->required();
  CLI::Option* threads =
      cmd->add_option("--threads", options->threads, "Threads (default: OMP_NUM_THREADS or all cores)")
          ->check(CLI::Range(1, 1024));
  cmd->add_option("--repeats", options->repeats, "Timed calls; the median is reported")->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->callback([options, threads] {
    options->threads_given = threads->count() > 0;
    run(*options);
  });
}

}  // namespace normlab::cli
