// Packed variable-length multi-head attention against the PyTorch view of the same batch: padded to
// the longest sequence with a key-padding mask, computed in double.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/attention.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

namespace nk = normlab::kernels;

namespace {

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets(lengths.size() + 1, 0);
  for (size_t b = 0; b < lengths.size(); b++) offsets[b + 1] = offsets[b] + lengths[b];
  return offsets;
}

std::vector<float> random_vector(size_t n, uint64_t seed, float stddev = 1.0f) {
  normlab::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal(0.0f, stddev);
  return v;
}

// The PyTorch view: scatter the packed rows into a (B, Lmax, 3C) padded batch, run every query row
// (padding rows too, as PyTorch does) against all Lmax keys with the padding keys masked to -inf,
// and gather the real rows back. Double throughout. Returns out (T, C); if stats is given, the
// kernel's cache layout: per head h and token t, {largest raw score q.k, 1 / sum_j exp(scaled - max)}.
std::vector<double> reference_attention(const std::vector<double>& qkv, const std::vector<int64_t>& offsets, int64_t C,
                                        int64_t NH, std::vector<double>* stats = nullptr) {
  const int64_t B = int64_t(offsets.size()) - 1;
  const int64_t T = offsets[B];
  const int64_t hd = C / NH;
  int64_t Lmax = 0;
  for (int64_t b = 0; b < B; b++) Lmax = std::max(Lmax, offsets[b + 1] - offsets[b]);
  std::vector<double> padded(static_cast<size_t>(B * Lmax * 3 * C), 0.0);
  std::vector<bool> key_padding_mask(size_t(B * Lmax), true);  // true = padding, as in PyTorch
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < offsets[b + 1] - offsets[b]; i++) {
      key_padding_mask[size_t(b * Lmax + i)] = false;
      for (int64_t c = 0; c < 3 * C; c++) {
        padded[size_t((b * Lmax + i) * 3 * C + c)] = qkv[size_t((offsets[b] + i) * 3 * C + c)];
      }
    }
  }
  std::vector<double> padded_out(static_cast<size_t>(B * Lmax * C), 0.0);
  std::vector<double> padded_stats(static_cast<size_t>(B * NH * Lmax * 2), 0.0);
  const double scale = 1.0 / std::sqrt(double(hd));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      for (int64_t i = 0; i < Lmax; i++) {
        std::vector<double> s(static_cast<size_t>(Lmax));
        double maxval = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Lmax; j++) {
          if (key_padding_mask[size_t(b * Lmax + j)]) {
            s[size_t(j)] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0.0;
          for (int64_t d = 0; d < hd; d++) {
            dot += padded[size_t((b * Lmax + i) * 3 * C + h * hd + d)] *
                   padded[size_t((b * Lmax + j) * 3 * C + C + h * hd + d)];
          }
          s[size_t(j)] = dot * scale;
          maxval = std::max(maxval, s[size_t(j)]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < Lmax; j++) {
          s[size_t(j)] = std::exp(s[size_t(j)] - maxval);  // exp(-inf) = 0 for padding keys
          sum += s[size_t(j)];
        }
        padded_stats[size_t(((b * NH + h) * Lmax + i) * 2)] = maxval / scale;
        padded_stats[size_t(((b * NH + h) * Lmax + i) * 2 + 1)] = 1.0 / sum;
        for (int64_t j = 0; j < Lmax; j++) {
          const double p = s[size_t(j)] / sum;
          for (int64_t d = 0; d < hd; d++) {
            padded_out[size_t((b * Lmax + i) * C + h * hd + d)] +=
                p * padded[size_t((b * Lmax + j) * 3 * C + 2 * C + h * hd + d)];
          }
        }
      }
    }
  }
  std::vector<double> out(static_cast<size_t>(T * C));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < offsets[b + 1] - offsets[b]; i++) {
      for (int64_t c = 0; c < C; c++) {
        out[size_t((offsets[b] + i) * C + c)] = padded_out[size_t((b * Lmax + i) * C + c)];
      }
    }
  }
  if (stats != nullptr) {
    stats->assign(static_cast<size_t>(2 * T * NH), 0.0);
    for (int64_t b = 0; b < B; b++) {
      for (int64_t i = 0; i < offsets[b + 1] - offsets[b]; i++) {
        for (int64_t h = 0; h < NH; h++) {
          for (int64_t e = 0; e < 2; e++) {
            (*stats)[size_t((h * T + offsets[b] + i) * 2 + e)] =
                padded_stats[size_t(((b * NH + h) * Lmax + i) * 2 + e)];
          }
        }
      }
    }
  }
  return out;
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace

