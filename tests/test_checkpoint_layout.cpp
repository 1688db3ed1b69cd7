// The checkpoint's encoder tensors in PyTorch's layout, checked without torch: their names and
// shapes against a committed listing of torch.nn.TransformerEncoder's state_dict
// (tests/data/pytorch/, scripts/golden/state_dict_layout.py), and their meaning by running
// PyTorch's TransformerEncoderLayer arithmetic (y = x W^T + b, in_proj rows q|k|v, pre-LN) in
// float64 on the tensors read from the file's bytes, against the model that wrote them. A square
// weight saved transposed keeps its shape; only the second check sees it. (The torch loader test,
// tests/load_checkpoint_torch.sh, runs where torch is installed.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "normlab/nn/encoder.hpp"
#include "normlab/rng.hpp"
#include "normlab/tensor.hpp"
#include "normlab/train/checkpoint.hpp"
#include "support.hpp"

using nlohmann::json;
using normlab::test::read_text;
using normlab::test::relative_max_error;
using normlab::test::TempDir;
using Vec = std::vector<double>;

namespace {

struct Stored {
  std::vector<int64_t> shape;
  Vec values;
};

// A safetensors file read byte by byte here (header length, JSON header, little-endian F32 data),
// so that normlab's own reader is not what is being trusted.
std::map<std::string, Stored> read_raw(const std::string& path) {
  const std::string bytes = read_text(path);
  REQUIRE(bytes.size() > 8);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint8_t(bytes[size_t(i)]);
  const json header = json::parse(bytes.substr(8, header_size));
  std::map<std::string, Stored> out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    REQUIRE(entry["dtype"] == "F32");
    Stored stored;
    stored.shape = entry["shape"].get<std::vector<int64_t>>();
    const size_t begin = entry["data_offsets"][0].get<size_t>(), end = entry["data_offsets"][1].get<size_t>();
    for (size_t at = begin; at < end; at += 4) {
      uint32_t word = 0;
      for (int b = 3; b >= 0; --b) word = (word << 8) | uint8_t(bytes[8 + header_size + at + size_t(b)]);
      float value;
      std::memcpy(&value, &word, 4);
      stored.values.push_back(value);
    }
    out[name] = std::move(stored);
  }
  return out;
}

// PyTorch's modules in float64 on one sequence x (T, D) row-major.
struct TorchMath {
  const std::map<std::string, Stored>& tensors;
  int64_t T, D, heads;
  double eps;

  const Vec& get(const std::string& name) const {
    REQUIRE(tensors.count(name) == 1);
    return tensors.at(name).values;
  }
  // torch.nn.functional.linear: x (T, in) W^T (W: (out, in)) + b.
  Vec linear(const Vec& x, const std::string& weight, const std::string& bias, int64_t in, int64_t out) const {
    const Vec& w = get(weight);
    const Vec& b = get(bias);
    Vec y(size_t(T * out));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double acc = b[size_t(o)];
        for (int64_t i = 0; i < in; ++i) acc += x[size_t(t * in + i)] * w[size_t(o * in + i)];
        y[size_t(t * out + o)] = acc;
      }
    return y;
  }
  Vec layer_norm(const Vec& x, const std::string& prefix) const {
    const Vec& g = get(prefix + ".weight");
    const Vec& b = get(prefix + ".bias");
    Vec y(x.size());
    for (int64_t t = 0; t < T; ++t) {
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; i < D; ++i) mean += x[size_t(t * D + i)] / double(D);
      for (int64_t i = 0; i < D; ++i) var += std::pow(x[size_t(t * D + i)] - mean, 2) / double(D);
      for (int64_t i = 0; i < D; ++i)
        y[size_t(t * D + i)] = (x[size_t(t * D + i)] - mean) / std::sqrt(var + eps) * g[size_t(i)] + b[size_t(i)];
    }
    return y;
  }
  // nn.MultiheadAttention: in_proj rows [q; k; v], heads of D / heads columns, then out_proj.
  Vec self_attention(const Vec& x, const std::string& prefix) const {
    const Vec qkv = linear(x, prefix + ".in_proj_weight", prefix + ".in_proj_bias", D, 3 * D);  // (T, 3D)
    const int64_t hd = D / heads;
    Vec o(size_t(T * D), 0.0);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < T; ++i) {
        Vec p(static_cast<size_t>(T));
        double max = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d)
            dot += qkv[size_t(i * 3 * D + h * hd + d)] * qkv[size_t(j * 3 * D + D + h * hd + d)];
          p[size_t(j)] = dot / std::sqrt(double(hd));
          max = std::max(max, p[size_t(j)]);
        }
        for (double& v : p) sum += (v = std::exp(v - max));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < hd; ++d)
            o[size_t(i * D + h * hd + d)] += p[size_t(j)] / sum * qkv[size_t(j * 3 * D + 2 * D + h * hd + d)];
      }
    return linear(o, prefix + ".out_proj.weight", prefix + ".out_proj.bias", D, D);
  }
  // TransformerEncoderLayer(norm_first=True, activation=relu): x + SA(LN1(x)), then x + FF(LN2(x)).
  Vec encoder_layer(Vec x, const std::string& prefix, int64_t ffn) const {
    const Vec a = self_attention(layer_norm(x, prefix + ".norm1"), prefix + ".self_attn");
    for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
    Vec h = linear(layer_norm(x, prefix + ".norm2"), prefix + ".linear1.weight", prefix + ".linear1.bias", D, ffn);
    for (double& v : h) v = std::max(v, 0.0);
    const Vec f = linear(h, prefix + ".linear2.weight", prefix + ".linear2.bias", ffn, D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += f[i];
    return x;
  }
};

}  // namespace

