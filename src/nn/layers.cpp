#include "normlab/nn/layers.hpp"

#include <cmath>

#include "normlab/ops.hpp"

namespace normlab::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Rng& rng) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  weight = register_parameter("weight", Tensor::uniform({out_features, in_features}, rng, -bound, bound));
  if (with_bias) bias = register_parameter("bias", Tensor::uniform({out_features}, rng, -bound, bound));
}

Tensor Linear::forward(const Tensor& x) const { return ops::linear(x, weight, bias); }

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Rng& rng) {
  weight = register_parameter("weight", Tensor::normal({num_embeddings, dim}, rng));
}

Tensor Embedding::forward(const std::vector<int32_t>& ids) const { return ops::embedding(ids, weight); }

std::vector<float> sinusoidal_table(int64_t max_len, int64_t dim) {
  std::vector<float> table(static_cast<size_t>(max_len * dim));
  for (int64_t pos = 0; pos < max_len; ++pos)
    for (int64_t i = 0; i < dim; i += 2) {
      const double angle = double(pos) / std::pow(10000.0, double(i) / double(dim));
      table[size_t(pos * dim + i)] = float(std::sin(angle));
      if (i + 1 < dim) table[size_t(pos * dim + i + 1)] = float(std::cos(angle));
    }
  return table;
}

}  // namespace normlab::nn
