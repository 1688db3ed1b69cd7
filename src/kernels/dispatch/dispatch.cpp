// Choosing the kernel path: cpuid through GCC's __builtin_cpu_supports (which also checks that the
// OS saves the YMM/ZMM registers), NORMLAB_ISA to force one (dispatch.hpp).
#include "normlab/kernels/dispatch.hpp"

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "normlab/error.hpp"

namespace normlab::kernels {

namespace {
constexpr int kUnset = -1;
std::atomic<int> g_active{kUnset};
}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::reference: return "reference";
    case Isa::generic: break;
  }
  return "generic";
}

// The avx2 and avx512 builds are compiled with -march=x86-64-v3 / -v4 (CMakeLists.txt), so the CPU
// must have every feature of that level, not only AVX2 or AVX-512F.
bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::avx512: return __builtin_cpu_supports("x86-64-v4");
    case Isa::avx2: return __builtin_cpu_supports("x86-64-v3");
    case Isa::reference:
    case Isa::generic: break;
  }
  return true;
}

bool cpu_has_fma() { return __builtin_cpu_supports("fma"); }

Isa best_isa() {
  if (cpu_supports(Isa::avx512)) return Isa::avx512;
  if (cpu_supports(Isa::avx2)) return Isa::avx2;
  return Isa::generic;
}

Isa parse_isa(std::string_view name, std::string_view where) {
  Isa isa;
  if (name == "generic") {
    isa = Isa::generic;
  } else if (name == "avx2") {
    isa = Isa::avx2;
  } else if (name == "avx512") {
    isa = Isa::avx512;
  } else if (name == "reference") {
    isa = Isa::reference;
  } else {
    throw InputError(std::string(where) + ": unknown kernel path '" + std::string(name) +
                     "' (expected reference, generic, avx2 or avx512)");
  }
  if (!cpu_supports(isa)) {
    throw InputError(std::string(where) + ": this CPU cannot run the " + isa_name(isa) +
                     " kernels (best here: " + isa_name(best_isa()) + ")");
  }
  return isa;
}

// NORMLAB_KERNELS=reference is another spelling of NORMLAB_ISA=reference; =fast (or unset, or
// empty) leaves the choice to NORMLAB_ISA. The two may not contradict each other.
Isa isa_from_environment() {
  // Set but empty means unset, as for any environment variable.
  const char* isa_env = std::getenv("NORMLAB_ISA");
  const char* kernels_env = std::getenv("NORMLAB_KERNELS");
  const std::string_view kernels = kernels_env != nullptr ? kernels_env : "";
  if (!kernels.empty() && kernels != "fast" && kernels != "reference")
    throw InputError("environment variable NORMLAB_KERNELS: unknown value '" + std::string(kernels) +
                     "' (expected 'reference' or 'fast'; NORMLAB_ISA=reference says the same)");
  const bool isa_set = isa_env != nullptr && *isa_env != '\0';
  const Isa isa = isa_set ? parse_isa(isa_env, "NORMLAB_ISA") : best_isa();
  if (kernels == "reference" && isa_set && isa != Isa::reference)
    throw InputError("environment: NORMLAB_KERNELS=reference and NORMLAB_ISA=" + std::string(isa_env) +
                     " ask for two different kernel paths (NORMLAB_ISA=reference alone is enough)");
  if (kernels == "fast" && isa == Isa::reference)
    throw InputError("environment: NORMLAB_KERNELS=fast and NORMLAB_ISA=reference ask for two different kernel paths");
  return kernels == "reference" ? Isa::reference : isa;
}

Isa active_isa() {
  int active = g_active.load(std::memory_order_relaxed);
  if (active != kUnset) return static_cast<Isa>(active);
  const Isa chosen = isa_from_environment();
  g_active.store(static_cast<int>(chosen), std::memory_order_relaxed);
  return chosen;
}

const char* active_isa_name() { return isa_name(active_isa()); }

void set_active_isa(Isa isa) {
  if (!cpu_supports(isa)) {
    throw InputError(std::string("this CPU cannot run the ") + isa_name(isa) +
                     " kernels (best here: " + isa_name(best_isa()) + ")");
  }
  g_active.store(static_cast<int>(isa), std::memory_order_relaxed);
}

std::string isa_note() {
  if (active_isa() != Isa::generic || cpu_has_fma()) return "";
  return "this CPU has no hardware fused multiply-add: the generic kernels compute it exactly in "
         "double precision (same results, several times slower than the AVX2 path)";
}

}  // namespace normlab::kernels
