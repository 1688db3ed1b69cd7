// Differentiable ops: glue between Tensor/autograd and the raw kernels. Each op is
//   1. check shapes, 2. allocate the output, 3. call the forward kernel,
//   4. if needed, record a node whose closure calls the matching backward kernel.
// Which build of a kernel runs (reference, generic, avx2, avx512) is the dispatch's business
// (kernels/dispatch.hpp), not the op's.
// The closures capture exactly what backward needs (inputs, cached statistics), never the output.
#include "normlab/ops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/parallel.hpp"
#include "normlab/kernels/activations.hpp"
#include "normlab/kernels/attention.hpp"
#include "normlab/kernels/batch_norm.hpp"
#include "normlab/kernels/power_norm.hpp"
#include "normlab/kernels/cross_entropy.hpp"
#include "normlab/kernels/dropout.hpp"
#include "normlab/kernels/embedding.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/kernels/math.hpp"
#include "normlab/kernels/matmul.hpp"
#include "normlab/kernels/rms_norm.hpp"
#include "normlab/kernels/softmax.hpp"
#include "normlab/rng.hpp"

namespace normlab::ops {

namespace {

// Below this many iterations a parallel region costs more than it saves (and a deep chain of tiny
// ops would spend its time starting threads).
constexpr int64_t kParallelGrain = 1 << 14;

// Gradient buffer of t if it takes part in differentiation, else null; zero-filled when new, for
// a backward that adds into it.
float* grad_ptr(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  Tensor handle = t;
  return handle.grad_data();
}

// The gradients of a node's inputs as outputs of a backward kernel that stores every element
// (kernels/grad_out.hpp): null where the input takes no part in differentiation; for the first
// gradient to reach an input, a new buffer left unfilled, which the kernel overwrites; after that
// the input's buffer, added to. An input given twice (x + x, linear(w, w)) gets a zeroed buffer
// that both of its gradients add to, since a kernel may store them in either order.
template <size_t N>
std::array<kernels::GradOut, N> grad_outs(const std::array<const Tensor*, N>& inputs) {
  std::array<kernels::GradOut, N> outs{};
  for (size_t i = 0; i < N; i++) {
    const Tensor& t = *inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    bool twice = false;
    for (size_t j = 0; j < N; j++) twice |= j != i && inputs[j]->defined() && inputs[j]->impl() == t.impl();
    Tensor handle = t;
    bool existed = true;
    float* data = twice ? handle.grad_data() : handle.grad_data_to_overwrite(existed);
    outs[i] = kernels::GradOut(data, existed);
  }
  return outs;
}

// d[i] (+)= value(i) for i in [begin, end), added or written as d says; nothing when d is not
// wanted. Called on one block of a parallel_for. The test is out of the loop, which stays a plain
// vector loop.
template <class F>
void store_each(const kernels::GradOut& d, int64_t begin, int64_t end, F value) {
  if (d.data == nullptr) return;
  float* p = d.data;
  if (d.accumulate) {
    for (int64_t i = begin; i < end; ++i) p[i] += value(i);
  } else {
    for (int64_t i = begin; i < end; ++i) p[i] = value(i);
  }
}

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}
// The same with a message built only when the check fails: `require(ok, [&] { return
// fmt::format(...); })`. The ops run hundreds of times a step, and formatting every message (shape
// strings and all) whether or not it is needed took about 0.1 ms of each bench-step step, on the
// main thread while the other threads waited.
template <class Message>
  requires std::is_invocable_r_v<std::string, Message&>
void require(bool ok, Message&& message) {
  if (!ok) throw UsageError(message());
}

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
      for (int64_t i = begin; i < end; ++i) po[i] = Op::f(pa[i], pb[i]);
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
      const auto [da, db] = grad_outs<2>({&a, &b});
      parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
        store_each(da, begin, end, [&](int64_t i) { return g[i] * Op::dfdx(x[i], y[i]); });
        // a and b one tensor (x + x): both add to its zeroed buffer, one thread per i
        store_each(db, begin, end, [&](int64_t i) { return g[i] * Op::dfdy(x[i], y[i]); });
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

// rows x cols split of x for an op over the trailing dims `normalized_shape`.
int64_t trailing_cols(const Tensor& x, const Shape& normalized_shape, const char* op) {
  const Shape& s = x.shape();
  bool ok = !normalized_shape.empty() && normalized_shape.size() <= s.size() &&
            std::equal(normalized_shape.begin(), normalized_shape.end(), s.end() - normalized_shape.size());
  require(ok, [&] {
    return fmt::format("{}: normalized_shape {} must match the trailing dims of the input {}", op,
                       shape_str(normalized_shape), shape_str(s));
  });
  return shape_numel(normalized_shape);
}

void check_param(const Tensor& p, const Shape& shape, const char* op, const char* what) {
  if (!p.defined()) return;
  require(p.shape() == shape, [&] {
    return fmt::format("{}: {} has shape {}, expected {}", op, what, shape_str(p.shape()), shape_str(shape));
  });
}

void check_offsets(const std::vector<int64_t>& offsets, int64_t num_tokens, const char* op) {
  require(offsets.size() >= 2 && offsets.front() == 0 && offsets.back() == num_tokens, [&] {
    return fmt::format("{}: offsets must start at 0 and end at the number of tokens ({})", op, num_tokens);
  });
  for (size_t i = 1; i < offsets.size(); ++i)
    require(offsets[i] >= offsets[i - 1], [&] { return fmt::format("{}: offsets must be non-decreasing", op); });
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

Tensor relu(const Tensor& a) {
  Tensor out = Tensor::empty(a.shape());
  kernels::relu_forward(out.data(), a.data(), a.numel());
  if (!needs_grad({&a})) return out;
  record(out, "relu", {a}, [a](const float* g) { kernels::relu_backward(grad_ptr(a), g, a.data(), a.numel()); });
  return out;
}

Tensor gelu(const Tensor& a) {
  Tensor out = Tensor::empty(a.shape());
  kernels::gelu_forward(out.data(), a.data(), a.numel());
  if (!needs_grad({&a})) return out;
  record(out, "gelu", {a}, [a](const float* g) { kernels::gelu_backward(grad_ptr(a), g, a.data(), a.numel()); });
  return out;
}

Tensor sum(const Tensor& a) {
  const int64_t n = a.numel();
  const float* x = a.data();
  double total = 0.0;  // serial double sum: exact order, used for losses and tests
  for (int64_t i = 0; i < n; ++i) total += x[i];
  Tensor out = Tensor::scalar(static_cast<float>(total));
  if (!needs_grad({&a})) return out;
  record(out, "sum", {a}, [a, n](const float* g) {
    float* da = grad_ptr(a);
    const float gv = g[0];
    parallel_for(n, n > kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) da[i] += gv;
    });
  });
  return out;
}

