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
//   layers.N.self_attn.q_norm.weight/.bias, .k_norm.weight/.bias (head_dim): qk-norm, as in timm's
//   Attention (model.qk_norm; RMSNorm has no bias)
// plus, for the full model: embedding.weight, pos_embedding.weight (learned positions), head.weight/.bias,
// and the residual scheme's (nn/residual_registry.hpp): layers.N.resweight for ReZero, layers.N.gamma_1 /
// gamma_2 for LayerScale; layers.N.normK.alpha for DyT.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "normlab/nn/layers.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/nn/residual_registry.hpp"
#include "normlab/rng.hpp"

namespace normlab::nn {

enum class Placement { post, pre };  // post: x = norm(x + f(x)); pre: x = x + f(norm(x))
// model.placement's spellings, in config order.
inline constexpr std::pair<Placement, const char*> kPlacementNames[] = {{Placement::pre, "pre"},
                                                                        {Placement::post, "post"}};
std::string to_string(Placement placement);
// The residual block an encoder of this norm, placement and residual scheme runs, as a formula for
// logs and reports: "x = x + f(LN(x)) (pre-norm, final LN after the stack)", "x = LN(x + f(x))
// (post-norm)", "x = x + alpha * f(x) (ReZero, alpha = 0 at init; no normalization)".
std::string block_formula(const NormKind& norm, Placement placement, bool final_norm,
                          const ResidualKind& residual = "plain");
// model.qk_norm: a norm on each head's queries and keys before their dot product (Dehghani et al.
// 2023; Wortsman et al. 2023), over the head's head_dim features, with its own gamma (and beta) of
// shape (head_dim) for q and for k in every layer. Independent of model.norm and the placement.
enum class QkNorm { none, layernorm, rmsnorm };
inline constexpr std::pair<QkNorm, const char*> kQkNormNames[] = {{QkNorm::none, "none"},
                                                                  {QkNorm::layernorm, "layernorm"},
                                                                  {QkNorm::rmsnorm, "rmsnorm"}};
std::string to_string(QkNorm qk_norm);
enum class Activation { relu, gelu };
// model.activation's spellings, in config order.
inline constexpr std::pair<Activation, const char*> kActivationNames[] = {{Activation::relu, "relu"},
                                                                          {Activation::gelu, "gelu"}};
enum class Positional { sinusoidal, learned };
// model.positional's spellings, in config order.
inline constexpr std::pair<Positional, const char*> kPositionalNames[] = {{Positional::sinusoidal, "sinusoidal"},
                                                                          {Positional::learned, "learned"}};
enum class Head { token, sequence };  // per-token classifier, or mean-pooled sequence classifier

struct EncoderOptions {
  int64_t d_model = 64;
  int64_t num_heads = 4;
  int64_t num_layers = 2;
  int64_t dim_feedforward = 256;
  float dropout = 0.0f;
  Activation activation = Activation::relu;
  NormKind norm = "layernorm";
  Placement placement = Placement::pre;
  ResidualKind residual = "plain";  // how each sublayer's output is added back (nn/residual_registry.hpp)
  float norm_eps = 1e-12f;
  bool final_norm = true;         // pre placement: a norm after the last block (as in GPT-2 / pre-LN papers)
  QkNorm qk_norm = QkNorm::none;  // its eps is norm_eps
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
  std::vector<double> residual_rms;     // after each block: sqrt(mean over real tokens and features of x^2)
  std::vector<double> residual_sum_sq;  // after each block: the sum of x^2 behind that mean
  int64_t residual_values = 0;          // the count behind it: tokens * d_model
  // Each layer's attention input (T, 3 d_model) as the attention kernel sees it (after qk-norm): the
  // queries and keys whose logits attention_statistics (nn/diagnostics.hpp) recomputes.
  std::vector<Tensor> attention_qkv;
};

// Which dropout masks a training forward draws. Every element's mask is a pure function of the
// model seed, `step`, the call site and the element's global sequence, position and feature
// (kernels/dropout.hpp), where the batch's sequence b is sequence first_sequence + b of the global
// batch. So a sequence's mask does not depend on the other sequences of its batch, and a
// data-parallel rank holding sequences [s0, s1) of the global batch (first_sequence = s0) draws
// exactly what one process draws for them.
struct DropoutStep {
  uint64_t step = 0;  // the trainer's update number
  int64_t first_sequence = 0;
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t d_model, int64_t num_heads, Rng& rng, QkNorm qk_norm = QkNorm::none, float eps = 1e-12f);
  // (T, d) -> (T, d): out_proj(attend(x)). qkv, when given, receives the attention's input (T, 3d)
  // after qk-norm.
  Tensor forward(const Tensor& x, const std::vector<int64_t>& offsets, Tensor* qkv = nullptr) const;
  // (T, d) -> (T, d): every head's output side by side, before out_proj (which the encoder layer
  // may fuse with its residual sum, ResidualScheme::add_linear).
  Tensor attend(const Tensor& x, const std::vector<int64_t>& offsets, Tensor* qkv = nullptr) const;
  int64_t num_heads;
  Tensor in_proj_weight, in_proj_bias;
  Linear out_proj;
  std::unique_ptr<NormLayer> q_norm, k_norm;  // over head_dim; null for qk_norm none
};