TEST_CASE("attention cache: two floats per token and head, and the exponentials of sequences up to 256") {
  // Statistics 2 * T * NH floats, rounded up to 16 when exponentials follow; then per sequence of
  // at most 256 tokens NH (L, Lp) matrices, Lp = L rounded up to 16. At most 256 floats per token
  // and head: linear in the lengths, never the (L, L) matrices of long sequences.
  REQUIRE(nk::kAttentionKeptExpsMaxLength == 256);
  const std::vector<int64_t> offsets = offsets_of({3, 1, 0, 5});
  CHECK(nk::attention_cache_size(offsets.data(), 4, 2) == 48 + 2 * (3 * 16 + 1 * 16 + 5 * 16));
  CHECK(nk::attention_cache_size(offsets.data(), 0, 2) == 0);
  const std::vector<int64_t> long_one = offsets_of({1024});
  CHECK(nk::attention_cache_size(long_one.data(), 1, 4) == 2 * 4 * 1024);
  const std::vector<int64_t> at_limit = offsets_of({256}), past_limit = offsets_of({257});
  CHECK(nk::attention_cache_size(at_limit.data(), 1, 4) == 2 * 4 * 256 + 4 * 256 * 256);
  CHECK(nk::attention_cache_size(past_limit.data(), 1, 4) == 2 * 4 * 257);
  const std::vector<int64_t> mixed = offsets_of({100, 257});                     // one keeps (Lp = 112), one does not
  CHECK(nk::attention_cache_size(mixed.data(), 2, 2) == 1440 + 2 * 100 * 112);  // 2 * 357 * 2 = 1428 -> 1440
}

TEST_CASE("attention forward matches a padded, key-masked double reference") {
  // 1..260 rows: query blocks of 48 rows, whole and partial, and rows padded to 16 floats; 260
  // past kAttentionKeptExpsMaxLength (only its statistics are kept)
  const std::vector<int64_t> lengths = {1, 5, 17, 3, 1, 32, 9, 130, 48, 260};
  const std::vector<int64_t> offsets = offsets_of(lengths);
  const int64_t B = int64_t(lengths.size());
  const int64_t T = offsets[B];
  // head sizes on and off the register tiles' 8 or 16 floats: 8, 8, 16, 8, 10, 3
  for (auto [C, NH] : {std::pair<int64_t, int64_t>{32, 4}, {24, 3}, {16, 1}, {64, 8}, {20, 2}, {12, 4}}) {
    CAPTURE(C);
    CAPTURE(NH);
    const std::vector<float> qkv = random_vector(size_t(T * 3 * C), 42 + uint64_t(C));
    std::vector<float> out(static_cast<size_t>(T * C), -7.0f);
    std::vector<float> att(static_cast<size_t>(nk::attention_cache_size(offsets.data(), B, NH)), -7.0f);
    nk::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);

    std::vector<double> ref_stats;
    const std::vector<double> ref = reference_attention(to_double(qkv), offsets, C, NH, &ref_stats);
    double max_err = 0.0;
    for (size_t n = 0; n < out.size(); n++) max_err = std::max(max_err, std::abs(double(out[n]) - ref[n]));
    CHECK(max_err < 2e-6);
    // The cache: the row's largest raw score, and 1 / (sum of the row's exponentials), relative.
    REQUIRE(att.size() >= ref_stats.size());
    double max_stat_err = 0.0;
    for (size_t n = 0; n < ref_stats.size(); n++)
      max_stat_err =
          std::max(max_stat_err, std::abs(double(att[n]) - ref_stats[n]) / std::max(1.0, std::abs(ref_stats[n])));
    CHECK(max_stat_err < 1e-6);
    // Then, for the sequences of at most kAttentionKeptExpsMaxLength tokens, each head's exponentials (L, Lp):
    // exp((s_ij - max_i) / sqrt(hd)), zero in the padding columns.
    const int64_t hd = C / NH;
    int64_t start = (int64_t(ref_stats.size()) + 15) / 16 * 16;
    double max_exp_err = 0.0;
    bool padding_zero = true;
    for (int64_t b = 0; b < B; b++) {
      const int64_t L = lengths[size_t(b)], Lp = (L + 15) / 16 * 16;
      if (L > nk::kAttentionKeptExpsMaxLength) continue;
      for (int64_t h = 0; h < NH; h++, start += L * Lp) {
        for (int64_t i = 0; i < L; i++) {
          const double m = ref_stats[size_t((h * T + offsets[b] + i) * 2)];
          for (int64_t j = 0; j < Lp; j++) {
            const float e = att[size_t(start + i * Lp + j)];
            if (j >= L) {
              padding_zero = padding_zero && e == 0.0f;
              continue;
            }
            double dot = 0.0;
            for (int64_t d = 0; d < hd; d++)
              dot += double(qkv[size_t((offsets[b] + i) * 3 * C + h * hd + d)]) *
                     double(qkv[size_t((offsets[b] + j) * 3 * C + C + h * hd + d)]);
            max_exp_err = std::max(max_exp_err, std::abs(double(e) - std::exp((dot - m) / std::sqrt(double(hd)))));
          }
        }
      }
    }
    CHECK(start == int64_t(att.size()));
    CHECK(max_exp_err < 1e-5);
    CHECK(padding_zero);

    // A sequence of length 1 attends only to itself: its output is its own v.
    for (int64_t c = 0; c < C; c++) CHECK(out[size_t(c)] == qkv[size_t(2 * C + c)]);

    // The inference path (no cache) gives the same bits.
    std::vector<float> out_nocache(static_cast<size_t>(T * C), 3.0f);
    nk::attention_forward(out_nocache.data(), nullptr, qkv.data(), offsets.data(), B, C, NH);
    CHECK(out_nocache == out);
  }
}

