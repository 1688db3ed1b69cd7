#include "normlab/nn/diagnostics.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>

#include "normlab/error.hpp"
#include "normlab/kernels/math.hpp"
#include "normlab/parallel.hpp"

namespace normlab::nn {

namespace {

// max that keeps a NaN once seen (in either argument): a diverging run's diagnostics must not read as finite.
template <class T>
T max_keep_nan(T a, T b) {
  return a != a || b <= a ? a : b;
}

// The block index of a parameter name "layers.N...", or -1.
int64_t block_of(const std::string& name, int64_t num_layers) {
  if (name.rfind("layers.", 0) != 0) return -1;
  const int64_t layer = std::stoll(name.substr(7));
  return layer >= 0 && layer < num_layers ? layer : -1;
}

}  // namespace

AttentionStatistics attention_statistics(const Tensor& qkv, const std::vector<int64_t>& offsets, int64_t num_heads) {
  if (qkv.dim() != 2 || qkv.size(1) % 3 != 0 || num_heads < 1 || (qkv.size(1) / 3) % num_heads != 0 ||
      offsets.size() < 2 || offsets.front() != 0 || offsets.back() != qkv.size(0))
    throw UsageError(
        "attention_statistics: expects qkv (T, 3 d_model) with d_model divisible by the heads and "
        "offsets from 0 to T");
  const int64_t B = int64_t(offsets.size()) - 1, C = qkv.size(1) / 3, D = C / num_heads, row = 3 * C;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const float* base = qkv.data();
  // One (sequence, head) pair per task; each writes its own slot, combined below in a fixed order,
  // so the figures do not depend on the thread count. In float as the attention kernel computes
  // (our exp: the same bits on every CPU), each loop over keys vectorizing: a query's logits are
  // accumulated feature by feature over all its keys at once (keys transposed to (D, L)), each
  // logit still adding its D products in order. Sums over keys and queries in double.
  std::vector<double> entropy(size_t(B * num_heads), 0.0), largest(size_t(B * num_heads), 0.0);
  parallel_for(B * num_heads, qkv.numel() > (1 << 14), [&](int64_t begin, int64_t end) {
    std::vector<float> keys, logits, weights;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / num_heads, h = task % num_heads;
      const int64_t first = offsets[size_t(b)], length = offsets[size_t(b) + 1] - first;
      keys.resize(size_t(D * length));
      logits.resize(size_t(length));
      weights.resize(size_t(length));
      for (int64_t j = 0; j < length; ++j)
        for (int64_t c = 0; c < D; ++c) keys[size_t(c * length + j)] = base[(first + j) * row + C + h * D + c];
      double entropy_sum = 0.0;
      float max_abs = 0.0f;
      for (int64_t i = 0; i < length; ++i) {
        const float* q = base + (first + i) * row + h * D;
        float* s = logits.data();
        std::fill(s, s + length, 0.0f);
        for (int64_t c = 0; c < D; ++c) {
          const float qc = q[c];
          const float* k = keys.data() + c * length;
          for (int64_t j = 0; j < length; ++j) s[j] += qc * k[j];
        }
        float top = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < length; ++j) {
          s[j] *= scale;
          top = max_keep_nan(top, s[j]);
          max_abs = max_keep_nan(max_abs, std::fabs(s[j]));
        }
        // H = log S - sum_j w_j (s_j - top) / S, w_j = exp(s_j - top), S = sum_j w_j
        float* __restrict w = weights.data();
        for (int64_t j = 0; j < length; ++j) s[j] -= top;
#pragma omp simd  // elementwise: each lane computes what the scalar loop would
        for (int64_t j = 0; j < length; ++j) w[j] = math::exp(s[j]);
        double S = 0.0, weighted = 0.0;
        for (int64_t j = 0; j < length; ++j) {
          S += double(weights[size_t(j)]);
          weighted += double(weights[size_t(j)]) * double(s[j]);
        }
        entropy_sum += std::log(S) - weighted / S;
      }
      entropy[size_t(task)] = entropy_sum;
      largest[size_t(task)] = double(max_abs);
    }
  });
  AttentionStatistics out;
  out.entropy_sum.assign(size_t(num_heads), 0.0);
  out.queries = qkv.size(0);
  for (int64_t task = 0; task < B * num_heads; ++task) {
    out.entropy_sum[size_t(task % num_heads)] += entropy[size_t(task)];
    out.max_abs_logit = max_keep_nan(out.max_abs_logit, largest[size_t(task)]);
  }
  return out;
}

