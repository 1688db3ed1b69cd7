#pragma once
// Why a run fails, measured on the step's own tensors (Wortsman et al. 2023; Zhai et al. 2023;
// Liu et al. 2020): attention-logit growth and entropy collapse per layer, the output's log Z,
// and how much one update changes each block. The trainer calls these at diagnostics steps
// (train.diagnostics_every and the first step); they read tensors and never record a graph, so
// computing them changes no bit of training. Plain loops in a fixed order, compiled once (not per
// kernel path), so every kernel path and thread count gives the same figures.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "normlab/nn/module.hpp"
#include "normlab/tensor.hpp"

namespace normlab::nn {

// One layer's attention, recomputed from its input qkv (T, 3 d_model) (Diagnostics::attention_qkv,
// queries | keys | values, each (T, d_model) of num_heads heads): for each sequence of the packed
// batch (offsets (B+1)) on its own tokens only, each head's logits s_ij = q_i . k_j / sqrt(head_dim)
// and each query's attention row p_i = softmax_j(s_ij), j over the query's own sequence: in float
// as the attention kernel computes them (exp to 3 ulp), the sums in double.
struct AttentionStatistics {
  std::vector<double> entropy_sum;  // (heads): sum over query tokens of -sum_j p_ij log p_ij (nats)
  int64_t queries = 0;              // query tokens: the count behind each head's mean entropy
  double max_abs_logit = 0.0;       // max |s_ij| over heads, sequences and pairs
};
AttentionStatistics attention_statistics(const Tensor& qkv, const std::vector<int64_t>& offsets, int64_t num_heads);

// log Z = log sum_v exp(logits[n][v]) of each row of logits (N, V): every row is a real token (or a
// sequence, for a sequence head), since a packed batch has no padding.
struct LogZStatistics {
  double sum = 0.0;  // over rows of log Z
  int64_t rows = 0;
  double max_abs = 0.0;  // max over rows of |log Z|
};
LogZStatistics log_z_statistics(const Tensor& logits);

// The block a parameter belongs to: N for a name "layers.N." with 0 <= N < num_layers, else -1
// (other names, "layers.x", an N out of range).
int64_t block_index(const std::string& name, int64_t num_layers);

// One block's values as consecutive segments (data, count): a layer's gradients, its output.
using Segments = std::vector<std::pair<const float*, size_t>>;
// sum of double(x)^2 over each block's segments in order (blocks.size()): each block one serial sum,
// as a plain loop adds it; blocks of one shape are advanced together, which changes no bit.
// Serial on purpose: this order is part of the recorded diagnostics (residual RMS, per-layer gradient
// norms); kernels::sums_of_squares adds in 8 lanes, another order, so other bits.
std::vector<double> serial_sums_of_squares(const std::vector<Segments>& blocks);

// A copy of every block parameter ("layers.N."), in named_parameters order (other parameters:
// empty), taken before an update for per_layer_update_ratios.
std::vector<std::vector<float>> block_parameter_values(const Module& model);
// ||W_after - W_before|| / ||W_before|| per block, each block's parameters taken as one vector
// (num_layers); `before` from block_parameter_values on the same model. 0 for a block whose
// parameters are all zero.
std::vector<double> per_layer_update_ratios(const Module& model, int64_t num_layers,
                                            const std::vector<std::vector<float>>& before);

}  // namespace normlab::nn