TEST_CASE("attention result of a sequence does not depend on its batch-mates") {
  const std::vector<int64_t> lengths = {7, 1, 20, 4};
  const std::vector<int64_t> offsets = offsets_of(lengths);
  const int64_t B = int64_t(lengths.size());
  const int64_t T = offsets[B];
  const int64_t C = 32;
  const int64_t NH = 4;
  const std::vector<float> qkv = random_vector(size_t(T * 3 * C), 7);
  const std::vector<float> dout = random_vector(size_t(T * C), 8);
  std::vector<float> out(static_cast<size_t>(T * C));
  std::vector<float> att(static_cast<size_t>(nk::attention_cache_size(offsets.data(), B, NH)));
  nk::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
  std::vector<float> dqkv(static_cast<size_t>(T * 3 * C), 0.0f);
  nk::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), offsets.data(), B, C, NH);

  for (int64_t b = 0; b < B; b++) {
    CAPTURE(b);
    const int64_t L = lengths[size_t(b)];
    const int64_t t0 = offsets[size_t(b)];
    const std::vector<int64_t> alone_offsets = {0, L};
    const std::vector<float> qkv_alone(qkv.begin() + t0 * 3 * C, qkv.begin() + (t0 + L) * 3 * C);
    const std::vector<float> dout_alone(dout.begin() + t0 * C, dout.begin() + (t0 + L) * C);
    std::vector<float> out_alone(static_cast<size_t>(L * C));
    std::vector<float> att_alone(static_cast<size_t>(nk::attention_cache_size(alone_offsets.data(), 1, NH)));
    nk::attention_forward(out_alone.data(), att_alone.data(), qkv_alone.data(), alone_offsets.data(), 1, C, NH);
    std::vector<float> dqkv_alone(static_cast<size_t>(L * 3 * C), 0.0f);
    nk::attention_backward(dqkv_alone.data(), dout_alone.data(), qkv_alone.data(), att_alone.data(),
                           alone_offsets.data(), 1, C, NH);
    CHECK(out_alone == std::vector<float>(out.begin() + t0 * C, out.begin() + (t0 + L) * C));
    CHECK(dqkv_alone == std::vector<float>(dqkv.begin() + t0 * 3 * C, dqkv.begin() + (t0 + L) * 3 * C));
  }
}

