// A seeded normal tensor that requires grad: the leaf an op's gradient tests start from.
#pragma once

#include <cstdint>

#include "normlab/rng.hpp"
#include "normlab/tensor.hpp"

namespace normlab::test {

inline Tensor leaf(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  Tensor t = Tensor::normal(shape, rng, 0.0f, scale);
  t.set_requires_grad();
  return t;
}

}  // namespace normlab::test
