#include "normlab/nn/diagnostics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

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

}  // namespace

int64_t block_index(const std::string& name, int64_t num_layers) {
  constexpr std::string_view prefix = "layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  int64_t layer = -1;
  const auto [end, error] = std::from_chars(first, last, layer);
  if (error != std::errc() || end == first || end == last || *end != '.') return -1;
  return layer >= 0 && layer < num_layers ? layer : -1;
}

AttentionStatistics attention_statistics(const Tensor& qkv, const std::vector<int64_t>& offsets, int64_t num_heads) {
  if (qkv.dim() != 2 || qkv.size(1) % 3 != 0 || num_heads < 1 || (qkv.size(1) / 3) % num_heads != 0 ||
      offsets.size() < 2 || offsets.front() != 0 || offsets.back() != qkv.size(0))
    throw UsageError(
        "attention_statistics: expects qkv (T, 3 d_model) with d_model divisible by the heads and "
        "offsets from 0 to T");
  const int64_t B = int64_t(offsets.size()) - 1, C = qkv.size(1) / 3, D = C / num_heads, row = 3 * C;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const float* base = qkv.data();
  // The queries of a sequence are padded to a whole number of kLanes (their logits set to 0, and
  // never counted), so that every loop over queries is whole vectors, without a scalar tail.
  constexpr int64_t kLanes = 8;
  // Four queries' logits as one value (GCC's vector extension: an SSE register on the generic
  // x86-64 build; a multiply and an add, never an fma), kept in registers over the D products,
  // where a plain array of kLanes stays scalar.
  typedef float Lanes __attribute__((vector_size(4 * sizeof(float))));
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) longest = std::max(longest, offsets[size_t(b) + 1] - offsets[size_t(b)]);
  const int64_t longest_padded = (longest + kLanes - 1) / kLanes * kLanes;
  // One (sequence, head) pair per task; each writes its own slot, combined below in a fixed order,
  // so the figures do not depend on the thread count. In float as the attention kernel computes
  // (our exp: the same bits on every CPU), the sums over keys and queries in double. Each loop runs
  // over queries (the vector lanes) while each query's own figures keep the order of a plain loop:
  // a logit adds its D products in order, a query's maximum, S and weighted sum go over its keys in
  // order, and the entropy adds the queries in order. Only max |s| is taken lane by lane, which
  // gives the same maximum.
  std::vector<double> task_entropy_sum(size_t(B * num_heads), 0.0), task_max_abs_logit(size_t(B * num_heads), 0.0);
  parallel_for(B * num_heads, qkv.numel() > (1 << 14), [&](int64_t begin, int64_t end) {
    // Sized once for the longest sequence: qt (D, Lp) the queries transposed, s and w (L, Lp) key by
    // key the queries' logits and exp weights, top (Lp), S and weighted (Lp) per query.
    const size_t lanes = size_t(longest_padded), matrix = size_t(longest) * lanes;
    std::vector<float> qt(size_t(D) * lanes), s(matrix), w(matrix), top(lanes);
    std::vector<double> S(lanes), weighted(lanes);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / num_heads, h = task % num_heads;
      const int64_t first = offsets[size_t(b)], L = offsets[size_t(b) + 1] - first;
      const int64_t Lp = (L + kLanes - 1) / kLanes * kLanes;
      for (int64_t i = 0; i < Lp; ++i)
        for (int64_t c = 0; c < D; ++c) qt[size_t(c * Lp + i)] = i < L ? base[(first + i) * row + h * D + c] : 0.0f;
      // s[j][i] = (q_i . k_j) * scale, q_i . k_j adding its products c = 0, 1, ... from 0.
      for (int64_t j = 0; j < L; ++j) {
        const float* k = base + (first + j) * row + C + h * D;
        for (int64_t i0 = 0; i0 < Lp; i0 += kLanes) {
          Lanes acc0 = {}, acc1 = {};
          for (int64_t c = 0; c < D; ++c) {
            Lanes q0, q1;
            std::memcpy(&q0, qt.data() + c * Lp + i0, sizeof q0);
            std::memcpy(&q1, qt.data() + c * Lp + i0 + 4, sizeof q1);
            acc0 += k[c] * q0;
            acc1 += k[c] * q1;
          }
          acc0 *= scale;
          acc1 *= scale;
          std::memcpy(s.data() + j * Lp + i0, &acc0, sizeof acc0);
          std::memcpy(s.data() + j * Lp + i0 + 4, &acc1, sizeof acc1);
        }
        // The padding queries' logits exactly 0 (k_j * 0 is NaN for an infinite k_j).
        for (int64_t i = L; i < Lp; ++i) s[size_t(j * Lp + i)] = 0.0f;
      }
      // Each query's largest logit over its keys in order; max |s| lane by lane.
      float* __restrict tp = top.data();
      float max_abs_lane[kLanes] = {};
      for (int64_t i = 0; i < Lp; ++i) tp[i] = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < L; ++j) {
        const float* sj = s.data() + j * Lp;
        for (int64_t i = 0; i < Lp; ++i) tp[i] = max_keep_nan(tp[i], sj[i]);
        for (int64_t i0 = 0; i0 < Lp; i0 += kLanes)
          for (int64_t u = 0; u < kLanes; ++u) max_abs_lane[u] = max_keep_nan(max_abs_lane[u], std::fabs(sj[i0 + u]));
      }
      float max_abs = 0.0f;
      for (int64_t u = 0; u < kLanes; ++u) max_abs = max_keep_nan(max_abs, max_abs_lane[u]);
      // H = log S - sum_j w_j (s_j - top) / S, w_j = exp(s_j - top), S = sum_j w_j
      float* __restrict sp = s.data();
      float* __restrict wp = w.data();
      for (int64_t j = 0; j < L; ++j)
        for (int64_t i = 0; i < Lp; ++i) sp[j * Lp + i] -= tp[i];
#pragma omp simd  // elementwise (math::exp's clamps become branches: GCC 12 leaves it scalar)
      for (int64_t e = 0; e < L * Lp; ++e) wp[e] = math::exp(sp[e]);
      double* __restrict Sp = S.data();
      double* __restrict weighted_p = weighted.data();
      for (int64_t i = 0; i < Lp; ++i) Sp[i] = 0.0, weighted_p[i] = 0.0;
      for (int64_t j = 0; j < L; ++j)
        for (int64_t i = 0; i < Lp; ++i) {
          Sp[i] += double(wp[j * Lp + i]);
          weighted_p[i] += double(wp[j * Lp + i]) * double(sp[j * Lp + i]);
        }
      double entropy_sum = 0.0;
      for (int64_t i = 0; i < L; ++i) entropy_sum += std::log(Sp[i]) - weighted_p[i] / Sp[i];
      task_entropy_sum[size_t(task)] = entropy_sum;
      task_max_abs_logit[size_t(task)] = double(max_abs);
    }
  });
  AttentionStatistics out;
  out.entropy_sum.assign(size_t(num_heads), 0.0);
  out.queries = qkv.size(0);
  for (int64_t task = 0; task < B * num_heads; ++task) {
    out.entropy_sum[size_t(task % num_heads)] += task_entropy_sum[size_t(task)];
    out.max_abs_logit = max_keep_nan(out.max_abs_logit, task_max_abs_logit[size_t(task)]);
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
    const float* row = z + n * V;
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) top = max_keep_nan(top, double(row[v]));
    double S = 0.0;
    for (int64_t v = 0; v < V; ++v) S += math::detail::exp_double_nonpositive(double(row[v]) - top);
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