namespace {

// loss = sum(out * weights). Checks attention_backward against central differences, both of the
// float forward itself (loose: float rounding) and of the double reference (tight).
// every > 1: only every every-th input is perturbed (long sequences, where each forward costs L^2).
void check_attention_gradient(const std::vector<int64_t>& lengths, int64_t C, int64_t NH, size_t every = 1) {
  const std::vector<int64_t> offsets = offsets_of(lengths);
  const int64_t B = int64_t(lengths.size());
  const int64_t T = offsets[B];
  const std::vector<float> qkv = random_vector(size_t(T * 3 * C), 11);
  const std::vector<float> weights = random_vector(size_t(T * C), 12);

  // Analytic gradient, accumulated on top of a non-zero dqkv to check the += contract.
  const std::vector<float> base = random_vector(size_t(T * 3 * C), 13);
  std::vector<float> out(static_cast<size_t>(T * C));
  std::vector<float> att(static_cast<size_t>(nk::attention_cache_size(offsets.data(), B, NH)));
  nk::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
  std::vector<float> dqkv = base;
  nk::attention_backward(dqkv.data(), weights.data(), qkv.data(), att.data(), offsets.data(), B, C, NH);
  std::vector<double> grad(dqkv.size());
  for (size_t n = 0; n < grad.size(); n++) grad[n] = double(dqkv[n]) - double(base[n]);

  // Thousands of tiny forwards: one thread, so the time goes to the math and not to waking threads.
  const int saved_threads = normlab::num_threads();
  normlab::set_num_threads(1);
  auto float_loss = [&](const std::vector<float>& x) {
    std::vector<float> y(static_cast<size_t>(T * C));
    nk::attention_forward(y.data(), nullptr, x.data(), offsets.data(), B, C, NH);
    double total = 0.0;
    for (size_t n = 0; n < y.size(); n++) total += double(y[n]) * double(weights[n]);
    return total;
  };
  const std::vector<double> qkv64 = to_double(qkv);
  auto double_loss = [&](const std::vector<double>& x) {
    const std::vector<double> y = reference_attention(x, offsets, C, NH);
    double total = 0.0;
    for (size_t n = 0; n < y.size(); n++) total += y[n] * double(weights[n]);
    return total;
  };
  const float eps32 = 1e-2f;
  const double eps64 = 1e-5;
  double max_err32 = 0.0;
  double max_rel_err64 = 0.0;
  double max_grad = 0.0;
  for (size_t n = 0; n < qkv.size(); n += every) {
    std::vector<float> x = qkv;
    x[n] = qkv[n] + eps32;
    const double plus32 = float_loss(x);
    x[n] = qkv[n] - eps32;
    const double minus32 = float_loss(x);
    max_err32 = std::max(max_err32, std::abs((plus32 - minus32) / (2.0 * double(eps32)) - grad[n]));

    std::vector<double> x64 = qkv64;
    x64[n] = qkv64[n] + eps64;
    const double plus64 = double_loss(x64);
    x64[n] = qkv64[n] - eps64;
    const double minus64 = double_loss(x64);
    const double numeric64 = (plus64 - minus64) / (2.0 * eps64);
    max_rel_err64 = std::max(max_rel_err64, std::abs(numeric64 - grad[n]) / (1.0 + std::abs(numeric64)));
    max_grad = std::max(max_grad, std::abs(grad[n]));
  }
  normlab::set_num_threads(saved_threads);
  CHECK(max_grad > 0.1);
  CHECK(max_err32 < 2e-3 * std::max(1.0, max_grad));
  CHECK(max_rel_err64 < 1e-5);

  // Rows of a length-1 sequence: the output is its own v, so q and k get exactly zero gradient.
  for (int64_t b = 0; b < B; b++) {
    if (lengths[size_t(b)] != 1) continue;
    for (int64_t c = 0; c < 2 * C; c++) CHECK(grad[size_t(offsets[size_t(b)] * 3 * C + c)] == 0.0);
  }
}

}  // namespace

TEST_CASE("attention backward matches central finite differences") {
  SUBCASE("tiny sequences and heads (partial register tiles only)") { check_attention_gradient({1, 3, 4, 2}, 8, 2); }
  SUBCASE("lengths and head size that fill whole 8x8 tiles") { check_attention_gradient({9, 1, 17}, 32, 2); }
  SUBCASE("two query blocks, the second partial") { check_attention_gradient({53, 2}, 8, 1); }
  SUBCASE("a sequence past kAttentionKeptExpsMaxLength: the backward recomputes the exponentials") {
    REQUIRE(nk::kAttentionKeptExpsMaxLength < 260);
    check_attention_gradient({260, 3}, 4, 1, 23);
  }
}

