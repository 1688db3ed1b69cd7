// normlab command line: parse, call the library, print. Exit codes: 0 ok, 2 bad input,
// 3 training diverged.
#include <fmt/core.h>
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/kernels/reference/mode.hpp"

int main(int argc, char** argv) {
  // Activations are freed and reallocated every training step. With glibc's defaults each buffer
  // over 128 KiB is a fresh mmap, so every step paid page faults plus zero-filling for all of
  // them (5x the step time on bench-step.json). Keep freed memory in the heap for reuse instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
  CLI::App app{"normlab: train small Transformer encoders and study Layer Normalization"};
  std::string version = std::string("normlab ") + NORMLAB_VERSION;
  try {
    if (normlab::kernels::reference::reference_kernels_enabled()) version += "\nkernels: reference";
  } catch (const normlab::InputError& e) {
    fmt::print(stderr, "normlab: error: {}\n", e.what());
    return 2;
  }
  app.set_version_flag("--version", version);
  app.require_subcommand(1);

  CLI::App* bench = app.add_subcommand("bench", "Micro-benchmarks of normlab's kernels");
  bench->require_subcommand(1);
  normlab::cli::add_bench_layernorm(*bench);
  normlab::cli::add_bench_gemm(*bench);
  normlab::cli::add_bench_step(*bench);
  normlab::cli::add_train(app);
  normlab::cli::add_eval(app);
  normlab::cli::add_predict(app);
  normlab::cli::add_compare(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const normlab::cli::ExitCode& e) {
    return e.code;
  } catch (const normlab::InputError& e) {
    fmt::print(stderr, "normlab: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "normlab: internal error: {}\n", e.what());
    return 1;
  }
  return 0;
}
