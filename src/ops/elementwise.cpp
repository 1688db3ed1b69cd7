// Elementwise ops: the four binary ops with broadcasting (the residual connection x + f(x) is
// `add`), the unary ones, and the ReLU and GELU activations.
#include "normlab/ops.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "common.hpp"
#include "normlab/autograd.hpp"
#include "normlab/kernels/activations.hpp"
#include "normlab/kernels/add.hpp"
#include "normlab/parallel.hpp"

namespace normlab::ops {

using namespace detail;  // the shared checks and gradient buffers (common.hpp)

namespace {

// For each element of `out_shape` (row-major), the index of the element of `in_shape` that
// broadcasting maps to it.
std::vector<int64_t> broadcast_index_map(const Shape& out_shape, const Shape& in_shape) {
  const size_t nd = out_shape.size();
  std::vector<int64_t> in_stride(nd, 0);  // 0 on broadcast dims
  int64_t stride = 1;
  for (size_t k = 0; k < in_shape.size(); ++k) {
    size_t in_d = in_shape.size() - 1 - k, out_d = nd - 1 - k;
    in_stride[out_d] = in_shape[in_d] == 1 ? 0 : stride;
    stride *= in_shape[in_d];
  }
  const int64_t n = shape_numel(out_shape);
  std::vector<int64_t> map(static_cast<size_t>(n));
  std::vector<int64_t> counter(nd, 0);
  int64_t index = 0;
  for (int64_t i = 0; i < n; ++i) {
    map[static_cast<size_t>(i)] = index;
    for (size_t d = nd; d-- > 0;) {  // odometer increment, last dim fastest
      index += in_stride[d];
      if (++counter[d] < out_shape[d]) break;
      index -= in_stride[d] * out_shape[d];
      counter[d] = 0;
    }
  }
  return map;
}

// The four binary ops, each a forward f(x, y) beside its partial derivatives df/dx and df/dy.
struct Add {
  static float f(float x, float y) { return x + y; }
  static float dfdx(float, float) { return 1.0f; }
  static float dfdy(float, float) { return 1.0f; }
};
struct Sub {
  static float f(float x, float y) { return x - y; }
  static float dfdx(float, float) { return 1.0f; }
  static float dfdy(float, float) { return -1.0f; }
};
struct Mul {
  static float f(float x, float y) { return x * y; }
  static float dfdx(float, float y) { return y; }
  static float dfdy(float x, float) { return x; }
};
struct Div {
  static float f(float x, float y) { return x / y; }
  static float dfdx(float, float y) { return 1.0f / y; }
  static float dfdy(float x, float y) { return -x / (y * y); }
};

// out = Op::f(a, b) with broadcasting; backward adds g * Op::dfdx into a's gradient and
// g * Op::dfdy into b's.
template <typename Op>
Tensor binary(const Tensor& a, const Tensor& b, const char* name) {
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(out_shape);
  const int64_t n = out.numel();
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  // Same shape on both sides is the hot case (residual connections): a flat parallel loop.
  const bool flat = a.shape() == out_shape && b.shape() == out_shape;
  // b a single number over all of a (ReZero's f(x) * alpha): a flat loop too, and b's gradient
  // one sum.
  const bool scalar_b = !flat && a.shape() == out_shape && b.numel() == 1;
  std::shared_ptr<std::vector<int64_t>> ia, ib;
  if (!flat && !scalar_b) {
    ia = std::make_shared<std::vector<int64_t>>(broadcast_index_map(out_shape, a.shape()));
    ib = std::make_shared<std::vector<int64_t>>(broadcast_index_map(out_shape, b.shape()));
  }
  if (flat) {
    parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<Op, Add>) {  // the residual sum: the kernel path's vector width
        kernels::add_forward(po + begin, pa + begin, pb + begin, end - begin);
      } else {
        for (int64_t i = begin; i < end; ++i) po[i] = Op::f(pa[i], pb[i]);
      }
    });
  } else if (scalar_b) {
    const float s = pb[0];
    parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) po[i] = Op::f(pa[i], s);
    });
  } else {
    for (int64_t i = 0; i < n; ++i) po[i] = Op::f(pa[(*ia)[i]], pb[(*ib)[i]]);
  }
  if (!needs_grad({&a, &b})) return out;
  record(out, name, {a, b}, [a, b, ia, ib, n, flat, scalar_b](const float* g) {
    const float* x = a.data();
    const float* y = b.data();
    if (flat) {  // one gradient element per input element: stored
      // A sum's gradient is the same for both inputs: one of them (the first that can) takes the
      // output's gradient buffer itself, and only the other gets a copy.
      bool a_passed = false, b_passed = false;
      if constexpr (std::is_same_v<Op, Add>) {
        if (a.impl() != b.impl()) {
          a_passed = pass_gradient_through(a);
          b_passed = !a_passed && pass_gradient_through(b);
        }
      }
      const Tensor none;
      const auto [da, db] = grad_outs<2>({a_passed ? &none : &a, b_passed ? &none : &b});
      parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
        if constexpr (std::is_same_v<Op, Add>) {  // both gradients are g itself
          const auto block = [&](const kernels::GradOut& d) {
            return kernels::GradOut(d.data ? d.data + begin : nullptr, d.accumulate);
          };
          kernels::add_backward(block(da), g + begin, end - begin);
          kernels::add_backward(block(db), g + begin, end - begin);  // x + x: both add to one zeroed buffer
        } else {
          store_each(da, begin, end, [&](int64_t i) { return g[i] * Op::dfdx(x[i], y[i]); });
          // a and b one tensor (x + x): both add to its zeroed buffer, one thread per i
          store_each(db, begin, end, [&](int64_t i) { return g[i] * Op::dfdy(x[i], y[i]); });
        }
      });
    } else if (scalar_b) {
      // a's gradient element by element over the threads; b's, one sum over all elements in
      // order on one thread: the order (and the bits) of the general loop below.
      const float s = y[0];
      const auto [da] = grad_outs<1>({&a});
      parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
        store_each(da, begin, end, [&](int64_t i) { return g[i] * Op::dfdx(x[i], s); });
      });
      if (float* db = grad_ptr(b)) {
        float sum = db[0];
        for (int64_t i = 0; i < n; ++i) sum += g[i] * Op::dfdy(x[i], s);
        db[0] = sum;
      }
    } else {
      // Serial: several outputs map to one broadcast input, and a fixed order keeps the sum
      // reproducible.
      float* da = grad_ptr(a);
      float* db = grad_ptr(b);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = (*ia)[i], k = (*ib)[i];
        if (da) da[j] += g[i] * Op::dfdx(x[j], y[k]);
        if (db) db[k] += g[i] * Op::dfdy(x[j], y[k]);
      }
    }
  });
  return out;
}