LogZStatistics log_z_statistics(const Tensor& logits) {
  if (logits.dim() != 2) throw UsageError("log_z_statistics: expects logits (rows, classes)");
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* z = logits.data();
  LogZStatistics out;
  out.rows = N;
  for (int64_t n = 0; n < N; ++n) {
    const float* r = z + n * V;
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) top = max_keep_nan(top, double(r[v]));
    double S = 0.0;
    for (int64_t v = 0; v < V; ++v) S += math::detail::exp_double_nonpositive(double(r[v]) - top);
    const double log_z = top + std::log(S);
    out.sum += log_z;
    out.max_abs = max_keep_nan(out.max_abs, std::fabs(log_z));
  }
  return out;
}

std::vector<std::vector<float>> block_parameter_values(const Module& model) {
  std::vector<std::vector<float>> values;
  for (const auto& [name, t] : model.named_parameters()) {
    values.emplace_back();
    if (name.rfind("layers.", 0) == 0) values.back().assign(t.data(), t.data() + t.numel());
  }
  return values;
}

namespace {

// One block's parameters in named_parameters order: (now, before, count) each.
struct Segment {
  const float* now;
  const float* old;
  size_t count;
};

// sum (now - old)^2 and sum old^2 over G blocks whose segments have the same sizes, each block's
// sums in its own order: G independent chains advanced together (one chain waits on its adds).
template <int G>
void update_sums(const std::vector<std::vector<Segment>>& blocks, size_t first, double* change, double* size) {
  double c[G], z[G];
  for (int g = 0; g < G; ++g) c[g] = change[first + size_t(g)], z[g] = size[first + size_t(g)];
  for (size_t k = 0; k < blocks[first].size(); ++k) {
    const float* now[G];
    const float* old[G];
    for (int g = 0; g < G; ++g) now[g] = blocks[first + size_t(g)][k].now, old[g] = blocks[first + size_t(g)][k].old;
    for (size_t i = 0; i < blocks[first][k].count; ++i)
      for (int g = 0; g < G; ++g) {
        const double delta = double(now[g][i]) - double(old[g][i]);
        c[g] += delta * delta;
        z[g] += double(old[g][i]) * double(old[g][i]);
      }
  }
  for (int g = 0; g < G; ++g) change[first + size_t(g)] = c[g], size[first + size_t(g)] = z[g];
}

}  // namespace

std::vector<double> per_layer_update_ratios(const Module& model, int64_t num_layers,
                                            const std::vector<std::vector<float>>& before) {
  std::vector<double> change(size_t(num_layers), 0.0), size(size_t(num_layers), 0.0);
  const NamedTensors params = model.named_parameters();
  if (params.size() != before.size())
    throw UsageError(fmt::format("per_layer_update_ratios: {} parameters, {} saved", params.size(), before.size()));
  std::vector<std::vector<Segment>> blocks(static_cast<size_t>(num_layers));
  for (size_t p = 0; p < params.size(); ++p) {
    const int64_t layer = block_of(params[p].first, num_layers);
    if (layer < 0) continue;
    const std::vector<float>& old = before[p];
    if (int64_t(old.size()) != params[p].second.numel())
      throw UsageError(fmt::format("per_layer_update_ratios: {} changed size", params[p].first));
    blocks[size_t(layer)].push_back({params[p].second.data(), old.data(), old.size()});
  }
  // Blocks of one shape (every encoder layer) go four at a time; any other one on its own. Either
  // way each block's two sums add its values in the order above, so the ratios have the same bits.
  auto same_shape = [&](size_t a, size_t b) {
    if (blocks[a].size() != blocks[b].size()) return false;
    for (size_t k = 0; k < blocks[a].size(); ++k)
      if (blocks[a][k].count != blocks[b][k].count) return false;
    return true;
  };
  for (size_t first = 0; first < blocks.size();) {
    size_t group = 1;
    while (group < 4 && first + group < blocks.size() && same_shape(first, first + group)) ++group;
    if (group == 4) update_sums<4>(blocks, first, change.data(), size.data());
    else if (group == 3) update_sums<3>(blocks, first, change.data(), size.data());
    else if (group == 2) update_sums<2>(blocks, first, change.data(), size.data());
    else update_sums<1>(blocks, first, change.data(), size.data());
    first += group;
  }
  std::vector<double> ratios(size_t(num_layers), 0.0);
  for (size_t l = 0; l < ratios.size(); ++l) ratios[l] = size[l] > 0 ? std::sqrt(change[l] / size[l]) : 0.0;
  return ratios;
}

}  // namespace normlab::nn
