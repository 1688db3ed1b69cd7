// The per-layer diagnostics (nn/diagnostics.hpp) against hand computations on tiny fixtures, and
// in a training run: which steps carry them, and that computing them changes no bit of training.
#include <doctest/doctest.h>

#include "support.hpp"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "normlab/error.hpp"
#include "normlab/kernels/math.hpp"
#include "normlab/nn/diagnostics.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/rng.hpp"

using namespace normlab;

TEST_CASE("attention statistics: known logits give known entropy and max |logit|, and packing never counts") {
  // d_model 8, 2 heads of head_dim 4, so 1/sqrt(head_dim) = 1/2 exactly. Sequence A = tokens 0, 1;
  // sequence B = token 2. Head 0: k0 = 0, k1 = (2, 0, 0, 0), q0 = (-a, 0, 0, 0) with a = ln 3, so
  // query 0's logits are (0, -a): p = (3/4, 1/4); q1 = 0: uniform over 2. B: q2 = (4, ...),
  // k2 = (0.5, ...): one logit 4 * 0.5 / 2 = 1, entropy 0. Had B's token leaked into A (or A's into
  // B), query 2 would see k1 and a logit 4. Head 1 is all zeros: uniform rows.
  const float a = float(std::log(3.0));
  std::vector<float> qkv(3 * 24, 0.0f);
  auto q = [&](int t) { return qkv.data() + t * 24; };
  auto k = [&](int t) { return qkv.data() + t * 24 + 8; };
  q(0)[0] = -a;
  k(1)[0] = 2.0f;
  q(2)[0] = 4.0f;
  k(2)[0] = 0.5f;
  for (int t = 0; t < 3; ++t) qkv[size_t(t * 24 + 16)] = 7.0f;  // values: no part in the statistics
  const nn::AttentionStatistics s = nn::attention_statistics(Tensor::from_data({3, 24}, qkv), {0, 2, 3}, 2);
  const double ln2 = std::log(2.0);
  REQUIRE(s.entropy_sum.size() == 2);
  CHECK(s.queries == 3);
  // The row's entropy from the float a (p = (3/4, 1/4) only for a = ln 3 exactly), next to its
  // closed form -(3/4 ln 3/4 + 1/4 ln 1/4) = 2 ln 2 - 3/4 ln 3.
  const double p1 = std::exp(-double(a)) / (1.0 + std::exp(-double(a)));
  const double h0 = -((1 - p1) * std::log(1 - p1) + p1 * std::log(p1));
  CHECK(h0 == doctest::Approx(2 * ln2 - 0.75 * std::log(3.0)).epsilon(1e-7));
  CHECK(s.entropy_sum[0] == doctest::Approx(h0 + ln2).epsilon(1e-6));  // exp in float (3 ulp)
  CHECK(s.entropy_sum[1] == doctest::Approx(2 * ln2).epsilon(1e-14));  // uniform rows: exp(0) = 1 exactly
  CHECK(s.max_abs_logit == double(a));                                 // |-a| beats B's 1; a leaked logit would be 4
  // One sequence of all three tokens: the statistics see the other tokens now.
  const nn::AttentionStatistics joined = nn::attention_statistics(Tensor::from_data({3, 24}, qkv), {0, 3}, 2);
  CHECK(joined.max_abs_logit == 4.0);
  CHECK(joined.entropy_sum[1] == doctest::Approx(3 * std::log(3.0)).epsilon(1e-14));
  CHECK_THROWS_AS(nn::attention_statistics(Tensor::from_data({3, 24}, qkv), {0, 2}, 2), UsageError);
}

