#include "commands.hpp"
namespace normlab::cli {
void add_bench_gemm(CLI::App& bench) { bench.add_subcommand("gemm", "(placeholder)"); }
}  // namespace normlab::cli
