#pragma once
// tests/isa/exp_sweep.cpp's one function, declared for each vector path it is compiled for.
#include <cstdint>

namespace normlab::test {
struct ExpSweep {
  int64_t checked = 0;
  int64_t mismatches = 0;       // inputs whose vector exp differs from math::exp in any bit
  uint32_t first_mismatch = 0;  // the bits of the first such input
};
}  // namespace normlab::test

// The floats with bit patterns first, first + stride, ... up to last (inclusive), through attention's
// vector exp and through math::exp. in_range: avx2's exp8_in_range (arguments in [-86, 0] and quiet
// NaNs only) instead of exp8_nonpositive; avx512 has no such variant and sweeps exp16_nonpositive.
namespace normlab::test::avx2 {
ExpSweep exp_sweep(uint32_t first, uint32_t last, uint32_t stride, bool in_range = false);
}
namespace normlab::test::avx512 {
ExpSweep exp_sweep(uint32_t first, uint32_t last, uint32_t stride, bool in_range = false);
}