// One block's parameter for the update ratio: its values now, the same values saved before the
// update, and their count. A block is a vector of these, in named_parameters order.
struct UpdateSegment {
  const float* now;
  const float* before;
  size_t count;
};

// A segment's number of values, for same_shape (a Segments entry is (data, count)).
size_t count_of(const std::pair<const float*, size_t>& segment) { return segment.second; }
size_t count_of(const UpdateSegment& segment) { return segment.count; }

// Whether blocks a and b have segments of the same sizes in the same order (every encoder layer has).
template <class Block>
bool same_shape(const Block& a, const Block& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (count_of(a[k]) != count_of(b[k])) return false;
  return true;
}

// sum_group(std::integral_constant<int, G>{}, first) with G = group (1 <= group <= G0): the group's
// size as a template argument, so that its G chains are a fixed number of registers.
template <int G0, class SumGroup>
void with_group_size(size_t group, size_t first, SumGroup& sum_group) {
  if constexpr (G0 > 1)
    if (group < size_t(G0)) return with_group_size<G0 - 1>(group, first, sum_group);
  sum_group(std::integral_constant<int, G0>{}, first);
}

// Calls sum_group(std::integral_constant<int, G>{}, first) for each run of up to MaxGroup
// consecutive blocks [first, first + G) of the first one's shape; a block unlike the next is a
// group of one. The grouping only decides which blocks' sums advance together, never their order.
template <int MaxGroup, class Block, class SumGroup>
void in_groups_of_one_shape(const std::vector<Block>& blocks, SumGroup sum_group) {
  for (size_t first = 0; first < blocks.size();) {
    size_t group = 1;
    while (group < MaxGroup && first + group < blocks.size() && same_shape(blocks[first], blocks[first + group]))
      ++group;
    with_group_size<MaxGroup>(group, first, sum_group);
    first += group;
  }
}

