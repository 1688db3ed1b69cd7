// attention's vector exp (src/kernels/attention_exp.hpp) gives math::exp's bits for every x <= 0
// and every NaN, its only arguments, on each vector path this CPU has. The suite checks every 61st
// bit pattern of that range, every NaN and the edges; the test case marked skip checks all 2^31
// negative floats (about 20 s of one core a path):
//   build/normlab_tests -tc="attention exp: every*" --no-skip
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "isa/exp_sweep.hpp"
#include "isa_support.hpp"

namespace {

using normlab::kernels::Isa;
using normlab::test::ExpSweep;

struct Range {
  uint32_t first, last, stride;
  const char* what;
};

ExpSweep sweep(Isa isa, const Range& r, bool in_range) {
  return isa == Isa::avx512 ? normlab::test::avx512::exp_sweep(r.first, r.last, r.stride, in_range)
                            : normlab::test::avx2::exp_sweep(r.first, r.last, r.stride, in_range);
}

// in_range: avx2's exp8_in_range, for arguments in [-86, 0] and quiet NaNs (avx2 only).
void check_ranges(const std::vector<Range>& ranges, bool in_range = false) {
  int paths = 0;
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (in_range && isa != Isa::avx2) continue;
    if (!normlab::kernels::cpu_supports(isa)) continue;
    paths++;
    for (const Range& r : ranges) {
      CAPTURE(normlab::kernels::isa_name(isa));
      CAPTURE(r.what);
      const ExpSweep s = sweep(isa, r, in_range);
      char bits[16];
      std::snprintf(bits, sizeof bits, "0x%08x", unsigned(s.first_mismatch));
      INFO("first input that differs: bits " << bits);
      CHECK(s.checked == int64_t((uint64_t(r.last) - r.first) / r.stride + 1));
      CHECK(s.mismatches == 0);
    }
  }
  if (paths == 0) MESSAGE("this CPU has no AVX2: attention's vector exp is not used here");
}

}  // namespace

TEST_CASE("attention exp: the vector exp gives math::exp's bits (every 61st negative float, every NaN, the edges)") {
  check_ranges({
      {0x80000000u, 0xFFFFFFFFu, 61, "every 61st float with the sign bit set"},
      {0x80000000u, 0x80100000u, 1, "-0 and the smallest subnormals"},
      {0xC2CF0000u, 0xC2D10000u, 1, "around -104, the clamp"},  // -103.5 .. -104.5
      {0xC2AE0000u, 0xC2BC0000u, 1, "around -87 .. -94, where exp leaves the normal floats"},
      {0xBF000000u, 0xBF400000u, 1, "-0.5 .. -0.75"},
      {0xFF800000u, 0xFFFFFFFFu, 1, "-inf and every NaN with the sign bit set"},
      {0x7F800001u, 0x7FFFFFFFu, 1, "every NaN with the sign bit clear"},
  });
}

TEST_CASE("attention exp: avx2's in-range exp gives math::exp's bits on [-86, 0] and every quiet NaN") {
  // The softmax rows whose smallest argument is at least -86 take it (src/kernels/attention.cpp).
  check_ranges({{0x80000000u, 0xC2AC0000u, 61, "every 61st float of [-86, -0]"},
                {0x80000000u, 0x80100000u, 1, "-0 and the smallest subnormals"},
                {0xC2AB0000u, 0xC2AC0000u, 1, "-85.5 .. -86"},
                {0xBF000000u, 0xBF400000u, 1, "-0.5 .. -0.75"},
                {0xFFC00000u, 0xFFFFFFFFu, 1, "every quiet NaN with the sign bit set"},
                {0x7FC00000u, 0x7FFFFFFFu, 1, "every quiet NaN with the sign bit clear"}},
               true);
}

TEST_CASE("attention exp: every float with the sign bit set" * doctest::skip()) {
  check_ranges({{0x80000000u, 0xFFFFFFFFu, 1, "all 2^31 floats with the sign bit set"}});
}