Tensor mean(const Tensor& a) {
  require(a.numel() > 0, "mean of an empty tensor");
  return mul_scalar(sum(a), 1.0f / static_cast<float>(a.numel()));
}

Tensor sum_trailing(const Tensor& a, int64_t ndims, bool keepdim) {
  require(ndims >= 1 && ndims <= a.dim(), [&] {
    return fmt::format("sum_trailing: cannot reduce {} trailing dims of {}", ndims, shape_str(a.shape()));
  });
  Shape out_shape(a.shape().begin(), a.shape().end() - ndims);
  Shape inner_shape(a.shape().end() - ndims, a.shape().end());
  if (keepdim) out_shape.insert(out_shape.end(), static_cast<size_t>(ndims), 1);
  const int64_t inner = shape_numel(inner_shape);
  const int64_t rows = inner == 0 ? 0 : a.numel() / inner;
  Tensor out = Tensor::zeros(out_shape);
  const float* x = a.data();
  float* y = out.data();
  parallel_for(rows, rows * inner > kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      double acc = 0.0;
      for (int64_t j = 0; j < inner; ++j) acc += x[r * inner + j];
      y[r] = static_cast<float>(acc);
    }
  });
  if (!needs_grad({&a})) return out;
  record(out, "sum_trailing", {a}, [a, rows, inner](const float* g) {
    float* da = grad_ptr(a);
    parallel_for(rows, rows * inner > kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t j = 0; j < inner; ++j) da[r * inner + j] += g[r];
    });
  });
  return out;
}