// sum x^2 over G blocks of segments of the same sizes, each block's sum in its own order: G
// independent chains advanced together (one chain waits on its adds).
template <int G>
void square_sums(const std::vector<Segments>& blocks, size_t first, double* sum_sq) {
  double sum[G];
  for (int g = 0; g < G; ++g) sum[g] = 0.0;
  for (size_t k = 0; k < blocks[first].size(); ++k) {
    const float* x[G];
    for (int g = 0; g < G; ++g) x[g] = blocks[first + size_t(g)][k].first;
    for (size_t i = 0; i < blocks[first][k].second; ++i)
      for (int g = 0; g < G; ++g) sum[g] += double(x[g][i]) * double(x[g][i]);
  }
  for (int g = 0; g < G; ++g) sum_sq[first + size_t(g)] = sum[g];
}

// sum (now - before)^2 and sum before^2 over G blocks whose segments have the same sizes, each
// block's sums in its own order: 2G independent chains advanced together.
template <int G>
void update_sums(const std::vector<std::vector<UpdateSegment>>& blocks, size_t first, double* change_sq,
                 double* before_sq) {
  double change[G], size[G];  // block first + g: sum (now - before)^2, sum before^2
  for (int g = 0; g < G; ++g) change[g] = 0.0, size[g] = 0.0;
  for (size_t k = 0; k < blocks[first].size(); ++k) {
    const float* now[G];
    const float* before[G];
    for (int g = 0; g < G; ++g)
      now[g] = blocks[first + size_t(g)][k].now, before[g] = blocks[first + size_t(g)][k].before;
    for (size_t i = 0; i < blocks[first][k].count; ++i)
      for (int g = 0; g < G; ++g) {
        const double delta = double(now[g][i]) - double(before[g][i]);
        change[g] += delta * delta;
        size[g] += double(before[g][i]) * double(before[g][i]);
      }
  }
  for (int g = 0; g < G; ++g) change_sq[first + size_t(g)] = change[g], before_sq[first + size_t(g)] = size[g];
}

}  // namespace

std::vector<double> serial_sums_of_squares(const std::vector<Segments>& blocks) {
  std::vector<double> sums(blocks.size(), 0.0);
  in_groups_of_one_shape<8>(blocks, [&](auto group, size_t first) {
    square_sums<decltype(group)::value>(blocks, first, sums.data());
  });
  return sums;
}

std::vector<double> per_layer_update_ratios(const Module& model, int64_t num_layers,
                                            const std::vector<std::vector<float>>& before) {
  const NamedTensors params = model.named_parameters();
  if (params.size() != before.size())
    throw UsageError(fmt::format("per_layer_update_ratios: {} parameters, {} saved", params.size(), before.size()));
  std::vector<std::vector<UpdateSegment>> blocks(static_cast<size_t>(num_layers));
  for (size_t p = 0; p < params.size(); ++p) {
    const int64_t layer = block_index(params[p].first, num_layers);
    if (layer < 0) continue;
    const std::vector<float>& saved = before[p];
    if (int64_t(saved.size()) != params[p].second.numel())
      throw UsageError(fmt::format("per_layer_update_ratios: {} changed size", params[p].first));
    blocks[size_t(layer)].push_back({params[p].second.data(), saved.data(), saved.size()});
  }
  // Blocks of one shape (every encoder layer) go up to six at a time (two chains each); any other
  // one on its own. Either way each block's two sums add its values in the order above, so the
  // ratios have the same bits.
  std::vector<double> change_sq(size_t(num_layers), 0.0), before_sq(size_t(num_layers), 0.0);
  in_groups_of_one_shape<6>(blocks, [&](auto group, size_t first) {
    update_sums<decltype(group)::value>(blocks, first, change_sq.data(), before_sq.data());
  });
  std::vector<double> ratios(size_t(num_layers), 0.0);
  for (size_t l = 0; l < ratios.size(); ++l)
    ratios[l] = before_sq[l] > 0 ? std::sqrt(change_sq[l] / before_sq[l]) : 0.0;
  return ratios;
}

}  // namespace normlab::nn