// One length set, at 1, 2 and 3 threads against 1: its own (non-inlined) frame, so the test case's
// frame stays small (AddressSanitizer's fake stack for stack-use-after-return).
[[gnu::noinline]] static void check_attention_deterministic(const std::vector<int64_t>& lengths) {
  const std::vector<int64_t> offsets = offsets_of(lengths);
  const int64_t B = int64_t(lengths.size());
  const int64_t T = offsets[B];
  const int64_t C = 64;
  const int64_t NH = 4;
  CAPTURE(B);
  const std::vector<float> qkv = random_vector(size_t(T * 3 * C), 21);
  const std::vector<float> dout = random_vector(size_t(T * C), 22);
  auto run = [&](std::vector<float>& out, std::vector<float>& dqkv) {
    out.assign(size_t(T * C), 0.0f);
    std::vector<float> att(static_cast<size_t>(nk::attention_cache_size(offsets.data(), B, NH)));
    nk::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
    dqkv.assign(size_t(T * 3 * C), 0.0f);
    nk::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), offsets.data(), B, C, NH);
  };
  std::vector<float> out1, dqkv1, out2, dqkv2;
  normlab::set_num_threads(1);
  run(out1, dqkv1);
  for (int threads = 1; threads <= 3; threads++) {
    CAPTURE(threads);
    normlab::set_num_threads(threads);
    run(out2, dqkv2);
    CHECK(out1 == out2);
    CHECK(dqkv1 == dqkv2);
  }
  CHECK(std::all_of(dqkv1.begin(), dqkv1.end(), [](float x) { return std::isfinite(x); }));
}

TEST_CASE("attention is deterministic run to run and across thread counts") {
  // Three ways of sharing the pairs out: lengths too uneven for contiguous runs of pairs to
  // balance (the pairs are dealt out dynamically); many similar lengths (each thread takes one
  // contiguous run); three sequences of 4 heads, where at 2 threads the cut falls between two
  // heads of the middle sequence.
  const int saved_threads = normlab::num_threads();
  check_attention_deterministic(std::vector<int64_t>{64, 1, 33, 128, 7, 90, 15, 2});
  std::vector<int64_t> similar;
  for (int64_t b = 0; b < 24; b++) similar.push_back(20 + (b * 7) % 21);
  check_attention_deterministic(similar);
  check_attention_deterministic(std::vector<int64_t>(3, 40));
  normlab::set_num_threads(saved_threads);
}

TEST_CASE("attention called from inside another parallel region gives the serial result") {
  // Each caller thread must get its own scratch even when the inner region has a single thread.
  const std::vector<int64_t> offsets = offsets_of({12, 5, 30});
  const int64_t B = 3;
  const int64_t T = offsets[B];
  const int64_t C = 32;
  const int64_t NH = 4;
  const int64_t num_calls = 4;
  std::vector<std::vector<float>> qkv(num_calls), expected(num_calls), got(num_calls);
  for (int64_t n = 0; n < num_calls; n++) {
    qkv[size_t(n)] = random_vector(size_t(T * 3 * C), 100 + uint64_t(n));
    expected[size_t(n)].assign(size_t(T * C), 0.0f);
    got[size_t(n)].assign(size_t(T * C), 0.0f);
    nk::attention_forward(expected[size_t(n)].data(), nullptr, qkv[size_t(n)].data(), offsets.data(), B, C, NH);
  }
#pragma omp parallel for schedule(static) num_threads(2)
  for (int64_t n = 0; n < num_calls; n++) {
    nk::attention_forward(got[size_t(n)].data(), nullptr, qkv[size_t(n)].data(), offsets.data(), B, C, NH);
  }
  for (int64_t n = 0; n < num_calls; n++) CHECK(got[size_t(n)] == expected[size_t(n)]);
}

