#pragma once
// Helpers for the tests that run kernels on every path this CPU has (kernels/dispatch.hpp).
#include <vector>

#include "normlab/kernels/dispatch.hpp"

namespace normlab::test {

// The fast paths this machine can run, generic first (the reference path computes other bits).
inline std::vector<kernels::Isa> available_isas() {
  std::vector<kernels::Isa> isas;
  for (kernels::Isa isa : {kernels::Isa::generic, kernels::Isa::avx2, kernels::Isa::avx512})
    if (kernels::cpu_supports(isa)) isas.push_back(isa);
  return isas;
}

// Runs the kernels on `isa` until the end of scope, then restores the path that was active.
class ScopedIsa {
 public:
  explicit ScopedIsa(kernels::Isa isa) : previous_(kernels::active_isa()) { kernels::set_active_isa(isa); }
  ~ScopedIsa() { kernels::set_active_isa(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  kernels::Isa previous_;
};

}  // namespace normlab::test
