#pragma once
// What produced a result: recorded in summary.json and the comparison report, because a rerun
// reproduces the numbers only with the same kernels and thread count (docs/compare.md).
#include <string>

namespace normlab {

// The CPU's model name from /proc/cpuinfo ("AMD EPYC"), or "unknown CPU".
std::string cpu_model();

// The kernel path in use: "reference", "generic", "avx2" or "avx512" (NORMLAB_ISA, or the best
// fast path this CPU runs; kernels/dispatch.hpp).
std::string kernels_in_use();

}  // namespace normlab