namespace {

// attention_statistics as a plain loop: one query at a time, its logits, maximum, S and weighted sum
// over its keys in order (the figures' definition, in the operations' order the function keeps).
nn::AttentionStatistics plain_attention_statistics(const std::vector<float>& qkv, const std::vector<int64_t>& offsets,
                                                   int64_t C, int64_t heads) {
  const int64_t D = C / heads, row = 3 * C;
  const float scale = float(1.0 / std::sqrt(double(D)));
  auto max_keep_nan = [](auto a, auto b) { return a != a || b <= a ? a : b; };
  nn::AttentionStatistics out;
  out.entropy_sum.assign(size_t(heads), 0.0);
  out.queries = offsets.back();
  for (size_t b = 0; b + 1 < offsets.size(); ++b)
    for (int64_t h = 0; h < heads; ++h) {
      double entropy = 0.0;
      float max_abs = 0.0f;
      for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) {
        std::vector<float> s;
        float top = -INFINITY;
        for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
          float dot = 0.0f;
          for (int64_t c = 0; c < D; ++c)
            dot += qkv[size_t(i * row + h * D + c)] * qkv[size_t(j * row + C + h * D + c)];
          s.push_back(dot * scale);
          top = max_keep_nan(top, s.back());
          max_abs = max_keep_nan(max_abs, std::fabs(s.back()));
        }
        double S = 0.0, weighted = 0.0;
        for (float logit : s) {
          const float shifted = logit - top;
          const float w = math::exp(shifted);
          S += double(w);
          weighted += double(w) * double(shifted);
        }
        entropy += std::log(S) - weighted / S;
      }
      out.entropy_sum[size_t(h)] += entropy;
      out.max_abs_logit = max_keep_nan(out.max_abs_logit, double(max_abs));
    }
  return out;
}

bool same_or_both_nan(double a, double b) { return a == b ? std::signbit(a) == std::signbit(b) : a != a && b != b; }

}  // namespace

TEST_CASE("attention statistics: the bits of a plain loop over queries, for every length, NaN and inf included") {
  // Lengths around the 8 query lanes (1, 7, 8, 9, 17) and an empty sequence; 2 heads of 16 features
  // (the demo's head size) and 3 of 4. Logits up to ~10, so exp's range is used. Then an infinite
  // key (logits +-inf, NaN where they meet) and a NaN query.
  const std::vector<int64_t> offsets = {0, 1, 8, 8, 16, 25, 42};
  const int64_t T = offsets.back();
  for (const auto& [C, heads] : {std::pair<int64_t, int64_t>{32, 2}, {12, 3}}) {
    Rng rng(11, uint64_t(C));
    std::vector<float> qkv(size_t(T * 3 * C));
    for (float& v : qkv) v = float(4.0 * (rng.uniform() - 0.5));
    for (int poison = 0; poison < 3; ++poison) {
      if (poison == 1) qkv[size_t(20 * 3 * C + C + 1)] = INFINITY;  // a key of sequence 4 (tokens 16..24)
      if (poison == 2) qkv[size_t(30 * 3 * C + 2)] = NAN;           // a query of sequence 5
      CAPTURE(C);
      CAPTURE(poison);
      const nn::AttentionStatistics got = nn::attention_statistics(Tensor::from_data({T, 3 * C}, qkv), offsets, heads);
      const nn::AttentionStatistics want = plain_attention_statistics(qkv, offsets, C, heads);
      CHECK(got.queries == want.queries);
      REQUIRE(got.entropy_sum.size() == size_t(heads));
      for (int64_t h = 0; h < heads; ++h)
        CHECK(same_or_both_nan(got.entropy_sum[size_t(h)], want.entropy_sum[size_t(h)]));
      CHECK(same_or_both_nan(got.max_abs_logit, want.max_abs_logit));
      if (poison == 0) CHECK(std::isfinite(got.entropy_sum[0]));
      if (poison > 0) CHECK(std::isnan(got.max_abs_logit + got.entropy_sum[0] + got.entropy_sum[1]));
    }
  }
}

TEST_CASE("serial sums of squares: blocks summed together give each block's plain sequential sum, bit for bit") {
  // 11 blocks: 9 of one shape (a group of eight, then one), one of another shape, one more of the
  // first; sizes that are no multiple of anything.
  Rng rng(5, 0);
  std::vector<std::vector<float>> data;
  std::vector<nn::Segments> blocks;
  for (int b = 0; b < 11; ++b) {
    const std::vector<size_t> sizes = b == 9 ? std::vector<size_t>{7, 130} : std::vector<size_t>{13, 1, 301};
    nn::Segments block;
    for (size_t n : sizes) {
      data.emplace_back(n);
      for (float& v : data.back()) v = float(rng.uniform() - 0.5) * float(1 + b);
      block.emplace_back(data.back().data(), n);
    }
    blocks.push_back(block);
  }
  const std::vector<double> sums = nn::serial_sums_of_squares(blocks);
  REQUIRE(sums.size() == blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) {
    double want = 0.0;
    for (const auto& [x, n] : blocks[b])
      for (size_t i = 0; i < n; ++i) want += double(x[i]) * double(x[i]);
    CHECK(sums[b] == want);
    CHECK(want > 0.0);
  }
  CHECK(nn::serial_sums_of_squares({}).empty());
  CHECK(nn::serial_sums_of_squares({nn::Segments{}}) == std::vector<double>{0.0});
}

