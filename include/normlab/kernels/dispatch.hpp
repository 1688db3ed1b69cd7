#pragma once
// Which kernels run. Every kernel call (normlab::kernels::layer_norm_forward, ...) goes through one
// switch on the active path (src/kernels/dispatch/entry_points.cpp), to one of four builds:
//   reference  the plain loops of src/kernels/reference/: one row, one step of the math at a time,
//              on one thread; for reading and stepping through in a debugger, not for speed
//   generic    the fast kernels for any x86-64 CPU (SSE2); the fused multiply-adds of GEMM and
//              attention are computed exactly in double precision (kernels/exact_fma.hpp)
//   avx2       the fast kernels for AVX2 + FMA (x86-64-v3: Haswell, Zen 1 and later)
//   avx512     the fast kernels for AVX-512 F/BW/DQ/VL (x86-64-v4: Skylake-X, Zen 4 and later)
// The three fast paths are src/kernels/*.cpp compiled three times (docs/building.md) and compute
// the same bits (same reduction orders, fma in the same places, normlab::math instead of libm), so
// among them the path changes the speed of a run, never its numbers. The reference agrees with
// them to float rounding, not to the bit (tests/test_reference_kernels.cpp).
//
// The path is chosen on first use: NORMLAB_ISA=reference|generic|avx2|avx512 if set, else the
// fastest the CPU (and the OS's saved register state) supports. NORMLAB_KERNELS=reference is read
// as NORMLAB_ISA=reference.
#include <string>
#include <string_view>

namespace normlab::kernels {

enum class Isa { generic = 0, avx2 = 1, avx512 = 2, reference = 3 };

const char* isa_name(Isa isa);  // "reference", "generic", "avx2", "avx512"
bool cpu_supports(Isa isa);
bool cpu_has_fma();
Isa best_isa();  // the widest fast path cpu_supports (never the reference)

// "reference", "generic", "avx2" or "avx512" (as from NORMLAB_ISA; `where` names the source in
// the message).
// Throws normlab::InputError for an unknown name or a path this CPU lacks.
Isa parse_isa(std::string_view name, std::string_view where);

// The path the environment asks for (NORMLAB_ISA, NORMLAB_KERNELS), read now; the best fast path
// when neither is set. Throws normlab::InputError naming the variable for a bad value.
Isa isa_from_environment();

// The path in use (isa_from_environment() on the first call, then fixed). Throws normlab::InputError if NORMLAB_ISA or
// NORMLAB_KERNELS is bad.
Isa active_isa();
const char* active_isa_name();

// Forces a path (tests, benchmarks); throws normlab::InputError if the CPU lacks it. Not for use
// while kernels run on other threads.
void set_active_isa(Isa isa);

// "" normally; one sentence when the generic path runs because the CPU has no FMA (the same
// results, several times slower), for the CLI to print at start-up and in --version.
std::string isa_note();

}  // namespace normlab::kernels
