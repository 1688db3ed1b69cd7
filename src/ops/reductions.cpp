// Reductions: sums and means over all elements or the trailing dims.
#include "normlab/ops.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "common.hpp"
#include "normlab/autograd.hpp"
#include "normlab/parallel.hpp"

namespace normlab::ops {

using namespace detail;  // the shared checks and gradient buffers (common.hpp)

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

}  // namespace normlab::ops