Tensor mean_trailing(const Tensor& a, int64_t ndims, bool keepdim) {
  Tensor s = sum_trailing(a, ndims, keepdim);
  const int64_t inner = a.numel() / std::max<int64_t>(1, s.numel());
  return mul_scalar(s, 1.0f / static_cast<float>(std::max<int64_t>(1, inner)));
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  Shape resolved = shape;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      require(infer_at < 0, "reshape: only one dimension can be -1");
      infer_at = static_cast<int64_t>(i);
    } else {
      require(resolved[i] >= 0, [&] { return fmt::format("reshape: invalid shape {}", shape_str(shape)); });
      known *= resolved[i];
    }
  }
  if (infer_at >= 0) {
    require(known > 0 && a.numel() % known == 0,
            [&] { return fmt::format("reshape: cannot infer -1 in {} for {} elements", shape_str(shape), a.numel()); });
    resolved[static_cast<size_t>(infer_at)] = a.numel() / known;
  }
  require(shape_numel(resolved) == a.numel(),
          [&] { return fmt::format("reshape: {} elements cannot have shape {}", a.numel(), shape_str(shape)); });
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = resolved;
  impl->storage = a.impl()->storage;
  impl->offset = a.impl()->offset;
  Tensor out(impl);
  if (!needs_grad({&a})) return out;
  const int64_t n = a.numel();
  record(out, "reshape", {a}, [a, n](const float* g) {
    const auto [da] = grad_outs<1>({&a});
    parallel_for(n, n > kParallelGrain,
                 [&](int64_t begin, int64_t end) { store_each(da, begin, end, [&](int64_t i) { return g[i]; }); });
  });
  return out;
}

Tensor narrow_columns(const Tensor& a, int64_t start, int64_t length) {
  require(a.dim() == 2 && start >= 0 && length >= 0 && start + length <= a.size(1), [&] {
    return fmt::format("narrow_columns: columns [{}, {}) of a {} matrix", start, start + length, shape_str(a.shape()));
  });
  const int64_t rows = a.size(0), cols = a.size(1);
  Tensor out = Tensor::empty({rows, length});
  const float* x = a.data();
  float* y = out.data();
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x + r * cols + start, length, y + r * length);
  if (!needs_grad({&a})) return out;
  record(out, "narrow_columns", {a}, [a, rows, cols, start, length](const float* g) {
    float* dx = grad_ptr(a);  // zero-filled when new: the columns outside the slice get nothing
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < length; ++c) dx[r * cols + start + c] += g[r * length + c];
  });
  return out;
}

