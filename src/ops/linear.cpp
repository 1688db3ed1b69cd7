// Linear algebra: matmul and the linear layer (alone, or with its ReLU fused), on our GEMM.
#include "normlab/ops.hpp"

#include <fmt/format.h>
#include <vector>

#include "common.hpp"
#include "normlab/autograd.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/kernels/matmul.hpp"

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
  const int64_t C = weight.size(1), OC = weight.size(0), N = C == 0 ? 0 : x.numel() / C;
  check_param(bias, {OC}, op, "bias");
  Shape out_shape = x.shape();
  out_shape.back() = OC;
  LinearSizes sizes{N, C, OC, Tensor::empty(out_shape), {x, weight}};
  if (bias.defined()) sizes.inputs.push_back(bias);
  return sizes;
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  auto [N, C, OC, out, inputs] = linear_sizes(x, weight, bias, "linear");
  kernels::linear_forward(out.data(), x.data(), weight.data(), bias.defined() ? bias.data() : nullptr, N, C, OC);
  if (!needs_grad({&x, &weight, &bias})) return out;
  record(out, "linear", inputs, [x, weight, bias, N, C, OC](const float* g) {
    const auto [dx, dweight, dbias] = grad_outs<3>({&x, &weight, &bias});
    kernels::linear_backward(dx, dweight, dbias, g, x.data(), weight.data(), N, C, OC);
  });
  return out;
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  auto [N, C, OC, out, inputs] = linear_sizes(x, weight, bias, "linear_relu");
  kernels::linear_relu_forward(out.data(), x.data(), weight.data(), bias.defined() ? bias.data() : nullptr, N, C, OC);
  if (!needs_grad({&x, &weight, &bias})) return out;
  // The node keeps out's values, not the tensor (out owns the node: no cycle).
  record(out, "linear_relu", inputs, [x, weight, bias, y = out.detach(), N, C, OC](const float* g) {
    const auto [dx, dweight, dbias] = grad_outs<3>({&x, &weight, &bias});
    kernels::linear_relu_backward(dx, dweight, dbias, g, y.data(), x.data(), weight.data(), N, C, OC);
  });
  return out;
}

}  // namespace normlab::ops
