#pragma once
// One function per subcommand; each adds itself to the CLI and sets its own callback.
// The callbacks throw normlab::InputError for bad input; main() turns that into exit code 2.
#include <CLI/CLI.hpp>

namespace normlab::cli {
void add_bench_layernorm(CLI::App& bench);  // apps/cmd_bench_layernorm.cpp
void add_bench_gemm(CLI::App& bench);       // apps/cmd_bench_gemm.cpp
}  // namespace normlab::cli