Tensor cat_columns(const std::vector<Tensor>& parts) {
  require(!parts.empty(), "cat_columns: needs at least one matrix");
  const int64_t rows = parts.front().dim() == 2 ? parts.front().size(0) : -1;
  int64_t cols = 0;
  for (const Tensor& part : parts) {
    require(part.dim() == 2 && part.size(0) == rows, [&] {
      return fmt::format("cat_columns: {} does not have the {} rows of the first matrix", shape_str(part.shape()),
                         rows);
    });
    cols += part.size(1);
  }
  Tensor out = Tensor::empty({rows, cols});
  float* y = out.data();
  int64_t start = 0;
  for (const Tensor& part : parts) {
    const int64_t width = part.size(1);
    const float* x = part.data();
    for (int64_t r = 0; r < rows; ++r) std::copy_n(x + r * width, width, y + r * cols + start);
    start += width;
  }
  const bool grad = grad_enabled() &&
                    std::any_of(parts.begin(), parts.end(), [](const Tensor& part) { return part.requires_grad(); });
  if (!grad) return out;
  record(out, "cat_columns", parts, [parts, rows, cols](const float* g) {
    int64_t first = 0;
    for (const Tensor& part : parts) {
      const int64_t width = part.size(1);
      if (float* dx = grad_ptr(part)) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < width; ++c) dx[r * width + c] += g[r * cols + first + c];
      }
      first += width;
    }
  });
  return out;
}

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

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& gamma, const Tensor& beta, float eps) {
  const int64_t cols = trailing_cols(x, normalized_shape, "layer_norm");
  check_param(gamma, normalized_shape, "layer_norm", "weight (gamma)");
  check_param(beta, normalized_shape, "layer_norm", "bias (beta)");
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::empty(x.shape());
  const bool grad = needs_grad({&x, &gamma, &beta});
  // Statistics per row (= per token): [rows], i.e. [batch, seq_len] for a [batch, seq_len, d_model]
  // input. Only kept when backward will need them.
  auto mean = std::make_shared<std::vector<float>>(grad ? rows : 0);
  auto rstd = std::make_shared<std::vector<float>>(grad ? rows : 0);
  kernels::layer_norm_forward(out.data(), grad ? mean->data() : nullptr, grad ? rstd->data() : nullptr, x.data(),
                              gamma.defined() ? gamma.data() : nullptr, beta.defined() ? beta.data() : nullptr, rows,
                              cols, eps);
  if (!grad) return out;
  std::vector<Tensor> inputs{x};
  if (gamma.defined()) inputs.push_back(gamma);
  if (beta.defined()) inputs.push_back(beta);
  record(out, "layer_norm", inputs, [x, gamma, beta, mean, rstd, rows, cols](const float* g) {
    kernels::layer_norm_backward(grad_ptr(x), grad_ptr(gamma), grad_ptr(beta), g, x.data(),
                                 gamma.defined() ? gamma.data() : nullptr, mean->data(), rstd->data(), rows, cols);
  });
  return out;
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& gamma, float eps) {
  const int64_t cols = trailing_cols(x, normalized_shape, "rms_norm");
  check_param(gamma, normalized_shape, "rms_norm", "weight (gamma)");
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::empty(x.shape());
  auto rstd = std::make_shared<std::vector<float>>(rows);
  kernels::rms_norm_forward(out.data(), rstd->data(), x.data(), gamma.defined() ? gamma.data() : nullptr, rows, cols,
                            eps);
  if (!needs_grad({&x, &gamma})) return out;
  std::vector<Tensor> inputs{x};
  if (gamma.defined()) inputs.push_back(gamma);
  record(out, "rms_norm", inputs, [x, gamma, rstd, rows, cols](const float* g) {
    kernels::rms_norm_backward(grad_ptr(x), grad_ptr(gamma), g, x.data(), gamma.defined() ? gamma.data() : nullptr,
                               rstd->data(), rows, cols);
  });
  return out;
}

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor running_mean, Tensor running_var,
                  bool training, float momentum, float eps, kernels::RankSum* ranks) {
  require(x.dim() == 2,
          [&] { return fmt::format("batch_norm: expects (tokens, features), got {}", shape_str(x.shape())); });
  const int64_t N = x.size(0), C = x.size(1);
  check_param(gamma, {C}, "batch_norm", "weight (gamma)");
  check_param(beta, {C}, "batch_norm", "bias (beta)");
  check_param(running_mean, {C}, "batch_norm", "running_mean");
  check_param(running_var, {C}, "batch_norm", "running_var");
  Tensor out = Tensor::empty(x.shape());
  auto mean = std::make_shared<std::vector<float>>(C);
  auto rstd = std::make_shared<std::vector<float>>(C);
  const float* pg = gamma.defined() ? gamma.data() : nullptr;
  const float* pb = beta.defined() ? beta.data() : nullptr;
  if (training) {
    require(N > 0, "batch_norm: training mode needs at least one token");
    kernels::batch_norm_forward_train(out.data(), mean->data(), rstd->data(),
                                      running_mean.defined() ? running_mean.data() : nullptr,
                                      running_var.defined() ? running_var.data() : nullptr, x.data(), pg, pb, N, C, eps,
                                      momentum, ranks);
  } else {
    require(running_mean.defined() && running_var.defined(), "batch_norm: eval mode needs running statistics");
    kernels::batch_norm_forward_eval(out.data(), x.data(), running_mean.data(), running_var.data(), pg, pb, N, C, eps);
    for (int64_t c = 0; c < C; ++c) {
      (*mean)[c] = running_mean.data()[c];
      (*rstd)[c] = 1.0f / std::sqrt(running_var.data()[c] + eps);
    }
  }
  if (!needs_grad({&x, &gamma, &beta})) return out;
  std::vector<Tensor> inputs{x};
  if (gamma.defined()) inputs.push_back(gamma);
  if (beta.defined()) inputs.push_back(beta);
  record(out, "batch_norm", inputs, [x, gamma, beta, mean, rstd, N, C, training, ranks](const float* g) {
    const float* pgam = gamma.defined() ? gamma.data() : nullptr;
    if (training) {
      kernels::batch_norm_backward(grad_ptr(x), grad_ptr(gamma), grad_ptr(beta), g, x.data(), pgam, mean->data(),
                                   rstd->data(), N, C, ranks);
      return;
    }
    // Eval mode: the statistics are constants, so the op is an affine map per feature.
    float* dx = grad_ptr(x);
    float* dgamma = grad_ptr(gamma);
    float* dbeta = grad_ptr(beta);
    const float* xv = x.data();
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c) {
        const float gi = g[i * C + c], rs = (*rstd)[c];
        if (dx) dx[i * C + c] += gi * (pgam ? pgam[c] : 1.0f) * rs;
        if (dgamma) dgamma[c] += gi * (xv[i * C + c] - (*mean)[c]) * rs;
        if (dbeta) dbeta[c] += gi;
      }
  });
  return out;
}

