#include "normlab/nn/encoder.hpp"

#include <fmt/format.h>

#include <cmath>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/names.hpp"
#include "normlab/nn/diagnostics.hpp"
#include "normlab/kernels/dropout.hpp"
#include "normlab/ops.hpp"

namespace normlab::nn {

// ---------------------------------------------------------------- attention
MultiheadAttention::MultiheadAttention(int64_t d_model, int64_t heads, Rng& rng, QkNorm qk_norm, float eps)
    : num_heads(heads), out_proj(d_model, d_model, true, rng) {
  // torch.nn.MultiheadAttention: xavier_uniform on the packed (3d, d) projection, zero biases.
  const float bound = std::sqrt(6.0f / static_cast<float>(d_model + 3 * d_model));
  in_proj_weight = register_parameter("in_proj_weight", Tensor::uniform({3 * d_model, d_model}, rng, -bound, bound));
  in_proj_bias = register_parameter("in_proj_bias", Tensor::zeros({3 * d_model}));
  std::fill(out_proj.bias.data(), out_proj.bias.data() + d_model, 0.0f);
  register_module("out_proj", out_proj);
  // qk-norm's gammas start at 1 and betas at 0: no draw from rng, so the other weights stay the same.
  const int64_t head_dim = d_model / heads;
  if (qk_norm == QkNorm::layernorm) {
    q_norm = std::make_unique<LayerNorm>(Shape{head_dim}, eps);
    k_norm = std::make_unique<LayerNorm>(Shape{head_dim}, eps);
  } else if (qk_norm == QkNorm::rmsnorm) {
    q_norm = std::make_unique<RMSNorm>(head_dim, eps);
    k_norm = std::make_unique<RMSNorm>(head_dim, eps);
  }
  if (q_norm) {
    register_module("q_norm", *q_norm);
    register_module("k_norm", *k_norm);
  }
}

Tensor MultiheadAttention::forward(const Tensor& x, const std::vector<int64_t>& offsets, Tensor* qkv_out) const {
  return out_proj.forward(attend(x, offsets, qkv_out));  // (T, d)
}

Tensor MultiheadAttention::attend(const Tensor& x, const std::vector<int64_t>& offsets, Tensor* qkv_out) const {
  Tensor qkv = ops::linear(x, in_proj_weight, in_proj_bias);  // (T, 3d): queries, keys, values
  if (q_norm) {
    // Each head's queries (keys) are a row of the (T * heads, head_dim) view of the (T, d) third:
    // the norm over rows of that view is the norm over each head's features.
    const int64_t T = qkv.size(0), d = qkv.size(1) / 3, head_dim = d / num_heads;
    auto per_head = [&](NormLayer& norm, int64_t first_column) {
      Tensor rows = ops::reshape(ops::narrow_columns(qkv, first_column, d), {T * num_heads, head_dim});
      return ops::reshape(norm.forward(rows), {T, d});
    };
    qkv = ops::cat_columns({per_head(*q_norm, 0), per_head(*k_norm, d), ops::narrow_columns(qkv, 2 * d, d)});
  }
  if (qkv_out) *qkv_out = qkv;
  return ops::attention(qkv, offsets, num_heads);  // (T, d), each sequence on its own
}

// ---------------------------------------------------------------- one block
EncoderLayer::EncoderLayer(const EncoderOptions& opts, Rng& rng)
    : options(opts), self_attn(opts.d_model, opts.num_heads, rng, opts.qk_norm, opts.norm_eps),
      linear1(opts.d_model, opts.dim_feedforward, true, rng), linear2(opts.dim_feedforward, opts.d_model, true, rng) {
  // The scheme first: its tensors (layers.N.resweight) come before the sublayers' in the state_dict.
  residual = opts.residual.spec().make(opts.d_model);
  register_module("", *residual);
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("linear2", linear2);
  if (has_norm_layer(opts.norm)) {
    norm1 = make_norm(opts.norm, opts.d_model, opts.norm_eps);
    norm2 = make_norm(opts.norm, opts.d_model, opts.norm_eps);
    register_module("norm1", *norm1);
    register_module("norm2", *norm2);
  }
}

Tensor EncoderLayer::feed_forward_hidden(const Tensor& x, const std::vector<int64_t>& offsets, uint64_t dropout_key,
                                         int64_t first_sequence) const {
  // ReLU is fused into the first linear layer (the GEMM applies it as it stores: one pass over the
  // (tokens, ffn) activations fewer, and no pre-activation kept); the same numbers as
  // ops::relu(linear1.forward(x)).
  Tensor h = options.activation == Activation::gelu ? ops::gelu(linear1.forward(x))
                                                    : ops::linear_relu(x, linear1.weight, linear1.bias);
  return ops::dropout(h, offsets, options.dropout, kernels::splitmix64(dropout_key, 1), first_sequence,
                      is_training());  // (T, ffn)
}

Tensor EncoderLayer::forward(const Tensor& x, const std::vector<int64_t>& offsets, uint64_t dropout_key,
                             int64_t first_sequence, Tensor* attention_qkv) {
  const bool train = is_training();
  // The residual scheme adds each sublayer's output f back: x + f, x + alpha * f, ...
  // (nn/residual_registry.hpp). Each f is dropout(last(hidden)), last the sublayer's final Linear;
  // with dropout off (evaluation, or p = 0) f is last(hidden) itself, and the scheme gets the
  // Linear to compute the sum with (add_linear: the plain x + f fuses it into the Linear's GEMM).
  // sublayer 0 is attention (dropout site 0), 1 the feed-forward block (site 2).
  auto sum = [&](const Tensor& x_in, const Linear& last, const Tensor& hidden, int sublayer) {
    if (!train || options.dropout == 0.0f) return residual->add_linear(x_in, last, hidden, sublayer);
    const uint64_t site = sublayer == 0 ? 0 : 2;
    Tensor f = ops::dropout(last.forward(hidden), offsets, options.dropout, kernels::splitmix64(dropout_key, site),
                            first_sequence, train);
    return residual->add(x_in, f, sublayer);
  };
  // x + attn(t), x + ffn(t): t is x, or norm(x) for pre placement.
  auto attn_sum = [&](const Tensor& x_in, const Tensor& t) {
    return sum(x_in, self_attn.out_proj, self_attn.attend(t, offsets, attention_qkv), 0);
  };
  auto ffn_sum = [&](const Tensor& x_in, const Tensor& t) {
    return sum(x_in, linear2, feed_forward_hidden(t, offsets, dropout_key, first_sequence), 1);
  };

  if (!norm1) {  // no norm layer: nothing but the scheme keeps the stream's scale in check
    Tensor h = attn_sum(x, x);
    return ffn_sum(h, h);
  }
  if (options.placement == Placement::post) {  // original Transformer: normalize the sum
    Tensor h = norm1->forward(attn_sum(x, x));
    return norm2->forward(ffn_sum(h, h));
  }
  // pre: normalize the sublayer's input; the residual path itself is never normalized
  Tensor h = attn_sum(x, norm1->forward(x));
  return ffn_sum(h, norm2->forward(h));
}

// ---------------------------------------------------------------- the stack
TransformerEncoder::TransformerEncoder(const EncoderOptions& opts, uint64_t seed) : options(opts), dropout_seed(seed) {
  if (opts.d_model < 1 || opts.num_heads < 1 || opts.d_model % opts.num_heads != 0)
    throw UsageError(
        fmt::format("d_model {} must be a positive multiple of num_heads {}", opts.d_model, opts.num_heads));
  Rng rng(seed, 1);
  for (int64_t i = 0; i < opts.num_layers; ++i) {
    layers.push_back(std::make_unique<EncoderLayer>(opts, rng));
    register_module(fmt::format("layers.{}", i), *layers.back());
  }
  if (opts.placement == Placement::pre && opts.final_norm && has_norm_layer(opts.norm)) {
    norm = make_norm(opts.norm, opts.d_model, opts.norm_eps);
    register_module("norm", *norm);
  }
}

Tensor TransformerEncoder::forward(const Tensor& x, const std::vector<int64_t>& offsets, Diagnostics* diagnostics,
                                   const DropoutStep& dropout) {
  Tensor h = x;
  if (diagnostics) *diagnostics = Diagnostics{};
  std::vector<Tensor> outputs;  // diagnostics: each block's output, summed once the stack is done
  for (size_t l = 0; l < layers.size(); ++l) {
    Tensor* qkv = nullptr;
    if (diagnostics) qkv = &diagnostics->attention_qkv.emplace_back();
    h = layers[l]->forward(h, offsets, kernels::dropout_key(dropout_seed, dropout.step, l), dropout.first_sequence,
                           qkv);
    if (diagnostics) outputs.push_back(h);
  }
  if (diagnostics) {
    std::vector<Segments> values;
    for (const Tensor& y : outputs) values.push_back({{y.data(), size_t(y.numel())}});
    diagnostics->residual_sum_sq = serial_sums_of_squares(values);
    diagnostics->residual_values = outputs.empty() ? 0 : h.numel();
    for (double sum_sq : diagnostics->residual_sum_sq)
      diagnostics->residual_rms.push_back(h.numel() ? std::sqrt(sum_sq / double(h.numel())) : 0.0);
  }
  if (norm) h = norm->forward(h);
  return h;
}

// ---------------------------------------------------------------- the model
EncoderModel::EncoderModel(const ModelOptions& opts)
    : model_options(opts), encoder(opts.encoder, opts.seed), init_rng_(opts.seed, 2),
      embedding(opts.vocab_size, opts.encoder.d_model, init_rng_),
      head(opts.encoder.d_model, opts.num_classes, true, init_rng_) {
  register_module("", encoder);
  register_module("embedding", embedding);
  if (opts.positional == Positional::learned) {
    pos_embedding.emplace(opts.max_len, opts.encoder.d_model, init_rng_);
    register_module("pos_embedding", *pos_embedding);
  } else {
    pos_table = sinusoidal_table(opts.max_len, opts.encoder.d_model);
  }
  register_module("head", head);
}

Tensor EncoderModel::forward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets,
                             Diagnostics* diagnostics, const DropoutStep& dropout) {
  const int64_t T = static_cast<int64_t>(tokens.size()), d = model_options.encoder.d_model;
  if (offsets.size() < 2 || offsets.front() != 0 || offsets.back() != T)
    throw UsageError("EncoderModel::forward: offsets must start at 0 and end at the number of tokens");
  // Position of each token inside its own sequence.
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    if (offsets[b + 1] - offsets[b] > model_options.max_len)
      throw UsageError(fmt::format("sequence of length {} exceeds model.max_len {}", offsets[b + 1] - offsets[b],
                                   model_options.max_len));
    for (int64_t t = offsets[b]; t < offsets[b + 1]; ++t) positions[size_t(t)] = int32_t(t - offsets[b]);
  }
  Tensor x = embedding.forward(tokens);  // (T, d)
  if (pos_embedding) {
    x = ops::add(x, pos_embedding->forward(positions));
  } else {
    Tensor pe = Tensor::empty({T, d});
    for (int64_t t = 0; t < T; ++t) std::copy_n(pos_table.data() + positions[size_t(t)] * d, d, pe.data() + t * d);
    x = ops::add(x, pe);
  }
  Tensor h = encoder.forward(x, offsets, diagnostics, dropout);              // (T, d)
  if (model_options.head == Head::sequence) h = ops::mean_pool(h, offsets);  // (B, d)
  return head.forward(h);
}