// y = f(x) elementwise; backward uses dfdx(x, y).
template <typename F, typename DF>
Tensor unary(const Tensor& a, const char* name, F f, DF dfdx) {
  Tensor out = Tensor::empty(a.shape());
  const int64_t n = a.numel();
  const float* x = a.data();
  float* y = out.data();
  parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = f(x[i]);
  });
  if (!needs_grad({&a})) return out;
  Tensor y_saved = out.detach();  // the values, not the node: no cycle
  record(out, name, {a}, [a, y_saved, n, dfdx](const float* g) {
    const auto [da] = grad_outs<1>({&a});
    const float* xv = a.data();
    const float* yv = y_saved.data();
    parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
      store_each(da, begin, end, [&](int64_t i) { return g[i] * dfdx(xv[i], yv[i]); });
    });
  });
  return out;
}

// y = f(x) elementwise by an activation's kernel pair (kernels/activations.hpp): forward(y, x, n),
// and backward(dx, g, x, n), which adds into dx.
template <auto forward, auto backward>
Tensor activation(const Tensor& a, const char* name) {
  Tensor out = Tensor::empty(a.shape());
  forward(out.data(), a.data(), a.numel());
  if (!needs_grad({&a})) return out;
  record(out, name, {a}, [a](const float* g) { backward(grad_ptr(a), g, a.data(), a.numel()); });
  return out;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (size_t k = 0; k < nd; ++k) {
    int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    int64_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    require(da == db || da == 1 || db == 1,
            [&] { return fmt::format("shapes {} and {} cannot be broadcast together", shape_str(a), shape_str(b)); });
    out[nd - 1 - k] = std::max(da, db);
  }
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) { return binary<Add>(a, b, "add"); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary<Sub>(a, b, "sub"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary<Mul>(a, b, "mul"); }
Tensor div(const Tensor& a, const Tensor& b) { return binary<Div>(a, b, "div"); }

Tensor add_scalar(const Tensor& a, float s) {
  return unary(
      a, "add_scalar", [s](float x) { return x + s; }, [](float, float) { return 1.0f; });
}
Tensor mul_scalar(const Tensor& a, float s) {
  return unary(
      a, "mul_scalar", [s](float x) { return x * s; }, [s](float, float) { return s; });
}
Tensor neg(const Tensor& a) {
  return unary(
      a, "neg", [](float x) { return -x; }, [](float, float) { return -1.0f; });
}
Tensor exp(const Tensor& a) {
  return unary(
      a, "exp", [](float x) { return std::exp(x); }, [](float, float y) { return y; });
}
Tensor log(const Tensor& a) {
  return unary(
      a, "log", [](float x) { return std::log(x); }, [](float x, float) { return 1.0f / x; });
}
Tensor tanh(const Tensor& a) {
  return unary(
      a, "tanh", [](float x) { return std::tanh(x); }, [](float, float y) { return 1.0f - y * y; });
}
Tensor square(const Tensor& a) {
  return unary(
      a, "square", [](float x) { return x * x; }, [](float x, float) { return 2.0f * x; });
}

Tensor relu(const Tensor& a) { return activation<kernels::relu_forward, kernels::relu_backward>(a, "relu"); }
Tensor gelu(const Tensor& a) { return activation<kernels::gelu_forward, kernels::gelu_backward>(a, "gelu"); }

}  // namespace normlab::ops
