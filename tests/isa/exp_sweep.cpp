// attention's vector exp (src/kernels/attention_exp.hpp) against math::exp, bit for bit, over a
// range of float bit patterns. Compiled once per vector path with that path's flags
// (CMakeLists.txt: normlab_test_exp_avx2, normlab_test_exp_avx512), like the kernels themselves;
// tests/test_attention_exp.cpp runs the paths this CPU has.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "attention_exp.hpp"
#include "exp_sweep.hpp"
#include "normlab/kernels/math.hpp"

namespace normlab::test::NORMLAB_KERNEL_ISA {

namespace {
#if defined(__AVX512F__)
constexpr int kW = 16;
inline void vector_exp(const float* x, float* e, bool) {
  _mm512_storeu_ps(e, kernels::NORMLAB_KERNEL_ISA::exp16_nonpositive(_mm512_loadu_ps(x)));
}
#else
constexpr int kW = 8;
inline void vector_exp(const float* x, float* e, bool in_range) {
  const __m256 v = _mm256_loadu_ps(x);
  _mm256_storeu_ps(e, in_range ? kernels::NORMLAB_KERNEL_ISA::exp8_in_range(v)
                               : kernels::NORMLAB_KERNEL_ISA::exp8_nonpositive(v));
}
#endif
}  // namespace

ExpSweep exp_sweep(uint32_t first, uint32_t last, uint32_t stride, bool in_range) {
  ExpSweep result;
  float x[kW], e[kW];
  uint64_t bits = first;
  while (bits <= last) {
    int n = 0;
    for (; n < kW && bits <= last; n++, bits += stride) {
      const uint32_t b = uint32_t(bits);
      std::memcpy(&x[n], &b, sizeof b);
    }
    for (int l = n; l < kW; l++) x[l] = x[0];  // a last, partial vector: its unused lanes repeat one
    vector_exp(x, e, in_range);
    for (int l = 0; l < n; l++) {
      const float want = math::exp(x[l]);
      uint32_t got_bits, want_bits;
      std::memcpy(&got_bits, &e[l], sizeof got_bits);
      std::memcpy(&want_bits, &want, sizeof want_bits);
      result.checked++;
      if (got_bits != want_bits && result.mismatches++ == 0) {
        std::memcpy(&result.first_mismatch, &x[l], sizeof(float));
      }
    }
  }
  return result;
}

}  // namespace normlab::test::NORMLAB_KERNEL_ISA
