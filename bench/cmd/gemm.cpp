// normlab bench gemm --shape M,K,N [--variant nn|nt|tn] [--threads N] [--repeats R] [--json]
// (the kernel path is NORMLAB_ISA or the best this CPU has; the output names it)
#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "parse_dims.hpp"
#include "normlab/bench/gemm.hpp"
#include "normlab/error.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/parallel.hpp"

namespace normlab::cli {

namespace {

// Largest element count of any one of A, B, C: three float arrays of this size are 768 MB.
constexpr int64_t kMaxMatrixElements = int64_t{1} << 26;
// Longest run `bench gemm` starts, by its lower-bound estimate.
constexpr double kMaxBenchSeconds = 600;

struct BenchGemmOptions {
  std::string shape;
  std::string variant = "nt";
  int threads = 0;  // 0: keep the current thread count (OMP_NUM_THREADS or all cores)
  int repeats = 100;
  bool json = false;
  bool peak = false;
};

std::vector<int64_t> parse_gemm_shape(const std::string& text) {
  const char* expected = "three positive integers M,K,N like 1040,64,192";
  auto bad = [&](const std::string& why) {
    return InputError(fmt::format("--shape: {} (got \"{}\", expected {})", why, text, expected));
  };
  std::vector<int64_t> dims = parse_dims(text, "--shape", 3, expected, kMaxMatrixElements);
  const int64_t M = dims[0], K = dims[1], N = dims[2];
  if (M * K > kMaxMatrixElements || K * N > kMaxMatrixElements || M * N > kMaxMatrixElements) {
    throw bad(fmt::format("M*K, K*N and M*N must each be at most {}", kMaxMatrixElements));
  }
  return dims;
}

void run(const BenchGemmOptions& options) {
  std::vector<int64_t> shape = parse_gemm_shape(options.shape);
  if (options.variant != "nn" && options.variant != "nt" && options.variant != "tn") {
    throw InputError(fmt::format("--variant: must be nn, nt or tn (got \"{}\")", options.variant));
  }
  if (options.threads < 0 || options.threads > 1024) {
    throw InputError(fmt::format("--threads: must be between 1 and 1024 (got {})", options.threads));
  }
  if (options.repeats < 1 || options.repeats > 100000) {
    throw InputError(fmt::format("--repeats: must be between 1 and 100000 (got {})", options.repeats));
  }
  if (options.threads > 0) set_num_threads(options.threads);
  // Refuse what would run for hours: 2*M*K*N flops per call, (repeats + warmup) calls, at a rate no
  // core of a current x86 machine beats (50 GFLOP/s per thread), so the estimate errs short.
  const double calls = double(options.repeats) + std::max(3.0, double(options.repeats / 10));
  const double seconds = 2.0 * double(shape[0]) * double(shape[1]) * double(shape[2]) * calls / (50e9 * num_threads());
  if (seconds > kMaxBenchSeconds) {
    throw InputError(
        fmt::format("--shape {} with --repeats {}: would take at least {:.0f} s (limit {:.0f} s); use "
                    "fewer --repeats (e.g. --repeats {}) or a smaller shape",
                    options.shape, options.repeats, seconds, kMaxBenchSeconds,
                    std::max(1, int(double(options.repeats) * kMaxBenchSeconds / seconds / 2))));
  }

  bench::GemmBenchResult r = bench::bench_gemm(options.variant, shape[0], shape[1], shape[2], options.repeats);
  // The path's multiply-add peak on this thread, right after the calls (the same phase of the machine).
  const double peak = options.peak ? bench::fma_peak_gflops() : 0.0;
  const double share = peak > 0.0 ? r.gflops / (peak * r.threads) : 0.0;
  if (options.json) {
    nlohmann::json out = {
        {"benchmark", "gemm"},
        {"variant", r.variant},
        {"shape", {r.M, r.K, r.N}},
        {"threads", r.threads},
        {"repeats", r.repeats},
        {"kernels", kernels::active_isa_name()},
        {"median_ms", r.median_ms},
        {"min_ms", r.min_ms},
        {"flops", r.flops},
        {"gflops", r.gflops},
        {"gflops_best", r.gflops_best},
        {"definition",
         {{"flops", "2*M*N*K"},
          {"gflops", "flops / median seconds / 1e9"},
          {"gflops_best", "flops / min seconds / 1e9"},
          {"variant", "nn: C = A B, A (M,K), B (K,N); nt: C = A B^T, B stored (N,K); tn: C = A^T B, A stored (K,M)"}}},
    };
    if (options.peak) {
      out["fma_peak_gflops_per_thread"] = peak > 0.0 ? nlohmann::json(peak) : nlohmann::json(nullptr);
      out["share_of_peak"] = peak > 0.0 ? nlohmann::json(share) : nlohmann::json(nullptr);
      out["definition"]["fma_peak_gflops_per_thread"] =
          "12 independent chains of the path's vector fused multiply-adds on the calling thread, 2 flops a "
          "lane, best of 20 runs; null on the generic and reference paths (no fixed vector width)";
      out["definition"]["share_of_peak"] = "gflops / (fma_peak_gflops_per_thread * threads)";
    }
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print("gemm {} M={} K={} N={}, {} thread{}, {} calls, kernels: {}\n", r.variant, r.M, r.K, r.N, r.threads,
             r.threads == 1 ? "" : "s", r.repeats, kernels::active_isa_name());
  fmt::print("  median {:9.4f} ms  {:7.1f} GFLOP/s\n", r.median_ms, r.gflops);
  fmt::print("  min    {:9.4f} ms  {:7.1f} GFLOP/s\n", r.min_ms, r.gflops_best);
  fmt::print("  (GFLOP/s = 2*M*N*K / seconds / 1e9)\n");
  if (options.peak && peak > 0.0) {
    fmt::print(
        "  the path's multiply-add peak: {:.1f} GFLOP/s a thread (12 independent FMA chains); the median call "
        "is {:.1f}% of it{}\n",
        peak, 100.0 * share, r.threads == 1 ? "" : fmt::format(" x {} threads", r.threads));
  } else if (options.peak) {
    fmt::print("  the path's multiply-add peak: not measured on the {} path (no fixed vector width)\n",
               kernels::active_isa_name());
  }
}

}  // namespace

void add_bench_gemm(CLI::App& bench) {
  auto options = std::make_shared<BenchGemmOptions>();
  CLI::App* cmd = bench.add_subcommand("gemm", "Time normlab's GEMM (matmul_nn / nt / tn)");
  cmd->add_option("--shape", options->shape, "C (M,N) = op(A) (M,K) @ op(B) (K,N), as M,K,N, e.g. 1040,64,192")
      ->required();
  cmd->add_option("--variant", options->variant, "nn: A B; nt: A B^T (Linear forward); tn: A^T B (weight grad)")
      ->capture_default_str();
  cmd->add_option("--threads", options->threads, "Threads (default: OMP_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--repeats", options->repeats, "Timed calls; the median is reported")->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->add_flag("--peak", options->peak,
                "Also measure the path's multiply-add peak on this thread (independent FMA chains) and the share "
                "of it the GEMM reaches");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
