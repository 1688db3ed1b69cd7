// The Transformer pieces on packed variable-length batches (offsets (B+1), offsets[B] = tokens):
// embedding, attention over each sequence's own tokens, softmax, mean pooling and dropout.
#include "normlab/ops.hpp"

#include <fmt/format.h>
#include <memory>
#include <vector>

#include "common.hpp"
#include "normlab/autograd.hpp"
#include "normlab/kernels/attention.hpp"
#include "normlab/kernels/dropout.hpp"
#include "normlab/kernels/embedding.hpp"
#include "normlab/kernels/softmax.hpp"
#include "normlab/parallel.hpp"

namespace normlab::ops {

using namespace detail;  // the shared checks and gradient buffers (common.hpp)

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