TEST_CASE("attention is stable for large scores and rejects bad shapes") {
  const std::vector<int64_t> offsets = {0, 3};
  const int64_t C = 4;
  std::vector<float> qkv(static_cast<size_t>(3 * 3 * C), 0.0f);
  for (int64_t t = 0; t < 3; t++) {
    for (int64_t c = 0; c < C; c++) {
      qkv[size_t(t * 3 * C + c)] = 100.0f * float(t + 1);      // q
      qkv[size_t(t * 3 * C + C + c)] = 100.0f * float(t + 1);  // k: scores up to 3.6e4
      qkv[size_t(t * 3 * C + 2 * C + c)] = float(t);           // v
    }
  }
  std::vector<float> out(static_cast<size_t>(3 * C));
  std::vector<float> att(static_cast<size_t>(nk::attention_cache_size(offsets.data(), 1, 1)));
  nk::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), 1, C, 1);
  for (float x : out) CHECK(std::isfinite(x));
  // Every query prefers the largest key by a huge margin: output = v of token 2.
  for (int64_t t = 0; t < 3; t++) CHECK(out[size_t(t * C)] == doctest::Approx(2.0));

  CHECK_THROWS_AS(nk::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), 1, C, 3),
                  normlab::UsageError);
  const std::vector<int64_t> decreasing = {0, 3, 2};
  CHECK_THROWS_AS(nk::attention_forward(out.data(), att.data(), qkv.data(), decreasing.data(), 2, C, 1),
                  normlab::UsageError);
  std::vector<float> dqkv(qkv.size(), 0.0f);
  CHECK_THROWS_AS(nk::attention_backward(dqkv.data(), out.data(), qkv.data(), nullptr, offsets.data(), 1, C, 1),
                  normlab::UsageError);
}

TEST_CASE("attention gives the same bits on every kernel path, short sequences included") {
  // Sequences of 1..17 tokens: up to 16 tokens at head dim 16 run the avx512 path's short-pair
  // kernels, 17 tokens and head dim 32 the general ones; the generic path is the reference.
  namespace nkd = normlab::kernels;
  std::vector<int64_t> lengths;
  for (int64_t L = 1; L <= 17; L++) lengths.push_back(L);
  const std::vector<int64_t> offsets = offsets_of(lengths);
  const int64_t B = int64_t(lengths.size()), T = offsets[B];
  const nkd::Isa saved = nkd::active_isa();
  for (const auto& [C, NH] : {std::pair<int64_t, int64_t>{64, 4}, {32, 2}, {64, 2}}) {
    CAPTURE(C);
    CAPTURE(NH);
    const std::vector<float> qkv = random_vector(size_t(T * 3 * C), 31, 2.0f);
    const std::vector<float> dout = random_vector(size_t(T * C), 32);
    const std::vector<float> start = random_vector(size_t(T * 3 * C), 33);
    struct Result {
      std::vector<float> out, att, dqkv_added, dqkv_written;
    };
    auto run = [&] {
      Result r;
      r.out.assign(size_t(T * C), 0.0f);
      r.att.assign(size_t(nk::attention_cache_size(offsets.data(), B, NH)), 0.0f);
      nk::attention_forward(r.out.data(), r.att.data(), qkv.data(), offsets.data(), B, C, NH);
      // Without the cache (a forward without grad: evaluation) the same output, short pairs included.
      std::vector<float> out_nocache(size_t(T * C), std::nanf(""));
      nk::attention_forward(out_nocache.data(), nullptr, qkv.data(), offsets.data(), B, C, NH);
      CHECK(out_nocache == r.out);
      r.dqkv_added = start;
      nk::attention_backward(nk::GradOut(r.dqkv_added.data(), true), dout.data(), qkv.data(), r.att.data(),
                             offsets.data(), B, C, NH);
      r.dqkv_written.assign(size_t(T * 3 * C), std::nanf(""));
      nk::attention_backward(nk::GradOut(r.dqkv_written.data(), false), dout.data(), qkv.data(), r.att.data(),
                             offsets.data(), B, C, NH);
      return r;
    };
    nkd::set_active_isa(nkd::Isa::generic);
    const Result expected = run();
    for (nkd::Isa isa : {nkd::Isa::avx2, nkd::Isa::avx512}) {
      if (!nkd::cpu_supports(isa)) continue;
      CAPTURE(nkd::isa_name(isa));
      nkd::set_active_isa(isa);
      const Result got = run();
      CHECK(got.out == expected.out);
      CHECK(got.att == expected.att);
      CHECK(got.dqkv_added == expected.dqkv_added);
      CHECK(got.dqkv_written == expected.dqkv_written);
    }
  }
  nkd::set_active_isa(saved);
}