TEST_CASE("log Z statistics: log Z of [0, 0] is ln 2, of [100, 100] 100 + ln 2, of [-3, -3] ln 2 - 3") {
  const nn::LogZStatistics s = nn::log_z_statistics(Tensor::from_data({3, 2}, {0, 0, 100, 100, -3, -3}));
  const double ln2 = std::log(2.0);
  CHECK(s.rows == 3);
  CHECK(s.sum == doctest::Approx(97.0 + 3 * ln2).epsilon(1e-14));
  CHECK(s.max_abs == doctest::Approx(100.0 + ln2).epsilon(1e-14));
  // The largest |log Z| can come from a negative one.
  CHECK(nn::log_z_statistics(Tensor::from_data({2, 2}, {-50, -50, 1, 1})).max_abs ==
        doctest::Approx(50.0 - ln2).epsilon(1e-14));
  // A NaN stays visible: a diverging run's figures must not read as finite.
  CHECK(std::isnan(nn::log_z_statistics(Tensor::from_data({1, 2}, {NAN, 0})).max_abs));
}

TEST_CASE("update ratio: ||dW|| / ||W|| per block, each block's parameters as one vector") {
  nn::EncoderOptions opts;
  opts.d_model = 8;
  opts.num_heads = 2;
  opts.num_layers = 2;
  nn::TransformerEncoder encoder(opts, 1);
  for (auto& [name, t] : encoder.named_parameters())
    if (name.rfind("layers.1.", 0) == 0) std::fill(t.data(), t.data() + t.numel(), 2.0f);
  const auto before = nn::block_parameter_values(encoder);
  for (auto& [name, t] : encoder.named_parameters())
    if (name.rfind("layers.1.", 0) == 0) std::fill(t.data(), t.data() + t.numel(), 3.0f);
  const std::vector<double> ratios = nn::per_layer_update_ratios(encoder, 2, before);
  REQUIRE(ratios.size() == 2);
  CHECK(ratios[0] == 0.0);  // untouched
  CHECK(ratios[1] == 0.5);  // every value 2 -> 3: sqrt(n * 1) / sqrt(n * 4)
}

TEST_CASE("update ratio: blocks summed six at a time give each block's sequential sums, bit for bit") {
  // 6 blocks (one group), 5 (a group of five) and 9 (six, then three): against the plain loop over
  // every parameter in order, each block's two sums in double.
  for (const int64_t layers : {6, 5, 9}) {
    nn::EncoderOptions opts;
    opts.d_model = 8;
    opts.num_heads = 2;
    opts.num_layers = layers;
    nn::TransformerEncoder encoder(opts, 3);
    const auto before = nn::block_parameter_values(encoder);
    Rng rng(7, 0);
    for (auto& [name, t] : encoder.named_parameters())
      for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] += 0.01f * float(rng.uniform() - 0.5);
    std::vector<double> change(size_t(layers), 0.0), size(size_t(layers), 0.0);
    const nn::NamedTensors params = encoder.named_parameters();
    for (size_t p = 0; p < params.size(); ++p) {
      if (params[p].first.rfind("layers.", 0) != 0) continue;
      const size_t l = size_t(std::stoll(params[p].first.substr(7)));
      for (int64_t i = 0; i < params[p].second.numel(); ++i) {
        const double delta = double(params[p].second.data()[i]) - double(before[p][size_t(i)]);
        change[l] += delta * delta;
        size[l] += double(before[p][size_t(i)]) * double(before[p][size_t(i)]);
      }
    }
    const std::vector<double> ratios = nn::per_layer_update_ratios(encoder, layers, before);
    REQUIRE(ratios.size() == size_t(layers));
    for (size_t l = 0; l < size_t(layers); ++l) {
      CHECK(ratios[l] > 0.0);
      CHECK(ratios[l] == std::sqrt(change[l] / size[l]));
    }
  }
}