Tensor power_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor running_phi, Tensor grad_ema,
                  bool training, float momentum, float eps) {
  require(x.dim() == 2,
          [&] { return fmt::format("power_norm: expects (tokens, features), got {}", shape_str(x.shape())); });
  const int64_t N = x.size(0), C = x.size(1);
  check_param(gamma, {C}, "power_norm", "weight (gamma)");
  check_param(beta, {C}, "power_norm", "bias (beta)");
  check_param(running_phi, {C}, "power_norm", "running_phi");
  check_param(grad_ema, {C}, "power_norm", "grad_ema");
  require(running_phi.defined() && grad_ema.defined(), "power_norm: needs running_phi and grad_ema");
  Tensor out = Tensor::empty(x.shape());
  auto rstd = std::make_shared<std::vector<float>>(C);
  kernels::power_norm_forward(out.data(), rstd->data(), running_phi.data(), x.data(),
                              gamma.defined() ? gamma.data() : nullptr, beta.defined() ? beta.data() : nullptr, N, C,
                              eps, training ? momentum : 0.0f);
  if (!needs_grad({&x, &gamma, &beta})) return out;
  std::vector<Tensor> inputs{x};
  if (gamma.defined()) inputs.push_back(gamma);
  if (beta.defined()) inputs.push_back(beta);
  record(out, "power_norm", inputs, [x, gamma, beta, grad_ema, rstd, N, C, training, momentum](const float* g) {
    // Training: the approximate gradient, and grad_ema moves on (once per backward of this forward).
    Tensor ema = grad_ema;
    kernels::power_norm_backward(grad_ptr(x), grad_ptr(gamma), grad_ptr(beta), training ? ema.data() : nullptr, g,
                                 x.data(), gamma.defined() ? gamma.data() : nullptr, rstd->data(), N, C, momentum);
  });
  return out;
}

Tensor dyt(const Tensor& x, const Tensor& alpha, const Tensor& gamma, const Tensor& beta) {
  require(x.dim() >= 1 && alpha.numel() == 1, "dyt: alpha must be a one-element tensor");
  const int64_t C = x.size(-1), N = C == 0 ? 0 : x.numel() / C;
  check_param(gamma, {C}, "dyt", "weight (gamma)");
  check_param(beta, {C}, "dyt", "bias (beta)");
  require(gamma.defined() && beta.defined(), "dyt: gamma and beta are required");
  Tensor out = Tensor::empty(x.shape());
  kernels::dyt_forward(out.data(), x.data(), alpha.data(), gamma.data(), beta.data(), N, C);
  if (!needs_grad({&x, &alpha, &gamma, &beta})) return out;
  record(out, "dyt", {x, alpha, gamma, beta}, [x, alpha, gamma, beta, N, C](const float* g) {
    kernels::dyt_backward(grad_ptr(x), grad_ptr(alpha), grad_ptr(gamma), grad_ptr(beta), g, x.data(), alpha.data(),
                          gamma.data(), N, C);
  });
  return out;
}

Tensor embedding(const std::vector<int32_t>& ids, const Tensor& weight) {
  require(weight.dim() == 2,
          [&] { return fmt::format("embedding: weight must be (vocab, dim), got {}", shape_str(weight.shape())); });
  const int64_t N = static_cast<int64_t>(ids.size()), V = weight.size(0), C = weight.size(1);
  Tensor out = Tensor::empty({N, C});
  auto saved_ids = std::make_shared<std::vector<int32_t>>(ids);
  kernels::embedding_forward(out.data(), saved_ids->data(), weight.data(), N, V, C);
  if (!needs_grad({&weight})) return out;
  record(out, "embedding", {weight}, [weight, saved_ids, N, V, C](const float* g) {
    kernels::embedding_backward(grad_ptr(weight), g, saved_ids->data(), N, V, C);
  });
  return out;
}

