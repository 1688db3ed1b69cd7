#pragma once
// Finite-difference gradient check, used by the test of every differentiable op.
//
// For a function f(inputs) -> Tensor, we compare the autograd gradient of
//   L = sum_i w_i * f(inputs)_i      (w fixed random weights, so every output matters differently)
// with central differences (L(x + h) - L(x - h)) / 2h, one input element at a time. The loss is
// accumulated in double so that the float32 forward is the only source of rounding error.
#include <functional>
#include <string>
#include <vector>

#include "normlab/tensor.hpp"

namespace normlab {

struct GradcheckOptions {
  double step = 1e-2;  // h; float32 forward needs a large step (error ~ eps_float / h)
  double atol = 1e-3;  // element passes if |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-2;
  int64_t max_checks_per_input = 200;  // elements probed per input (evenly spaced), keeps tests fast
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string worst;  // "input 1 element 17: analytic 0.1234 numeric 0.1299"
  int64_t checked = 0;
};

// inputs that should be checked must have requires_grad set; others are held constant.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          const GradcheckOptions& options = {});

}  // namespace normlab
