#pragma once
// Basic layers: Linear, Embedding, Dropout. Initialisation follows PyTorch so that a model built
// here starts from the same distribution as its PyTorch twin.
#include <cstdint>
#include <vector>

#include "normlab/nn/module.hpp"
#include "normlab/rng.hpp"

namespace normlab::nn {

// y = x W^T + b; weight (out, in), bias (out). Init: U(-1/sqrt(in), 1/sqrt(in)) for both, which
// is what torch.nn.Linear's kaiming_uniform(a=sqrt(5)) works out to.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, Rng& rng);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
};

// Row lookup: ids (N) -> (N, dim). Init N(0, 1) like torch.nn.Embedding.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Rng& rng);
  Tensor forward(const std::vector<int32_t>& ids) const;
  Tensor weight;
};

// Sinusoidal position table (Vaswani et al.): pe[pos, 2i] = sin(pos / 10000^(2i/d)),
// pe[pos, 2i+1] = cos(...). Not a parameter: a fixed function of the position.
std::vector<float> sinusoidal_table(int64_t max_len, int64_t dim);  // (max_len, dim)

}  // namespace normlab::nn
