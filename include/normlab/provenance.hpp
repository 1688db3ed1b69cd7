#pragma once
// What produced a result: recorded in summary.json and the comparison report, because a rerun
// reproduces the numbers only with the same kernels and thread count (docs/compare.md).
#include <string>

namespace normlab {

// The CPU's model name from /proc/cpuinfo ("AMD EPYC"), or "unknown CPU".
std::string cpu_model();

// The kernels in use: "reference" under NORMLAB_KERNELS=reference, else the vector path
// ("generic", "avx2", "avx512"; NORMLAB_ISA or the best this CPU runs).
std::string kernels_in_use();

}  // namespace normlab