TEST_CASE("short pairs with NaN, infinite and huge scores give every path's results in the same places") {
  // Sequences of 1..16 tokens at head dim 16 (the short-pair kernels of avx2 and avx512): a NaN
  // query (its row of scores NaN), an infinite key (scores +-inf and NaN), a sequence whose every
  // query is NaN (each row's max is -inf, so even the padding keys' exponentials are NaN), huge
  // keys (exponentials that underflow to 0) and an infinite output gradient. Finite results are
  // compared bit for bit with the generic path's; a NaN by being a NaN in the same place (its
  // payload may depend on the instruction order).
  namespace nkd = normlab::kernels;
  const std::vector<int64_t> lengths{3, 16, 1, 9, 12, 8, 5};
  const std::vector<int64_t> offsets = offsets_of(lengths);
  const int64_t B = int64_t(lengths.size()), T = offsets[B], C = 64, NH = 4, C3 = 3 * C;
  std::vector<float> qkv = random_vector(size_t(T * C3), 41, 2.0f);
  std::vector<float> dout = random_vector(size_t(T * C), 42);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  qkv[size_t((offsets[1] + 4) * C3 + 2)] = nan;                                    // a query of sequence 1, head 0
  qkv[size_t((offsets[3] + 2) * C3 + C + 17)] = inf;                               // a key of sequence 3, head 1
  for (int64_t t = offsets[2]; t < offsets[3]; t++) qkv[size_t(t * C3 + 40)] = nan;  // sequence 2, head 2
  for (int64_t t = offsets[4]; t < offsets[5]; t++)                                // every query of sequence 4, head 3
    qkv[size_t(t * C3 + 50)] = nan;
  for (int64_t c = 0; c < C; c++) qkv[size_t((offsets[5] + 3) * C3 + C + c)] *= 1e4f;  // a huge key in sequence 5
  dout[size_t((offsets[6] + 1) * C + 20)] = -inf;                                  // sequence 6, head 1
  struct Result {
    std::vector<float> out, att, dqkv_added, dqkv_written;
  };
  auto run = [&] {
    Result r;
    r.out.assign(size_t(T * C), 0.0f);
    r.att.assign(size_t(nk::attention_cache_size(offsets.data(), B, NH)), 0.0f);
    nk::attention_forward(r.out.data(), r.att.data(), qkv.data(), offsets.data(), B, C, NH);
    r.dqkv_added = random_vector(size_t(T * C3), 43);
    nk::attention_backward(nk::GradOut(r.dqkv_added.data(), true), dout.data(), qkv.data(), r.att.data(),
                           offsets.data(), B, C, NH);
    r.dqkv_written.assign(size_t(T * C3), 0.0f);
    nk::attention_backward(nk::GradOut(r.dqkv_written.data(), false), dout.data(), qkv.data(), r.att.data(),
                           offsets.data(), B, C, NH);
    return r;
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return false;
      if (!std::isnan(a[i]) && std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
    }
    return true;
  };
  const nkd::Isa saved = nkd::active_isa();
  nkd::set_active_isa(nkd::Isa::generic);
  const Result expected = run();
  size_t nans = 0;
  for (float x : expected.out) nans += std::isnan(x);
  CHECK(nans > 0);                         // the NaN rows are NaN...
  CHECK(nans < expected.out.size() / 4);  // ...and the rest are numbers
  for (nkd::Isa isa : {nkd::Isa::avx2, nkd::Isa::avx512}) {
    if (!nkd::cpu_supports(isa)) continue;
    CAPTURE(nkd::isa_name(isa));
    nkd::set_active_isa(isa);
    const Result got = run();
    CHECK(same(got.out, expected.out));
    CHECK(same(got.att, expected.att));
    CHECK(same(got.dqkv_added, expected.dqkv_added));
    CHECK(same(got.dqkv_written, expected.dqkv_written));
  }
  nkd::set_active_isa(saved);
}

