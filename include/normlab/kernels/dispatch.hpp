#pragma once
// Which kernel path runs: one binary carries three builds of the fast kernels (src/kernels/*.cpp
// compiled three times, docs/building.md), and every kernel call goes to the active one.
//   generic  any x86-64 CPU (SSE2); the fused multiply-adds of GEMM and attention are computed
//            exactly in double precision (kernels/exact_fma.hpp), no FMA instruction needed
//   avx2     AVX2 + FMA (x86-64-v3: Haswell, Zen 1 and later)
//   avx512   AVX-512 F/BW/DQ/VL (x86-64-v4: Skylake-X, Zen 4 and later)
// All three compute the same bits (same reduction orders, fma in the same places, normlab::math
// instead of libm), so the path changes the speed of a run, never its numbers.
//
// The path is chosen on first use: NORMLAB_ISA=generic|avx2|avx512 if set, else the best the CPU
// (and the OS's saved register state) supports.
#include <string>
#include <string_view>

namespace normlab::kernels {

enum class Isa { generic = 0, avx2 = 1, avx512 = 2 };

const char* isa_name(Isa isa);  // "generic", "avx2", "avx512"
bool cpu_supports(Isa isa);
bool cpu_has_fma();
Isa best_isa();  // the widest path cpu_supports

// "generic", "avx2" or "avx512" (as from NORMLAB_ISA; `where` names the source in the message).
// Throws normlab::InputError for an unknown name or a path this CPU lacks.
Isa parse_isa(std::string_view name, std::string_view where);

// The path in use (chosen on the first call). Throws normlab::InputError if NORMLAB_ISA is bad.
Isa active_isa();
const char* active_isa_name();

// Forces a path (tests, benchmarks); throws normlab::InputError if the CPU lacks it. Not for use
// while kernels run on other threads.
void set_active_isa(Isa isa);

// "" normally; one sentence when the generic path runs because the CPU has no FMA (the same
// results, several times slower), for the CLI to print at start-up and in --version.
std::string isa_note();

}  // namespace normlab::kernels
