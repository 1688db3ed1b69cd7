// Shape ops: a reshaped view, and the column slices and concatenations attention uses.
#include "normlab/ops.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <memory>

#include "common.hpp"
#include "normlab/autograd.hpp"
#include "normlab/parallel.hpp"

namespace normlab::ops {

using namespace detail;  // the shared checks and gradient buffers (common.hpp)

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

}  // namespace normlab::ops