namespace {

// metrics.jsonl's step records, each with the timing and (if asked) the diagnostics keys removed.
std::vector<nlohmann::json> step_records(const std::string& path, bool strip_diagnostics) {
  std::vector<nlohmann::json> records;
  std::istringstream lines(normlab::test::read_text(path));
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("split")) continue;
    record.erase("tokens_per_s");
    if (strip_diagnostics)
      for (const char* key : {"residual_rms", "layer_grad_norms", "attention_max_logit", "attention_entropy_mean",
                              "attention_entropy_min", "update_ratio", "log_z_mean", "log_z_max_abs"})
        record.erase(key);
    records.push_back(record);
  }
  return records;
}

}  // namespace

TEST_CASE("diagnostics in a run: at step 1 (the initial weights) and every diagnostics_every steps, changing no bit") {
  normlab::test::TempDir dir;
  const std::string config = dir.write("run.json", R"({
  "model": {"d_model": 16, "heads": 2, "layers": 2, "ffn": 32, "max_len": 16, "qk_norm": "layernorm"},
  "task": {"name": "reverse", "min_len": 2, "max_len": 8, "eval_max_len": 8, "eval_examples": 8},
  "optim": {"lr": 0.01, "warmup_steps": 1, "z_loss": 0.001},
  "train": {"steps": 5, "batch_size": 4, "eval_every": 0, "threads": 1}
})");
  auto train = [&](const std::string& out, int every) {
    const auto cli =
        normlab::test::run_normlab(dir,
                                   fmt::format("train --config \"{}\" --out \"{}\" --set train.diagnostics_every={}",
                                               config, dir.sub(out), every));
    REQUIRE_MESSAGE(cli.code == 0, cli.err);
    return dir.sub(out) + "/metrics.jsonl";
  };
  const std::string with = train("with", 2), without = train("without", 0);
  const auto records = step_records(with, false);
  REQUIRE(records.size() == 5);
  for (const auto& record : records) {
    const int64_t step = record["step"];
    CAPTURE(step);
    CHECK(record.contains("z_loss"));
    CHECK(record["z_loss"].get<double>() > 0.0);
    const bool expected = step == 1 || step % 2 == 0;
    CHECK(record.contains("attention_entropy_mean") == expected);
    if (!expected) continue;
    for (const char* key : {"residual_rms", "layer_grad_norms", "attention_max_logit", "attention_entropy_mean",
                            "attention_entropy_min", "update_ratio"})
      CHECK(record[key].size() == 2);
    for (size_t l = 0; l < 2; ++l) {
      const double mean = record["attention_entropy_mean"][l], least = record["attention_entropy_min"][l];
      CHECK(least <= mean);
      CHECK(least >= 0.0);
      CHECK(mean <= std::log(8.0));  // at most log(length) for the longest sequence
      CHECK(record["attention_max_logit"][l].get<double>() > 0.0);
      CHECK(record["update_ratio"][l].get<double>() > 0.0);
    }
    CHECK(std::abs(record["log_z_mean"].get<double>()) <= record["log_z_max_abs"].get<double>());
  }
  // Stripped of the diagnostics, the two runs wrote the same records, to the last bit.
  CHECK(step_records(with, true) == step_records(without, true));
}

TEST_CASE("diagnostics: block_index reads N of a block parameter's name layers.N. and -1 for anything else") {
  CHECK(nn::block_index("layers.0.self_attn.in_proj_weight", 6) == 0);
  CHECK(nn::block_index("layers.5.norm2.bias", 6) == 5);
  CHECK(nn::block_index("layers.12.linear1.weight", 13) == 12);
  CHECK(nn::block_index("layers.6.linear1.weight", 6) == -1);  // past the last block
  CHECK(nn::block_index("layers.x.weight", 6) == -1);          // no number: no throw
  CHECK(nn::block_index("layers.-1.weight", 6) == -1);
  CHECK(nn::block_index("layers.99999999999999999999.weight", 6) == -1);  // out of int64's range
  CHECK(nn::block_index("layers.3", 6) == -1);  // no parameter after the block
  CHECK(nn::block_index("layers.", 6) == -1);
  CHECK(nn::block_index("embedding.weight", 6) == -1);
  CHECK(nn::block_index("norm.weight", 6) == -1);
}
