#pragma once
// Differentiable ops: each one runs a forward kernel, and if any input requires a gradient it
// records a node whose backward calls the matching backward kernel (autograd.hpp). Shapes follow
// PyTorch's conventions; mismatches throw UsageError naming the op and both shapes. Each section
// below is defined in the file of src/ops/ it names.
#include <cstdint>
#include <vector>

#include "normlab/tensor.hpp"

namespace normlab::kernels {
class RankSum;  // kernels/batch_norm.hpp
}

namespace normlab::ops {

// ---- elementwise, with NumPy/PyTorch broadcasting (dims aligned from the right, size 1 stretches)
// (elementwise.cpp)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& a, float s);
Tensor mul_scalar(const Tensor& a, float s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a);  // exact: 0.5 x (1 + erf(x / sqrt 2)), PyTorch's default
Tensor square(const Tensor& a);
Shape broadcast_shapes(const Shape& a, const Shape& b);

// ---- reductions (reductions.cpp)
Tensor sum(const Tensor& a);   // all elements -> shape []
Tensor mean(const Tensor& a);  // all elements -> shape []
// Over the last `ndims` dims: [..., d1..dk] -> [...] or [..., 1..1] with keepdim.
Tensor sum_trailing(const Tensor& a, int64_t ndims, bool keepdim = false);
Tensor mean_trailing(const Tensor& a, int64_t ndims, bool keepdim = false);

// ---- shape (shape.cpp)
Tensor reshape(const Tensor& a, const Shape& shape);  // a view: shares storage; one dim may be -1
// Columns [start, start + length) of a (rows, cols) matrix -> (rows, length): a copy, like
// torch.narrow(a, 1, start, length).contiguous(). The attention's query/key/value thirds of qkv.
Tensor narrow_columns(const Tensor& a, int64_t start, int64_t length);
// (rows, cols_i) matrices side by side -> (rows, sum of cols_i), like torch.cat(parts, dim=1).
Tensor cat_columns(const std::vector<Tensor>& parts);

// ---- linear algebra on our GEMM, kernels/matmul.hpp (linear.cpp)
Tensor matmul(const Tensor& a, const Tensor& b);  // a (..., K) @ b (K, N) -> (..., N)
// x (..., C), weight (OC, C) as in torch.nn.Linear, bias (OC) or undefined -> (..., OC)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// residual + linear(x, weight, bias) in one op, residual of the output's shape (..., OC): the
// residual is added as the GEMM stores its output, one pass over it and one node fewer than
// add(residual, linear(...)), with the same bits and gradients. The encoder's residual sum x + f
// uses it where f ends in a Linear (nn::ResidualScheme::add_linear).
Tensor linear_add(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual);
// relu(linear(x, weight, bias)) in one op: the ReLU is applied as the GEMM stores its output, and
// the pre-activation is never kept (the backward tells the active units by out > 0). The same
// bits as the two ops; the encoder's feed-forward block uses it.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- normalization, the subject of the project (normalization.cpp)
// LayerNorm over the trailing dims given by normalized_shape (like torch.nn.functional.layer_norm);
// gamma/beta have shape normalized_shape, or are undefined for elementwise_affine=false.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& gamma, const Tensor& beta,
                  float eps = 1e-12f);
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& gamma, float eps = 1e-12f);
// BatchNorm over the rows of x (N, C): statistics per feature across all N tokens of the batch.
// training: normalize with batch statistics and update the running averages in place (if defined);
// otherwise normalize with running_mean / running_var. `ranks` (data-parallel sync BatchNorm,
// kernels/batch_norm.hpp): the training statistics over every rank's tokens; nullptr: these tokens.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor running_mean, Tensor running_var,
                  bool training, float momentum, float eps, kernels::RankSum* ranks = nullptr);
// PowerNorm over the rows of x (N, C) (Shen et al. 2020, Algorithm 1): y = gamma * x / sqrt(running_phi
// + eps) + beta with the running quadratic mean per feature. training: running_phi moves towards this
// batch's mean square after normalizing, and the backward's input gradient is the paper's
// approximation through grad_ema (updated in place by the backward). Otherwise running_phi and
// grad_ema stay as they are and the backward is the exact one.
Tensor power_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor running_phi, Tensor grad_ema,
                  bool training, float momentum, float eps);
// Dynamic Tanh: gamma * tanh(alpha * x) + beta, alpha a one-element tensor, gamma/beta (C).
Tensor dyt(const Tensor& x, const Tensor& alpha, const Tensor& gamma, const Tensor& beta);

// ---- transformer pieces on packed variable-length batches (offsets: (B+1), offsets[B] = tokens)
// (transformer.cpp)
Tensor embedding(const std::vector<int32_t>& ids, const Tensor& weight);  // -> (N, C)
// qkv (T, 3C) -> (T, C): each sequence attends over its own tokens only.
Tensor attention(const Tensor& qkv, const std::vector<int64_t>& offsets, int64_t num_heads);
Tensor softmax(const Tensor& x);  // over the last dim
// Mean over each sequence's tokens: x (T, C) -> (B, C).
Tensor mean_pool(const Tensor& x, const std::vector<int64_t>& offsets);
// Inverted dropout on x (T, C), sequence b of the batch being sequence first_sequence + b of the
// global batch; identity when !training or p == 0. The mask is kernels::dropout_forward's: a pure
// function of `key`, which names this call in this step (seed, step and call site hashed together,
// see kernels::dropout_key), and of each element's global sequence, position and feature.
Tensor dropout(const Tensor& x, const std::vector<int64_t>& offsets, float p, uint64_t key, int64_t first_sequence,
               bool training);

// ---- losses (losses.cpp)
// Mean cross-entropy over targets != -1; logits (N, V), targets (N).
Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets);
// z-loss (PaLM; Wortsman et al. 2023): mean over the rows with targets != -1 (the rows the
// cross-entropy averages over) of log(Z)^2, log Z = log sum_v exp(logits[n][v]); logits (N, V),
// targets (N) -> shape []. 0 when every row is ignored. d/dlogits[n][v] = 2 log Z_n softmax_v / count.
Tensor z_loss(const Tensor& logits, const std::vector<int32_t>& targets);

}  // namespace normlab::ops