Tensor attention(const Tensor& qkv, const std::vector<int64_t>& offsets, int64_t num_heads) {
  require(qkv.dim() == 2 && qkv.size(1) % 3 == 0,
          [&] { return fmt::format("attention: qkv must be (tokens, 3*d_model), got {}", shape_str(qkv.shape())); });
  const int64_t T = qkv.size(0), C = qkv.size(1) / 3, B = static_cast<int64_t>(offsets.size()) - 1;
  require(num_heads >= 1 && C % num_heads == 0,
          [&] { return fmt::format("attention: d_model {} is not divisible by {} heads", C, num_heads); });
  check_offsets(offsets, T, "attention");
  Tensor out = Tensor::empty({T, C});
  const bool grad = needs_grad({&qkv});
  auto saved_offsets = std::make_shared<std::vector<int64_t>>(offsets);
  // The forward writes every float of its cache: not zero-filled first (Storage), so each thread's
  // first touch of its part is its own write, not a line the main thread just zeroed.
  auto att = std::make_shared<Storage>(grad ? kernels::attention_cache_size(saved_offsets->data(), B, num_heads) : 0);
  kernels::attention_forward(out.data(), grad ? att->data() : nullptr, qkv.data(), saved_offsets->data(), B, C,
                             num_heads);
  if (!grad) return out;
  record(out, "attention", {qkv}, [qkv, saved_offsets, att, B, C, num_heads](const float* g) {
    kernels::attention_backward(grad_outs<1>({&qkv})[0], g, qkv.data(), att->data(), saved_offsets->data(), B, C,
                                num_heads);
  });
  return out;
}

Tensor softmax(const Tensor& x) {
  require(x.dim() >= 1, "softmax: needs at least one dimension");
  const int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::empty(x.shape());
  kernels::softmax_forward(out.data(), x.data(), rows, cols);
  if (!needs_grad({&x})) return out;
  Tensor y = out.detach();
  record(out, "softmax", {x},
         [x, y, rows, cols](const float* g) { kernels::softmax_backward(grad_ptr(x), g, y.data(), rows, cols); });
  return out;
}

Tensor mean_pool(const Tensor& x, const std::vector<int64_t>& offsets) {
  require(x.dim() == 2,
          [&] { return fmt::format("mean_pool: expects (tokens, features), got {}", shape_str(x.shape())); });
  const int64_t T = x.size(0), C = x.size(1), B = static_cast<int64_t>(offsets.size()) - 1;
  check_offsets(offsets, T, "mean_pool");
  Tensor out = Tensor::zeros({B, C});
  const float* xv = x.data();
  float* y = out.data();
  parallel_for(B, T * C > kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t len = offsets[b + 1] - offsets[b];
      if (len == 0) continue;
      for (int64_t t = offsets[b]; t < offsets[b + 1]; ++t)
        for (int64_t c = 0; c < C; ++c) y[b * C + c] += xv[t * C + c];
      for (int64_t c = 0; c < C; ++c) y[b * C + c] /= static_cast<float>(len);
    }
  });
  if (!needs_grad({&x})) return out;
  auto saved = std::make_shared<std::vector<int64_t>>(offsets);
  record(out, "mean_pool", {x}, [x, saved, B, C, T](const float* g) {
    float* dx = grad_ptr(x);
    const auto& off = *saved;
    parallel_for(B, T * C > kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t len = off[b + 1] - off[b];
        if (len == 0) continue;
        const float scale = 1.0f / static_cast<float>(len);
        for (int64_t t = off[b]; t < off[b + 1]; ++t)
          for (int64_t c = 0; c < C; ++c) dx[t * C + c] += g[b * C + c] * scale;
      }
    });
  });
  return out;
}

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets) {
  require(logits.dim() == 2 && logits.size(0) == static_cast<int64_t>(targets.size()), [&] {
    return fmt::format("cross_entropy: logits {} and {} targets do not match", shape_str(logits.shape()),
                       targets.size());
  });
  const int64_t N = logits.size(0), V = logits.size(1);
  for (int32_t t : targets)
    require(t == -1 || (t >= 0 && t < V),
            [&] { return fmt::format("cross_entropy: target {} out of range [0, {})", t, V); });
  auto probs = std::make_shared<std::vector<float>>(static_cast<size_t>(N * V));
  std::vector<float> losses(static_cast<size_t>(N));
  auto saved_targets = std::make_shared<std::vector<int32_t>>(targets);
  const float loss =
      kernels::cross_entropy_forward(losses.data(), probs->data(), logits.data(), saved_targets->data(), N, V);
  Tensor out = Tensor::scalar(loss);
  if (!needs_grad({&logits})) return out;
  record(out, "cross_entropy", {logits}, [logits, probs, saved_targets, N, V](const float* g) {
    kernels::cross_entropy_backward(grad_ptr(logits), probs->data(), saved_targets->data(), N, V, g[0]);
  });
  return out;
}

