#pragma once
// A Transformer encoder on packed variable-length batches, with switchable normalization.
//
// Packed: a batch of B sequences is one (T, d_model) matrix, T = total real tokens, plus
// offsets (B+1); sequence b owns rows [offsets[b], offsets[b+1]). Token-wise layers run on the whole
// matrix; attention runs per sequence. There is no padding, so padding cannot leak into a token.
//
// Parameter names follow torch.nn.TransformerEncoder / TransformerEncoderLayer:
//   layers.N.self_attn.in_proj_weight (3d, d)   layers.N.self_attn.in_proj_bias (3d)
//   layers.N.self_attn.out_proj.weight (d, d)   layers.N.self_attn.out_proj.bias (d)
//   layers.N.linear1.weight (ffn, d) .bias      layers.N.linear2.weight (d, ffn) .bias
//   layers.N.norm1.weight/.bias                 layers.N.norm2.weight/.bias
//   norm.weight/.bias (final norm of a pre-norm stack)
// plus, for the full model: embedding.weight, pos_embedding.weight (learned positions), head.weight/.bias,
// and layers.N.resweight for ReZero, layers.N.normK.alpha for DyT.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "normlab/nn/layers.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/rng.hpp"

namespace normlab::nn {

enum class Placement { post, pre };  // post: x = norm(x + f(x)); pre: x = x + f(norm(x))
enum class Activation { relu, gelu };
enum class Positional { sinusoidal, learned };
enum class Head { token, sequence };  // per-token classifier, or mean-pooled sequence classifier

struct EncoderOptions {
  int64_t d_model = 64;
  int64_t num_heads = 4;
  int64_t num_layers = 2;
  int64_t dim_feedforward = 256;
  float dropout = 0.0f;
  Activation activation = Activation::relu;
  NormKind norm = NormKind::layernorm;
  Placement placement = Placement::pre;
  float norm_eps = 1e-12f;
  bool final_norm = true;  // pre placement: a norm after the last block (as in GPT-2 / pre-LN papers)
};

struct ModelOptions {
  EncoderOptions encoder;
  int64_t vocab_size = 32;
  int64_t num_classes = 32;
  int64_t max_len = 512;  // positions available (learned table size; sinusoidal bound)
  Positional positional = Positional::sinusoidal;
  Head head = Head::token;
  uint64_t seed = 0;
};

// What normalization does to the residual stream, recorded when asked.
struct Diagnostics {
  std::vector<double> residual_rms;  // after each block: sqrt(mean over real tokens and features of x^2)
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t d_model, int64_t num_heads, Rng& rng);
  Tensor forward(const Tensor& x, const std::vector<int64_t>& offsets) const;  // (T, d) -> (T, d)
  int64_t num_heads;
  Tensor in_proj_weight, in_proj_bias;
  Linear out_proj;
};

class EncoderLayer : public Module {
 public:
  EncoderLayer(const EncoderOptions& options, Rng& rng);
  Tensor forward(const Tensor& x, const std::vector<int64_t>& offsets, Rng& dropout_rng);
  EncoderOptions options;
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  std::unique_ptr<NormLayer> norm1, norm2;  // null for rezero / none
  Tensor resweight;                         // ReZero's alpha, init 0; undefined otherwise

 private:
  Tensor feed_forward(const Tensor& x, Rng& dropout_rng) const;
};

// The stack: layers.N and the final norm (pre placement only), like torch.nn.TransformerEncoder.
class TransformerEncoder : public Module {
 public:
  // Weights are drawn from Rng(seed, stream 1); dropout masks from Rng(seed, stream 3).
  TransformerEncoder(const EncoderOptions& options, uint64_t seed);
  Tensor forward(const Tensor& x, const std::vector<int64_t>& offsets, Diagnostics* diagnostics = nullptr);
  EncoderOptions options;
  std::vector<std::unique_ptr<EncoderLayer>> layers;
  std::unique_ptr<NormLayer> norm;  // final norm of a pre-norm stack; null otherwise
  Rng dropout_rng;
};

// Token embedding + positions + encoder + classification head. The encoder's parameters keep
// their top-level PyTorch names (layers.N..., norm...), as in a checkpoint of the encoder alone.
class EncoderModel : public Module {
 public:
  explicit EncoderModel(const ModelOptions& options);
  // tokens (T) with offsets (B+1) -> logits (T, classes) for a token head, (B, classes) for a
  // sequence head.
  Tensor forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets,
                 Diagnostics* diagnostics = nullptr);
  ModelOptions model_options;
  TransformerEncoder encoder;
  Rng& dropout_rng = encoder.dropout_rng;  // the dropout stream a checkpoint saves and restores

 private:
  Rng init_rng_;  // stream 2 of the seed: embeddings and head

 public:
  Embedding embedding;
  std::optional<Embedding> pos_embedding;  // learned positions
  std::vector<float> pos_table;            // sinusoidal positions (max_len, d_model)
  Linear head;
};

// Gradient L2 norm of each block's parameters ("layers.N."), in layer order; call after backward.
std::vector<double> per_layer_grad_norms(const Module& model, int64_t num_layers);
// L2 norm of all gradients.
double global_grad_norm(const Module& model);

}  // namespace normlab::nn
