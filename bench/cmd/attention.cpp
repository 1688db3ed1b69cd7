// normlab bench attention --shape B,L,C,NH [--threads N] [--repeats R] [--json]
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/bench/attention.hpp"
#include "normlab/error.hpp"
#include "normlab/provenance.hpp"
#include "normlab/parallel.hpp"
#include "parse_dims.hpp"

namespace normlab::cli {

namespace {

// Largest B*L*3C accepted (the qkv array and its gradient: 2 GB at the limit) and largest L
// (the forward keeps (48, L) floats per thread; the reference kernels the whole (L, L)).
constexpr int64_t kMaxElements = int64_t{1} << 28;
constexpr int64_t kMaxLength = int64_t{1} << 16;

struct BenchAttentionOptions {
  std::string shape;
  int threads = 0;  // 0: keep the current thread count (OMP_NUM_THREADS or all cores)
  int repeats = 20;
  bool json = false;
};

void run(const BenchAttentionOptions& options) {
  const char* expected = "four positive integers B,L,C,NH like 8,256,64,4";
  const std::vector<int64_t> d = parse_dims(options.shape, "--shape", 4, expected, kMaxElements);
  const int64_t B = d[0], L = d[1], C = d[2], NH = d[3];
  auto bad = [&](const std::string& why) {
    return InputError(fmt::format("--shape: {} (got \"{}\", expected {})", why, options.shape, expected));
  };
  if (C % NH != 0) throw bad(fmt::format("{} heads do not divide d_model {}", NH, C));
  if (L > kMaxLength) throw bad(fmt::format("L must be at most {}", kMaxLength));
  if (B * L > kMaxElements / (3 * C)) throw bad(fmt::format("B*L*3C must be at most {}", kMaxElements));
  if (options.threads < 0 || options.threads > 1024) {
    throw InputError(fmt::format("--threads: must be between 1 and 1024 (got {})", options.threads));
  }
  if (options.repeats < 1 || options.repeats > 100000) {
    throw InputError(fmt::format("--repeats: must be between 1 and 100000 (got {})", options.repeats));
  }
  if (options.threads > 0) set_num_threads(options.threads);

  const bench::AttentionBenchResult r = bench::bench_attention(B, L, C, NH, options.repeats);
  const std::string path = normlab::kernels_in_use();
  if (options.json) {
    const nlohmann::json out = {{"benchmark", "attention"},
                                {"shape", {r.B, r.L, r.C, r.NH}},
                                {"head_dim", r.C / r.NH},
                                {"kernels", path},
                                {"threads", r.threads},
                                {"openmp_wait", openmp_wait_setting()},
                                {"repeats", r.repeats},
                                {"statistic", "median"},
                                {"forward_ms", r.forward_ms},
                                {"forward_backward_ms", r.forward_backward_ms},
                                {"forward_gflops", r.forward_gflops},
                                {"forward_backward_gflops", r.forward_backward_gflops},
                                {"cache_floats", r.cache_floats},
                                {"gflops_definition",
                                 "2 flops per multiply-add of q k^T and p v (forward) and of the backward's four "
                                 "products; the recomputed q k^T of the backward is not counted"}};
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print(
      "attention: {} sequences of {} tokens, d_model {}, {} heads (head dim {}), kernels {}, {} thread{}{}, median of "
      "{}\n",
      r.B, r.L, r.C, r.NH, r.C / r.NH, path, r.threads, r.threads == 1 ? "" : "s",
      r.threads == 1 ? "" : " (" + openmp_wait_setting() + ")", r.repeats);
  fmt::print("  forward            {:9.3f} ms  {:7.1f} GFLOP/s\n", r.forward_ms, r.forward_gflops);
  fmt::print("  forward+backward   {:9.3f} ms  {:7.1f} GFLOP/s\n", r.forward_backward_ms, r.forward_backward_gflops);
  fmt::print("  cache kept for the backward: {} floats ({:.1f} MiB)\n", r.cache_floats,
             double(r.cache_floats) * 4.0 / double(1 << 20));
}

}  // namespace

void add_bench_attention(CLI::App& bench) {
  auto options = std::make_shared<BenchAttentionOptions>();
  CLI::App* cmd = bench.add_subcommand("attention", "Time the packed multi-head attention kernels (forward, backward)");
  cmd->add_option("--shape", options->shape, "B,L,C,NH: B sequences of L tokens, d_model C, NH heads, e.g. 8,256,64,4")
      ->required();
  cmd->add_option("--threads", options->threads, "Threads (default: OMP_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--repeats", options->repeats, "Timed calls; the median is reported")->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
