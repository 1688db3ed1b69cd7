// Linear algebra: matmul and the linear layer (alone, with its ReLU fused, or with the residual sum
// that follows it fused), on our GEMM.
#include "normlab/ops.hpp"

#include <fmt/format.h>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "common.hpp"
#include "normlab/autograd.hpp"
#include "normlab/kernels/add.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/kernels/matmul.hpp"
#include "normlab/parallel.hpp"

namespace normlab::ops {

using namespace detail;  // the shared checks and gradient buffers (common.hpp)

Tensor matmul(const Tensor& a, const Tensor& b) {
  require(a.dim() >= 1 && b.dim() == 2 && a.size(-1) == b.size(0),
          [&] { return fmt::format("matmul: cannot multiply {} by {}", shape_str(a.shape()), shape_str(b.shape())); });
  const int64_t K = b.size(0), N = b.size(1), M = K == 0 ? 0 : a.numel() / K;
  Shape out_shape = a.shape();
  out_shape.back() = N;
  Tensor out = Tensor::empty(out_shape);
  kernels::matmul_nn(out.data(), a.data(), b.data(), M, K, N, false);
  if (!needs_grad({&a, &b})) return out;
  record(out, "matmul", {a, b}, [a, b, M, K, N](const float* g) {
    float* da = grad_ptr(a);
    float* db = grad_ptr(b);
    if (da) kernels::matmul_nt(da, g, b.data(), M, N, K, true);  // dA = G B^T
    if (db) kernels::matmul_tn(db, a.data(), g, K, M, N, true);  // dB = A^T G
  });
  return out;
}

namespace {
// x (..., C) @ weight (OC, C)^T + bias (OC): the sizes, checked, and the output (..., OC), unfilled.
struct LinearSizes {
  int64_t N, C, OC;
  Tensor out;
  std::vector<Tensor> inputs;  // x, weight and bias if defined: the node's inputs
};
LinearSizes linear_sizes(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  require(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), [&] {
    return fmt::format("{}: input {} does not match weight {} (expected [out, {}])", op, shape_str(x.shape()),
                       shape_str(weight.shape()), x.dim() >= 1 ? x.size(-1) : 0);
  });
  const int64_t C = weight.size(1), OC = weight.size(0);
  // The rows: the product of x's leading dims (not numel / C, which has no answer at C = 0: the
  // output is then the bias, or 0, in every row). No overflow: x's shape passed shape_numel.
  const Shape& dims = x.shape();
  const int64_t N = std::accumulate(dims.begin(), dims.end() - 1, int64_t{1}, std::multiplies<>());
  check_param(bias, {OC}, op, "bias");
  Shape out_shape = x.shape();
  out_shape.back() = OC;
  LinearSizes sizes{N, C, OC, Tensor::empty(out_shape), {}};
  sizes.inputs.reserve(4);  // one allocation for x, weight, bias and linear_add's residual
  sizes.inputs.push_back(x);
  sizes.inputs.push_back(weight);
  if (bias.defined()) sizes.inputs.push_back(bias);
  return sizes;
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  auto [N, C, OC, out, inputs] = linear_sizes(x, weight, bias, "linear");
  kernels::linear_forward(out.data(), x.data(), weight.data(), bias.defined() ? bias.data() : nullptr, N, C, OC);
  if (!needs_grad({&x, &weight, &bias})) return out;
  record(out, "linear", std::move(inputs), [x, weight, bias, N, C, OC](const float* g) {
    const auto [dx, dweight, dbias] = grad_outs<3>({&x, &weight, &bias});
    kernels::linear_backward(dx, dweight, dbias, g, x.data(), weight.data(), N, C, OC);
  });
  return out;
}

Tensor linear_add(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual) {
  auto [N, C, OC, out, inputs] = linear_sizes(x, weight, bias, "linear_add");
  require(residual.shape() == out.shape(), [&] {
    return fmt::format("linear_add: residual {} does not match the output {}", shape_str(residual.shape()),
                       shape_str(out.shape()));
  });
  kernels::linear_add_forward(out.data(), x.data(), weight.data(), bias.defined() ? bias.data() : nullptr,
                              residual.data(), N, C, OC);
  if (!needs_grad({&x, &weight, &bias, &residual})) return out;
  inputs.push_back(residual);
  record(out, "linear_add", std::move(inputs), [x, weight, bias, residual, N, C, OC](const float* g) {
    // d out / d residual is the identity: the residual's gradient is g, as the add's backward gave
    // it. Handed g's buffer itself when it has none yet, as add does, unless it is also one of the
    // Linear's inputs (linear_add(x, W, b, x)): the Linear's backward reads g while it writes that
    // input's gradient.
    const bool aliased = residual.impl() == x.impl() || residual.impl() == weight.impl() ||
                         (bias.defined() && residual.impl() == bias.impl());
    const bool passed = !aliased && pass_gradient_through(residual);
    const Tensor none;
    const auto [dx, dweight, dbias, dresidual] = grad_outs<4>({&x, &weight, &bias, passed ? &none : &residual});
    const int64_t n = N * OC;
    if (dresidual.data)  // none when g was handed over (the encoder's case) or no gradient is wanted
      parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
        kernels::add_backward(kernels::GradOut(dresidual.data + begin, dresidual.accumulate), g + begin, end - begin);
      });
    kernels::linear_backward(dx, dweight, dbias, g, x.data(), weight.data(), N, C, OC);
  });
  return out;
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  auto [N, C, OC, out, inputs] = linear_sizes(x, weight, bias, "linear_relu");
  kernels::linear_relu_forward(out.data(), x.data(), weight.data(), bias.defined() ? bias.data() : nullptr, N, C, OC);
  if (!needs_grad({&x, &weight, &bias})) return out;
  // The node keeps out's values, not the tensor (out owns the node: no cycle).
  record(out, "linear_relu", std::move(inputs), [x, weight, bias, y = out.detach(), N, C, OC](const float* g) {
    const auto [dx, dweight, dbias] = grad_outs<3>({&x, &weight, &bias});
    kernels::linear_relu_backward(dx, dweight, dbias, g, y.data(), x.data(), weight.data(), N, C, OC);
  });
  return out;
}

}  // namespace normlab::ops
