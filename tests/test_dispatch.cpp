// Run-time kernel dispatch: choosing a path, NORMLAB_ISA, and what `normlab --version` says.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "isa_support.hpp"
#include "normlab/error.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "support.hpp"

using normlab::InputError;
using normlab::test::read_text;
using normlab::test::TempDir;
namespace kernels = normlab::kernels;

namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

// `env normlab args` through the shell, stdout and stderr captured.
Run run_with_env(const TempDir& dir, const std::string& env, const std::string& args) {
  const std::string out = dir.sub("out.txt"), err = dir.sub("err.txt");
  const std::string command = env + " \"" + NORMLAB_BINARY + "\" " + args + " >\"" + out + "\" 2>\"" + err + "\"";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
}

}  // namespace

TEST_CASE("dispatch: names and the best path and parsing NORMLAB_ISA values") {
  CHECK(std::string(kernels::isa_name(kernels::Isa::generic)) == "generic");
  CHECK(std::string(kernels::isa_name(kernels::Isa::avx2)) == "avx2");
  CHECK(std::string(kernels::isa_name(kernels::Isa::avx512)) == "avx512");
  CHECK(std::string(kernels::isa_name(kernels::Isa::reference)) == "reference");
  // The reference is an entry of the dispatch that any CPU runs, but never the one chosen for speed.
  CHECK(kernels::parse_isa("reference", "NORMLAB_ISA") == kernels::Isa::reference);
  CHECK(kernels::cpu_supports(kernels::Isa::reference));
  CHECK(kernels::best_isa() != kernels::Isa::reference);
  CHECK(kernels::cpu_supports(kernels::Isa::generic));
  CHECK(kernels::cpu_supports(kernels::best_isa()));
  // avx512 implies avx2 (x86-64-v4 includes v3), and avx2 implies FMA.
  if (kernels::cpu_supports(kernels::Isa::avx512)) CHECK(kernels::cpu_supports(kernels::Isa::avx2));
  if (kernels::cpu_supports(kernels::Isa::avx2)) CHECK(kernels::cpu_has_fma());

  for (kernels::Isa isa : normlab::test::available_isas())
    CHECK(kernels::parse_isa(kernels::isa_name(isa), "NORMLAB_ISA") == isa);
  for (const char* bad : {"", "AVX2", "sse", "avx-512", "native"}) {
    INFO("value '" << bad << "'");
    CHECK_THROWS_WITH_AS(kernels::parse_isa(bad, "NORMLAB_ISA"), doctest::Contains("NORMLAB_ISA: unknown kernel path"),
                         InputError);
  }
  for (kernels::Isa isa : {kernels::Isa::avx2, kernels::Isa::avx512}) {
    if (kernels::cpu_supports(isa)) continue;  // only a CPU without the path can show the refusal
    CHECK_THROWS_WITH_AS(kernels::parse_isa(kernels::isa_name(isa), "NORMLAB_ISA"),
                         doctest::Contains("this CPU cannot run"), InputError);
    CHECK_THROWS_AS(kernels::set_active_isa(isa), InputError);
  }
}

TEST_CASE("dispatch: set_active_isa switches the path and active_isa_name follows") {
  for (kernels::Isa isa : normlab::test::available_isas()) {
    normlab::test::ScopedIsa scoped(isa);
    CHECK(kernels::active_isa() == isa);
    CHECK(std::string(kernels::active_isa_name()) == kernels::isa_name(isa));
  }
}

TEST_CASE("cli: --version names the kernel path and NORMLAB_ISA forces one and a bad value exits 2") {
  TempDir dir;
  Run plain = run_with_env(dir, "env -u NORMLAB_ISA", "--version");
  CHECK(plain.code == 0);
  CHECK(plain.out.find("kernels: " + std::string(kernels::isa_name(kernels::best_isa())) + "\n") != std::string::npos);

  for (kernels::Isa isa : normlab::test::available_isas()) {
    const std::string name = kernels::isa_name(isa);
    Run forced = run_with_env(dir, "NORMLAB_ISA=" + name, "--version");
    INFO(name << ": " << forced.err);
    CHECK(forced.code == 0);
    CHECK(forced.out.find("kernels: " + name + "\n") != std::string::npos);
    Run bench = run_with_env(dir, "NORMLAB_ISA=" + name, "bench gemm --shape 9,10,11 --repeats 2 --json");
    CHECK(bench.code == 0);
    CHECK(bench.out.find("\"kernels\":\"" + name + "\"") != std::string::npos);
  }

  // Set but empty means unset (the convention for environment variables): the best path.
  for (const char* variable : {"NORMLAB_ISA=", "env -u NORMLAB_ISA NORMLAB_KERNELS="}) {
    Run empty = run_with_env(dir, variable, "--version");
    INFO(variable << ": " << empty.err);
    CHECK(empty.code == 0);
    CHECK(empty.out.find("kernels: " + std::string(kernels::isa_name(kernels::best_isa())) + "\n") !=
          std::string::npos);
  }
  for (const char* bad : {"avx3", "GENERIC"}) {
    Run refused = run_with_env(dir, std::string("NORMLAB_ISA=") + bad, "--version");
    INFO("NORMLAB_ISA='" << bad << "': " << refused.err);
    CHECK(refused.code == 2);
    CHECK(refused.out.empty());
    CHECK(refused.err == std::string("normlab: error: NORMLAB_ISA: unknown kernel path '") + bad +
                             "' (expected reference, generic, avx2 or avx512)\n");
  }
  // Before any verb runs, too: a training run is not started.
  Run train = run_with_env(dir, "NORMLAB_ISA=bogus", "train --config /nonexistent.json");
  CHECK(train.code == 2);
  CHECK(train.err.find("NORMLAB_ISA") != std::string::npos);
}

TEST_CASE("cli: bench gemm --peak gives each vector path's multiply-add peak and the GEMM's share of it") {
  // The peak bounds every kernel of the path on this core, so the share is what a faster kernel
  // could still gain. The scalar paths have no fixed vector width: null, not a made-up figure.
  TempDir dir;
  for (kernels::Isa isa : normlab::test::available_isas()) {
    const std::string name = kernels::isa_name(isa);
    Run run = run_with_env(dir, "NORMLAB_ISA=" + name, "bench gemm --shape 9,10,11 --repeats 2 --threads 1 --json --peak");
    INFO(name << ": " << run.err);
    REQUIRE(run.code == 0);
    const nlohmann::json out = nlohmann::json::parse(run.out);
    if (isa == kernels::Isa::avx512 || isa == kernels::Isa::avx2) {
      const double peak = out["fma_peak_gflops_per_thread"].get<double>();
      CHECK(peak > 0.0);
      CHECK(out["share_of_peak"].get<double>() == out["gflops"].get<double>() / peak);
    } else {
      CHECK(out["fma_peak_gflops_per_thread"].is_null());
      CHECK(out["share_of_peak"].is_null());
    }
    CHECK(out["definition"].contains("share_of_peak"));
  }
  // Without --peak nothing is measured or printed.
  Run plain = run_with_env(dir, "", "bench gemm --shape 9,10,11 --repeats 2 --threads 1 --json");
  REQUIRE(plain.code == 0);
  CHECK_FALSE(nlohmann::json::parse(plain.out).contains("fma_peak_gflops_per_thread"));
  Run text = run_with_env(dir, "env -u NORMLAB_ISA", "bench gemm --shape 9,10,11 --repeats 2 --threads 1 --peak");
  REQUIRE(text.code == 0);
  CHECK(text.out.find("the path's multiply-add peak: ") != std::string::npos);
}
