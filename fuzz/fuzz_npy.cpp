// libFuzzer target: see fuzz/fuzz_inputs.hpp for the input layout and the contract, scripts/check/fuzz.sh
// to build and run it.
#include "fuzz_inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return normlab::fuzz::fuzz_one(normlab::fuzz::run_npy, data, size);
}