TEST_CASE("attention: each head's bits do not depend on the other heads") {
  // A (sequence, head) pair reads only its own head's columns of qkv, whatever kernel runs it (the
  // short pairs' forms included) and however the pairs are grouped or split over threads. Heads
  // 0-2 of a 4-head layout (d_model 64) hold the numbers of a 3-head layout (d_model 48): their
  // outputs, statistics and gradients (the backward reads the exponentials the forward kept) must
  // be the same bits, NaN payloads included, on every path, with and without the cache. Lengths
  // 1-16 and NaN, infinite and huge values as in the test above.
  namespace nkd = normlab::kernels;
  std::vector<int64_t> lengths;
  for (int64_t L = 1; L <= 16; L++) lengths.push_back(L);
  lengths.push_back(5);
  const std::vector<int64_t> offsets = offsets_of(lengths);
  const int64_t B = int64_t(lengths.size()), T = offsets[B];
  const int64_t C3h = 48, C4h = 64;  // d_model of the 3- and 4-head layouts
  std::vector<float> qkv3 = random_vector(size_t(T * 3 * C3h), 51, 2.0f);
  const std::vector<float> dout3 = random_vector(size_t(T * C3h), 52);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  qkv3[size_t((offsets[9] + 4) * 3 * C3h + 2)] = nan;                                      // a query, head 0
  qkv3[size_t((offsets[11] + 2) * 3 * C3h + C3h + 17)] = inf;                              // a key, head 1
  for (int64_t t = offsets[6]; t < offsets[7]; t++) qkv3[size_t(t * 3 * C3h + 40)] = nan;  // every query, head 2
  for (int64_t c = 0; c < C3h; c++) qkv3[size_t((offsets[13] + 3) * 3 * C3h + C3h + c)] *= 1e4f;  // a huge key
  // The same numbers in heads 0-2 of the 4-head layout; head 3 its own.
  std::vector<float> qkv4 = random_vector(size_t(T * 3 * C4h), 53, 2.0f);
  std::vector<float> dout4 = random_vector(size_t(T * C4h), 54);
  for (int64_t t = 0; t < T; t++)
    for (int64_t part = 0; part < 3; part++)
      for (int64_t c = 0; c < C3h; c++) qkv4[size_t(t * 3 * C4h + part * C4h + c)] = qkv3[size_t(t * 3 * C3h + part * C3h + c)];
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < C3h; c++) dout4[size_t(t * C4h + c)] = dout3[size_t(t * C3h + c)];
  struct Result {
    std::vector<float> out, out_nocache, att, dqkv;
  };
  auto run = [&](const std::vector<float>& qkv, const std::vector<float>& dout, int64_t C, int64_t NH) {
    Result r;
    r.out.assign(size_t(T * C), 0.0f);
    r.out_nocache.assign(size_t(T * C), 0.0f);
    r.att.assign(size_t(nk::attention_cache_size(offsets.data(), B, NH)), 0.0f);
    nk::attention_forward(r.out.data(), r.att.data(), qkv.data(), offsets.data(), B, C, NH);
    nk::attention_forward(r.out_nocache.data(), nullptr, qkv.data(), offsets.data(), B, C, NH);
    r.dqkv.assign(size_t(T * 3 * C), 0.0f);
    nk::attention_backward(nk::GradOut(r.dqkv.data(), false), dout.data(), qkv.data(), r.att.data(), offsets.data(),
                           B, C, NH);
    return r;
  };
  const nkd::Isa saved = nkd::active_isa();
  for (nkd::Isa isa : {nkd::Isa::generic, nkd::Isa::avx2, nkd::Isa::avx512}) {
    if (!nkd::cpu_supports(isa)) continue;
    CAPTURE(nkd::isa_name(isa));
    nkd::set_active_isa(isa);
    const Result three = run(qkv3, dout3, C3h, 3), four = run(qkv4, dout4, C4h, 4);
    bool out_same = true, stats_same = true, dqkv_same = true;
    size_t nans = 0;
    for (int64_t t = 0; t < T; t++) {
      for (int64_t c = 0; c < C3h; c++) {
        const float a = three.out[size_t(t * C3h + c)], b = four.out[size_t(t * C4h + c)];
        const float b_nocache = four.out_nocache[size_t(t * C4h + c)];
        out_same = out_same && std::memcmp(&a, &b, sizeof(float)) == 0 && std::memcmp(&a, &b_nocache, sizeof(float)) == 0;
        nans += std::isnan(a);
      }
      for (int64_t part = 0; part < 3; part++)
        for (int64_t c = 0; c < C3h; c++) {
          const float a = three.dqkv[size_t(t * 3 * C3h + part * C3h + c)];
          const float b = four.dqkv[size_t(t * 3 * C4h + part * C4h + c)];
          dqkv_same = dqkv_same && std::memcmp(&a, &b, sizeof(float)) == 0;
        }
    }
    // The statistics are head-major, (NH, T, 2): heads 0-2 are the first 3 * 2T floats of both.
    stats_same = std::memcmp(three.att.data(), four.att.data(), size_t(3 * 2 * T) * sizeof(float)) == 0;
    CHECK(out_same);
    CHECK(stats_same);
    CHECK(dqkv_same);
    CHECK(nans > 0);
    CHECK(nans < size_t(T * C3h) / 4);
  }
  nkd::set_active_isa(saved);
}
