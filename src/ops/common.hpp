#pragma once
// What every differentiable op shares (not a public interface; the ops are declared in
// include/normlab/ops.hpp and defined in the files beside this one, one file per kind of op).
// Each op is
//   1. check shapes, 2. allocate the output, 3. call the forward kernel,
//   4. if needed, record a node whose closure calls the matching backward kernel.
// Which build of a kernel runs (reference, generic, avx2, avx512) is the dispatch's business
// (kernels/dispatch.hpp), not the op's.
// The closures capture exactly what backward needs (inputs, cached statistics), never the output.
// Here: the checks that turn a bad shape into a UsageError, and the gradient buffers a backward
// writes into.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string>
#include <type_traits>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/grad_out.hpp"
#include "normlab/tensor.hpp"

namespace normlab::ops::detail {

// Below this many iterations a parallel region costs more than it saves (and a deep chain of tiny
// ops would spend its time starting threads).
inline constexpr int64_t kParallelGrain = 1 << 14;

// Gradient buffer of t if it takes part in differentiation, else null; zero-filled when new, for
// a backward that adds into it.
inline float* grad_ptr(const Tensor& t) {
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

inline void require(bool ok, const std::string& message) {
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

// rows x cols split of x for an op over the trailing dims `normalized_shape`.
inline int64_t trailing_cols(const Tensor& x, const Shape& normalized_shape, const char* op) {
  const Shape& s = x.shape();
  bool ok = !normalized_shape.empty() && normalized_shape.size() <= s.size() &&
            std::equal(normalized_shape.begin(), normalized_shape.end(), s.end() - normalized_shape.size());
  require(ok, [&] {
    return fmt::format("{}: normalized_shape {} must match the trailing dims of the input {}", op,
                       shape_str(normalized_shape), shape_str(s));
  });
  return shape_numel(normalized_shape);
}

inline void check_param(const Tensor& p, const Shape& shape, const char* op, const char* what) {
  if (!p.defined()) return;
  require(p.shape() == shape, [&] {
    return fmt::format("{}: {} has shape {}, expected {}", op, what, shape_str(p.shape()), shape_str(shape));
  });
}

inline void check_offsets(const std::vector<int64_t>& offsets, int64_t num_tokens, const char* op) {
  require(offsets.size() >= 2 && offsets.front() == 0 && offsets.back() == num_tokens, [&] {
    return fmt::format("{}: offsets must start at 0 and end at the number of tokens ({})", op, num_tokens);
  });
  for (size_t i = 1; i < offsets.size(); ++i)
    require(offsets[i] >= offsets[i - 1], [&] { return fmt::format("{}: offsets must be non-decreasing", op); });
}

}  // namespace normlab::ops::detail
