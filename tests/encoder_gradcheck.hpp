// The finite-difference check of a whole one-layer encoder on one packed batch of three sequences
// (lengths 3, 1, 3: offsets {0, 3, 4, 7}), shared by the encoder and qk-norm tests. inputs[0] is the
// packed [7, d_model] input; the rest are the encoder's parameters, in named_parameters() order.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "normlab/gradcheck.hpp"
#include "normlab/nn/encoder.hpp"

namespace normlab::test {

inline void check_encoder_gradients(const std::shared_ptr<nn::TransformerEncoder>& encoder,
                                    const std::vector<Tensor>& inputs) {
  const std::vector<int64_t> offsets{0, 3, 4, 7};
  GradcheckOptions options;
  options.max_checks_per_input = 12;
  options.step = 5e-3;
  options.atol = 2e-3;
  options.rtol = 2e-2;
  GradcheckResult r =
      gradcheck([encoder, offsets](const std::vector<Tensor>& in) { return encoder->forward(in[0], offsets); }, inputs,
                options);
  INFO(r.worst);
  CHECK(r.ok);
}

}  // namespace normlab::test