TEST_CASE(
    "checkpoint layout: the encoder's names and shapes are torch.nn.TransformerEncoder's state_dict (committed "
    "fixture)") {
  // The fixture's model: d_model 8, 2 heads, ffn 12, 2 layers, pre-LN with the final norm.
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  std::istringstream fixture(
      read_text(std::string(NORMLAB_TEST_DATA_DIR) + "/pytorch/transformer_encoder_state_dict.txt"));
  for (std::string line; std::getline(fixture, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    std::vector<int64_t> shape;
    for (int64_t dim; fields >> dim;) shape.push_back(dim);
    expected.emplace_back(name, shape);
  }
  REQUIRE(expected.size() == 26);

  normlab::nn::ModelOptions options;
  options.encoder.d_model = 8;
  options.encoder.num_heads = 2;
  options.encoder.num_layers = 2;
  options.encoder.dim_feedforward = 12;
  options.encoder.placement = normlab::nn::Placement::pre;
  options.encoder.final_norm = true;
  options.encoder.norm_eps = 1e-5f;
  options.vocab_size = 10;
  options.num_classes = 10;
  options.max_len = 16;
  options.seed = 11;
  normlab::nn::EncoderModel model(options);
  // Away from the initialization (LayerNorm 1 / 0, zero biases), so that every tensor shows.
  normlab::Rng rng(5);
  for (auto& [name, tensor] : model.named_parameters()) {
    normlab::Tensor handle = tensor;
    for (int64_t i = 0; i < handle.numel(); ++i) handle.data()[i] += rng.normal(0.0f, 0.2f);
  }
  TempDir dir("normlab_layout");
  const std::string path = dir.sub("checkpoint.safetensors");
  normlab::train::write_checkpoint(path, model, nullptr, {});
  const std::map<std::string, Stored> stored = read_raw(path);

  std::map<std::string, std::vector<int64_t>> encoder_part;
  for (const auto& [name, tensor] : stored)
    if (name.rfind("layers.", 0) == 0 || name.rfind("norm.", 0) == 0) encoder_part[name] = tensor.shape;
  std::map<std::string, std::vector<int64_t>> torch_part(expected.begin(), expected.end());
  CHECK(encoder_part == torch_part);

  // The meaning: PyTorch's arithmetic on the stored tensors = the model that wrote them.
  const int64_t T = 5, D = 8;
  std::vector<float> x = std::vector<float>(size_t(T * D));
  for (float& v : x) v = rng.normal(0.0f, 1.0f);
  model.eval();
  const normlab::Tensor ours = model.encoder.forward(normlab::Tensor::from_data({T, D}, x), {0, T});
  const TorchMath torch{stored, T, D, 2, 1e-5};
  Vec h(x.begin(), x.end());
  for (int layer = 0; layer < 2; ++layer) h = torch.encoder_layer(h, "layers." + std::to_string(layer), 12);
  h = torch.layer_norm(h, "norm");
  const std::vector<float> ours_values(ours.data(), ours.data() + ours.numel());
  CHECK(relative_max_error(ours_values, h) < 1e-4);
}