Tensor z_loss(const Tensor& logits, const std::vector<int32_t>& targets) {
  require(logits.dim() == 2 && logits.size(0) == static_cast<int64_t>(targets.size()), [&] {
    return fmt::format("z_loss: logits {} and {} targets do not match", shape_str(logits.shape()), targets.size());
  });
  const int64_t N = logits.size(0), V = logits.size(1);
  // Per row: log Z as the cross-entropy kernel computes it (max + log of a double sum of our exp),
  // and softmax (N, V) for the backward. Plain loops: O(N V), a small part of a step.
  auto probs = std::make_shared<std::vector<float>>(static_cast<size_t>(N * V));
  auto log_z = std::make_shared<std::vector<double>>(static_cast<size_t>(N));
  const float* z = logits.data();
  int64_t count = 0;
  double sum_sq = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float* row = z + n * V;
    float* p = probs->data() + n * V;
    float maxval = -INFINITY;
    for (int64_t v = 0; v < V; ++v) maxval = std::max(maxval, row[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      p[v] = math::exp(row[v] - maxval);
      sum += p[v];
    }
    const float inv = float(1.0 / sum);
    for (int64_t v = 0; v < V; ++v) p[v] *= inv;
    (*log_z)[size_t(n)] = double(maxval) + std::log(sum);
    if (targets[size_t(n)] == -1) continue;
    ++count;
    sum_sq += (*log_z)[size_t(n)] * (*log_z)[size_t(n)];
  }
  Tensor out = Tensor::scalar(count ? float(sum_sq / double(count)) : 0.0f);
  if (!needs_grad({&logits}) || count == 0) return out;
  auto saved_targets = std::make_shared<std::vector<int32_t>>(targets);
  record(out, "z_loss", {logits}, [logits, probs, log_z, saved_targets, N, V, count](const float* g) {
    float* dz = grad_ptr(logits);
    for (int64_t n = 0; n < N; ++n) {
      if ((*saved_targets)[size_t(n)] == -1) continue;
      const float scale = float(2.0 * (*log_z)[size_t(n)] * double(g[0]) / double(count));
      const float* p = probs->data() + n * V;
      for (int64_t v = 0; v < V; ++v) dz[n * V + v] += scale * p[v];
    }
  });
  return out;
}

Tensor dropout(const Tensor& x, const std::vector<int64_t>& offsets, float p, uint64_t key, int64_t first_sequence,
               bool training) {
  require(p >= 0.0f && p < 1.0f, [&] { return fmt::format("dropout: p must be in [0, 1), got {}", p); });
  if (!training || p == 0.0f) return x;
  require(x.dim() == 2, [&] { return fmt::format("dropout: x must be (T, C), got {}", shape_str(x.shape())); });
  check_offsets(offsets, x.size(0), "dropout");
  const int64_t n = x.numel(), B = int64_t(offsets.size()) - 1;
  Tensor out = Tensor::empty(x.shape());
  auto mask = std::make_shared<std::vector<float>>(static_cast<size_t>(n));
  kernels::dropout_forward(out.data(), mask->data(), x.data(), offsets.data(), B, x.size(1), p, key, first_sequence);
  if (!needs_grad({&x})) return out;
  record(out, "dropout", {x},
         [x, mask, n](const float* g) { kernels::dropout_backward(grad_ptr(x), g, mask->data(), n); });
  return out;
}

}  // namespace normlab::ops
