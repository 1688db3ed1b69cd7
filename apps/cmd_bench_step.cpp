#include "commands.hpp"
namespace normlab::cli {
void add_bench_step(CLI::App& bench) { bench.add_subcommand("step", "(not yet implemented)"); }
}  // namespace normlab::cli