// ---------------------------------------------------------------- diagnostics
void EncoderModel::sum_batch_norm_statistics(kernels::RankSum* ranks) {
  auto route = [ranks](NormLayer* norm) {
    if (auto* batch_norm = dynamic_cast<BatchNorm*>(norm)) batch_norm->ranks = ranks;
  };
  for (auto& layer : encoder.layers) route(layer->norm1.get()), route(layer->norm2.get());
  route(encoder.norm.get());
}

std::vector<double> per_layer_grad_norms(const Module& model, int64_t num_layers) {
  // Each layer's gradients in named_parameters order, one sum of squares per layer (the layers'
  // sums advanced together).
  std::vector<Segments> layers(static_cast<size_t>(num_layers));
  for (const auto& [name, t] : model.named_parameters()) {
    const int64_t layer = block_index(name, num_layers);
    if (layer < 0 || !t.has_grad()) continue;
    layers[size_t(layer)].emplace_back(t.grad_data(), size_t(t.numel()));
  }
  std::vector<double> norms = serial_sums_of_squares(layers);
  for (double& v : norms) v = std::sqrt(v);
  return norms;
}

std::string to_string(Placement placement) { return name_in(kPlacementNames, placement); }
std::string to_string(QkNorm qk_norm) { return name_in(kQkNormNames, qk_norm); }

std::string block_formula(const NormKind& norm, Placement placement, bool final_norm, const ResidualKind& residual) {
  const ResidualSpec& scheme = residual.spec();
  auto sum = [&](const std::string& f) { return fmt::format(fmt::runtime(scheme.sum), f); };
  const std::string note = scheme.note.empty() ? "" : "; " + scheme.note;
  if (!has_norm_layer(norm))
    return fmt::format("x = {} ({}no normalization)", sum("f(x)"), scheme.note.empty() ? "" : scheme.note + "; ");
  const std::string& n = norm.spec().symbol;
  if (placement == Placement::post) return fmt::format("x = {}({}) (post-norm{})", n, sum("f(x)"), note);
  return fmt::format("x = {} (pre-norm{}{})", sum(fmt::format("f({}(x))", n)),
                     final_norm ? fmt::format(", final {} after the stack", n) : "", note);
}

}  // namespace normlab::nn
