#include "normlab/gradcheck.hpp"

#include <fmt/format.h>

#include <cmath>

#include "normlab/autograd.hpp"
#include "normlab/ops.hpp"
#include "normlab/rng.hpp"

namespace normlab {

namespace {
double weighted_sum(const Tensor& out, const std::vector<float>& weights) {
  const float* y = out.data();
  double total = 0.0;
  for (int64_t i = 0; i < out.numel(); ++i) total += double(weights[size_t(i)]) * double(y[i]);
  return total;
}
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          const GradcheckOptions& options) {
  GradcheckResult result;
  for (Tensor& t : inputs) t.zero_grad();

  // Analytic gradients.
  Tensor out = f(inputs);
  Rng rng(options.seed);
  std::vector<float> weights(size_t(out.numel()));
  for (float& w : weights) w = rng.uniform(-1.0f, 1.0f);
  Tensor loss = ops::sum(ops::mul(out, Tensor::from_data(out.shape(), weights)));
  loss.backward();

  NoGradGuard no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& input = inputs[k];
    if (!input.requires_grad()) continue;
    const std::vector<float> analytic = input.grad().to_vector();
    const int64_t n = input.numel();
    const int64_t stride = std::max<int64_t>(1, n / options.max_checks_per_input);
    float* x = input.data();
    for (int64_t i = 0; i < n; i += stride) {
      const float original = x[i];
      x[i] = float(original + options.step);
      const double plus = weighted_sum(f(inputs), weights);
      x[i] = float(original - options.step);
      const double minus = weighted_sum(f(inputs), weights);
      x[i] = original;
      const double numeric = (plus - minus) / (2.0 * options.step);
      const double error = std::abs(double(analytic[size_t(i)]) - numeric);
      ++result.checked;
      if (error > result.max_abs_error) result.max_abs_error = error;
      if (error > options.atol + options.rtol * std::abs(numeric) && result.ok) {
        result.ok = false;
        result.worst =
            fmt::format("input {} element {}: analytic {:.6g} numeric {:.6g}", k, i, analytic[size_t(i)], numeric);
      }
    }
  }
  return result;
}

}  // namespace normlab
