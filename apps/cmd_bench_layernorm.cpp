#include "commands.hpp"
namespace normlab::cli {
void add_bench_layernorm(CLI::App& bench) { bench.add_subcommand("layernorm", "(placeholder)"); }
}  // namespace normlab::cli