class EncoderLayer : public Module {
 public:
  EncoderLayer(const EncoderOptions& options, Rng& rng);
  // dropout_key names this layer in this step (kernels::dropout_key); its three dropout calls use
  // splitmix64(dropout_key, k): k = 0 after attention, 1 inside the FFN, 2 after the FFN.
  // attention_qkv, when given, receives the attention's input (Diagnostics::attention_qkv).
  Tensor forward(const Tensor& x, const std::vector<int64_t>& offsets, uint64_t dropout_key, int64_t first_sequence,
                 Tensor* attention_qkv = nullptr);
  EncoderOptions options;
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  std::unique_ptr<ResidualScheme> residual;  // x + f(x), ReZero, LayerScale, ...
  std::unique_ptr<NormLayer> norm1, norm2;   // null for norm "none"

 private:
  // The feed-forward block up to linear2: dropout(activation(linear1(x))), (T, d) -> (T, ffn).
  Tensor feed_forward_hidden(const Tensor& x, const std::vector<int64_t>& offsets, uint64_t dropout_key,
                             int64_t first_sequence) const;
};

// The stack: layers.N and the final norm (pre placement only), like torch.nn.TransformerEncoder.
class TransformerEncoder : public Module {
 public:
  // Weights are drawn from Rng(seed, stream 1); dropout masks are keyed on the seed (DropoutStep).
  TransformerEncoder(const EncoderOptions& options, uint64_t seed);
  // Layer l's dropout key is kernels::dropout_key(dropout_seed, dropout.step, l).
  Tensor forward(const Tensor& x, const std::vector<int64_t>& offsets, Diagnostics* diagnostics = nullptr,
                 const DropoutStep& dropout = {});
  EncoderOptions options;
  std::vector<std::unique_ptr<EncoderLayer>> layers;
  std::unique_ptr<NormLayer> norm;  // final norm of a pre-norm stack; null otherwise
  uint64_t dropout_seed;
};

// Token embedding + positions + encoder + classification head. The encoder's parameters keep
// their top-level PyTorch names (layers.N..., norm...), as in a checkpoint of the encoder alone.
class EncoderModel : public Module {
 public:
  explicit EncoderModel(const ModelOptions& options);
  // tokens (T) with offsets (B+1) -> logits (T, classes) for a token head, (B, classes) for a
  // sequence head. `dropout` says which masks a training forward draws.
  Tensor forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets,
                 Diagnostics* diagnostics = nullptr, const DropoutStep& dropout = {});
  // data-parallel sync BatchNorm: every BatchNorm layer's training statistics summed through
  // `ranks` (kernels/batch_norm.hpp); nullptr: this process's tokens. No effect on other norms.
  void sum_batch_norm_statistics(kernels::RankSum* ranks);
  ModelOptions model_options;
  TransformerEncoder encoder;

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

}  // namespace normlab::nn
