// Softmax, activations, DyT, embedding, cross-entropy and dropout kernels: forwards against double
// reference loops, backwards against central finite differences.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/activations.hpp"
#include "normlab/kernels/cross_entropy.hpp"
#include "normlab/kernels/dropout.hpp"
#include "normlab/kernels/embedding.hpp"
#include "normlab/kernels/softmax.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

namespace nk = normlab::kernels;

namespace {

std::vector<float> random_vector(size_t n, uint64_t seed, float stddev = 1.0f) {
  normlab::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal(0.0f, stddev);
  return v;
}

// Central differences of a scalar loss (evaluated in float kernels, accumulated in double) with
// respect to every entry of x; compared with the analytic gradient relative to its largest entry.
void check_gradient(std::vector<float>& x, const std::vector<double>& analytic, const std::function<double()>& loss,
                    float eps = 1e-2f, double tolerance = 2e-3) {
  REQUIRE(x.size() == analytic.size());
  // Many tiny forwards: one thread, so the time goes to the math and not to waking threads.
  const int saved_threads = normlab::num_threads();
  normlab::set_num_threads(1);
  double max_err = 0.0;
  double max_grad = 0.0;
  for (size_t n = 0; n < x.size(); n++) {
    const float saved = x[n];
    x[n] = saved + eps;
    const double plus = loss();
    x[n] = saved - eps;
    const double minus = loss();
    x[n] = saved;
    const double numeric = (plus - minus) / (2.0 * double(eps));
    max_err = std::max(max_err, std::abs(numeric - analytic[n]));
    max_grad = std::max(max_grad, std::abs(analytic[n]));
  }
  normlab::set_num_threads(saved_threads);
  CHECK(max_grad > 0.0);
  CHECK(max_err <= tolerance * std::max(1.0, max_grad));
}

double weighted_sum(const std::vector<float>& y, const std::vector<float>& w) {
  double total = 0.0;
  for (size_t n = 0; n < y.size(); n++) total += double(y[n]) * double(w[n]);
  return total;
}

// Analytic gradient that a backward accumulated on top of `base`.
std::vector<double> minus_base(const std::vector<float>& accumulated, const std::vector<float>& base) {
  std::vector<double> g(accumulated.size());
  for (size_t n = 0; n < g.size(); n++) g[n] = double(accumulated[n]) - double(base[n]);
  return g;
}

}  // namespace

TEST_CASE("kernels softmax forward and backward") {
  const int64_t rows = 6;
  const int64_t cols = 11;
  std::vector<float> x = random_vector(size_t(rows * cols), 1, 3.0f);
  x[0] = 80.0f;  // large logits must not overflow
  x[1] = 85.0f;
  std::vector<float> y(x.size());
  nk::softmax_forward(y.data(), x.data(), rows, cols);
  for (int64_t r = 0; r < rows; r++) {
    double sum = 0.0;
    for (int64_t c = 0; c < cols; c++) sum += std::exp(double(x[size_t(r * cols + c)]));
    for (int64_t c = 0; c < cols; c++) {
      const double ref = std::exp(double(x[size_t(r * cols + c)])) / sum;
      CHECK(double(y[size_t(r * cols + c)]) == doctest::Approx(ref).epsilon(1e-6).scale(1e-6));
    }
  }

  const std::vector<float> w = random_vector(x.size(), 2);
  const std::vector<float> base = random_vector(x.size(), 3);
  x[0] = 0.5f;  // finite differences need moderate logits
  x[1] = -0.3f;
  std::vector<float> dx = base;
  nk::softmax_forward(y.data(), x.data(), rows, cols);
  nk::softmax_backward(dx.data(), w.data(), y.data(), rows, cols);
  check_gradient(x, minus_base(dx, base), [&] {
    std::vector<float> yy(x.size());
    nk::softmax_forward(yy.data(), x.data(), rows, cols);
    return weighted_sum(yy, w);
  });
}

TEST_CASE("kernels relu and exact gelu") {
  CHECK(double([] {
          float x = 1.0f, y = 0.0f;
          nk::gelu_forward(&y, &x, 1);
          return y;
        }()) == doctest::Approx(0.8413447460685429).epsilon(1e-7));
  // Known values of x * Phi(x) (the tanh approximation misses these in the 4th-5th digit).
  const std::vector<float> known_x = {-3.0f, -1.0f, -0.5f, 0.0f, 0.5f, 2.0f};
  const std::vector<double> known_y = {-0.00404969409489031, -0.15865525393145707, -0.15426876936299344, 0.0,
                                       0.34573123063700656,  1.9544997361036416};
  std::vector<float> known_out(known_x.size());
  nk::gelu_forward(known_out.data(), known_x.data(), int64_t(known_x.size()));
  for (size_t n = 0; n < known_x.size(); n++) {
    CAPTURE(known_x[n]);
    CHECK(double(known_out[n]) == doctest::Approx(known_y[n]).epsilon(1e-6).scale(1e-6));
  }

  const int64_t N = 257;
  std::vector<float> x = random_vector(size_t(N), 4, 2.0f);
  std::vector<float> y(x.size());
  nk::gelu_forward(y.data(), x.data(), N);
  for (int64_t n = 0; n < N; n++) {
    const double xd = double(x[size_t(n)]);
    const double ref = 0.5 * xd * (1.0 + std::erf(xd / std::sqrt(2.0)));
    CHECK(double(y[size_t(n)]) == doctest::Approx(ref).epsilon(1e-6).scale(1e-6));
  }
  nk::relu_forward(y.data(), x.data(), N);
  for (int64_t n = 0; n < N; n++) CHECK(y[size_t(n)] == std::max(x[size_t(n)], 0.0f));

  const std::vector<float> w = random_vector(x.size(), 5);
  const std::vector<float> base = random_vector(x.size(), 6);
  SUBCASE("gelu backward") {
    std::vector<float> dx = base;
    nk::gelu_backward(dx.data(), w.data(), x.data(), N);
    check_gradient(x, minus_base(dx, base), [&] {
      std::vector<float> yy(x.size());
      nk::gelu_forward(yy.data(), x.data(), N);
      return weighted_sum(yy, w);
    });
  }
  SUBCASE("relu backward") {
    for (auto& v : x) {
      if (std::abs(v) < 0.05f) v = 0.5f;  // keep finite differences off the kink
    }
    std::vector<float> dx = base;
    nk::relu_backward(dx.data(), w.data(), x.data(), N);
    check_gradient(x, minus_base(dx, base), [&] {
      std::vector<float> yy(x.size());
      nk::relu_forward(yy.data(), x.data(), N);
      return weighted_sum(yy, w);
    });
    float zero = 0.0f, one = 1.0f, dzero = 0.0f;
    nk::relu_backward(&dzero, &one, &zero, 1);
    CHECK(dzero == 0.0f);
  }
}

TEST_CASE("kernels dyt forward and backward") {
  const int64_t N = 37;
  const int64_t C = 12;
  std::vector<float> x = random_vector(size_t(N * C), 7, 1.5f);
  std::vector<float> alpha = {0.7f};
  std::vector<float> gamma = random_vector(size_t(C), 8);
  std::vector<float> beta = random_vector(size_t(C), 9);
  std::vector<float> y(x.size());
  nk::dyt_forward(y.data(), x.data(), alpha.data(), gamma.data(), beta.data(), N, C);
  for (int64_t n = 0; n < N; n++) {
    for (int64_t c = 0; c < C; c++) {
      const double ref = double(gamma[size_t(c)]) * std::tanh(double(alpha[0]) * double(x[size_t(n * C + c)])) +
                         double(beta[size_t(c)]);
      // absolute error relative to the size of the terms: gamma t + beta can cancel
      const double term_size = std::abs(double(gamma[size_t(c)])) + std::abs(double(beta[size_t(c)]));
      CHECK(std::abs(double(y[size_t(n * C + c)]) - ref) <= 1e-6 * term_size);
    }
  }

  const std::vector<float> w = random_vector(x.size(), 10);
  auto loss = [&] {
    std::vector<float> yy(x.size());
    nk::dyt_forward(yy.data(), x.data(), alpha.data(), gamma.data(), beta.data(), N, C);
    return weighted_sum(yy, w);
  };
  const std::vector<float> base_x = random_vector(x.size(), 11);
  const std::vector<float> base_g = random_vector(size_t(C), 12);
  const std::vector<float> base_b = random_vector(size_t(C), 13);
  const std::vector<float> base_a = {0.25f};
  std::vector<float> dx = base_x, dg = base_g, db = base_b, da = base_a;
  nk::dyt_backward(dx.data(), da.data(), dg.data(), db.data(), w.data(), x.data(), alpha.data(), gamma.data(), N, C);
  SUBCASE("inp") { check_gradient(x, minus_base(dx, base_x), loss); }
  SUBCASE("alpha") { check_gradient(alpha, minus_base(da, base_a), loss, 1e-3f, 1e-3); }
  SUBCASE("gamma") { check_gradient(gamma, minus_base(dg, base_g), loss); }
  SUBCASE("beta") { check_gradient(beta, minus_base(db, base_b), loss); }
  SUBCASE("no input gradient, same parameter gradients, deterministic") {
    std::vector<float> dg2 = base_g, db2 = base_b, da2 = base_a;
    nk::dyt_backward(nullptr, da2.data(), dg2.data(), db2.data(), w.data(), x.data(), alpha.data(), gamma.data(), N, C);
    CHECK(dg2 == dg);
    CHECK(db2 == db);
    CHECK(da2 == da);
  }
}

TEST_CASE("kernels embedding forward, backward and id validation") {
  const int64_t V = 9;
  const int64_t C = 5;
  const std::vector<int32_t> ids = {3, 0, 8, 3, 3, 1};
  const int64_t N = int64_t(ids.size());
  const std::vector<float> weight = random_vector(size_t(V * C), 14);
  std::vector<float> out(static_cast<size_t>(N * C));
  nk::embedding_forward(out.data(), ids.data(), weight.data(), N, V, C);
  for (int64_t n = 0; n < N; n++) {
    for (int64_t c = 0; c < C; c++) CHECK(out[size_t(n * C + c)] == weight[size_t(ids[size_t(n)] * C + c)]);
  }

  const std::vector<float> dout = random_vector(size_t(N * C), 15);
  const std::vector<float> base = random_vector(size_t(V * C), 16);
  std::vector<float> dweight = base;
  nk::embedding_backward(dweight.data(), dout.data(), ids.data(), N, V, C);
  std::vector<double> ref(base.begin(), base.end());
  for (int64_t n = 0; n < N; n++) {
    for (int64_t c = 0; c < C; c++) ref[size_t(ids[size_t(n)] * C + c)] += double(dout[size_t(n * C + c)]);
  }
  for (size_t k = 0; k < ref.size(); k++) CHECK(double(dweight[k]) == doctest::Approx(ref[k]).epsilon(1e-6));

  const std::vector<int32_t> too_big = {0, 9};
  const std::vector<int32_t> negative = {-1, 2};
  CHECK_THROWS_AS(nk::embedding_forward(out.data(), too_big.data(), weight.data(), 2, V, C), normlab::UsageError);
  CHECK_THROWS_AS(nk::embedding_forward(out.data(), negative.data(), weight.data(), 2, V, C), normlab::UsageError);
  CHECK_THROWS_AS(nk::embedding_backward(dweight.data(), dout.data(), too_big.data(), 2, V, C), normlab::UsageError);
}

TEST_CASE("kernels cross-entropy with ignored targets") {
  const int64_t N = 7;
  const int64_t V = 6;
  std::vector<float> logits = random_vector(size_t(N * V), 17, 2.0f);
  logits[0] = 1000.0f;  // log-sum-exp: a huge logit must give a finite loss
  const std::vector<int32_t> targets = {2, -1, 5, 0, -1, 3, 3};
  std::vector<float> losses(static_cast<size_t>(N), -1.0f);
  std::vector<float> probs(static_cast<size_t>(N * V));
  const float mean = nk::cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);

  double total = 0.0;
  int count = 0;
  for (int64_t n = 0; n < N; n++) {
    const int32_t t = targets[size_t(n)];
    if (t == -1) {
      CHECK(losses[size_t(n)] == 0.0f);
      continue;
    }
    double maxval = -INFINITY;
    for (int64_t v = 0; v < V; v++) maxval = std::max(maxval, double(logits[size_t(n * V + v)]));
    double sum = 0.0;
    for (int64_t v = 0; v < V; v++) sum += std::exp(double(logits[size_t(n * V + v)]) - maxval);
    const double ref = std::log(sum) + maxval - double(logits[size_t(n * V + t)]);
    CHECK(double(losses[size_t(n)]) == doctest::Approx(ref).epsilon(1e-5).scale(1e-5));
    total += ref;
    count++;
  }
  CHECK(std::isfinite(mean));
  CHECK(double(mean) == doctest::Approx(total / count).epsilon(1e-6));

  logits[0] = 0.3f;  // finite differences need moderate logits
  nk::cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  const std::vector<float> base = random_vector(logits.size(), 18);
  std::vector<float> dlogits = base;
  const float dloss = 1.7f;
  nk::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V, dloss);
  const std::vector<double> grad = minus_base(dlogits, base);
  for (int64_t v = 0; v < V; v++) {
    CHECK(grad[size_t(1 * V + v)] == 0.0);  // ignored rows get no gradient
    CHECK(grad[size_t(4 * V + v)] == 0.0);
  }
  check_gradient(logits, grad, [&] {
    std::vector<float> l(static_cast<size_t>(N)), p(static_cast<size_t>(N * V));
    return double(dloss) * double(nk::cross_entropy_forward(l.data(), p.data(), logits.data(), targets.data(), N, V));
  });

  // Everything ignored: loss 0, no gradient.
  const std::vector<int32_t> all_ignored(static_cast<size_t>(N), -1);
  CHECK(nk::cross_entropy_forward(losses.data(), probs.data(), logits.data(), all_ignored.data(), N, V) == 0.0f);
  std::vector<float> untouched = base;
  nk::cross_entropy_backward(untouched.data(), probs.data(), all_ignored.data(), N, V, 1.0f);
  CHECK(untouched == base);

  const std::vector<int32_t> bad = {0, 6, 0, 0, 0, 0, 0};
  CHECK_THROWS_AS(nk::cross_entropy_forward(losses.data(), probs.data(), logits.data(), bad.data(), N, V),
                  normlab::UsageError);
}

TEST_CASE("kernels dropout statistics, determinism and exact p=0") {
  // A packed batch of 5 sequences (lengths 7, 1, 992, 3, 3997), C features: 200000 elements.
  const int64_t C = 40, B = 5;
  const std::vector<int64_t> offsets = {0, 7, 8, 1000, 1003, 5000};
  const int64_t N = offsets.back() * C;
  const std::vector<float> x = random_vector(size_t(N), 19);
  std::vector<float> y(static_cast<size_t>(N)), mask(static_cast<size_t>(N));
  auto forward = [&](std::vector<float>& out, std::vector<float>& m, const std::vector<float>& in, float p,
                     uint64_t key, int64_t first_sequence = 0) {
    nk::dropout_forward(out.data(), m.data(), in.data(), offsets.data(), B, C, p, key, first_sequence);
  };
  for (float p : {0.1f, 0.5f}) {
    CAPTURE(p);
    const uint64_t key = nk::dropout_key(1234, 7, 0);
    forward(y, mask, x, p, key);
    int64_t kept = 0;
    int64_t bad_mask = 0;
    int64_t bad_out = 0;
    double sum_ones = 0.0;
    const float scale = 1.0f / (1.0f - p);
    std::vector<float> ones(static_cast<size_t>(N), 1.0f), y_ones(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; n++) {
      const float m = mask[size_t(n)];
      if (m != 0.0f && m != scale) bad_mask++;
      if (m != 0.0f) kept++;
      if (y[size_t(n)] != x[size_t(n)] * m) bad_out++;
    }
    CHECK(bad_mask == 0);
    CHECK(bad_out == 0);
    // Fraction kept ~ Binomial(N, 1-p)/N: 5 standard deviations.
    const double frac = double(kept) / double(N);
    CHECK(std::abs(frac - (1.0 - p)) < 5.0 * std::sqrt(p * (1.0 - p) / double(N)));
    // Mean preserved: dropout of a vector of ones averages to 1.
    forward(y_ones, mask, ones, p, nk::dropout_key(99, 7, 0));
    for (float v : y_ones) sum_ones += double(v);
    CHECK(std::abs(sum_ones / double(N) - 1.0) < 5.0 * std::sqrt(p / (1.0 - p) / double(N)));

    // Same key, same mask; another seed, step, call site or global sequence index: another mask.
    std::vector<float> y2(static_cast<size_t>(N)), mask2(static_cast<size_t>(N)), mask3(static_cast<size_t>(N));
    forward(y2, mask2, x, p, key);
    CHECK(y2 == y);
    for (uint64_t other : {nk::dropout_key(1235, 7, 0), nk::dropout_key(1234, 8, 0), nk::dropout_key(1234, 7, 1)}) {
      forward(y2, mask3, x, p, other);
      CHECK(mask3 != mask2);
    }
    forward(y2, mask3, x, p, key, 1);
    CHECK(mask3 != mask2);

    // The mask is the documented formula: element (position t, feature c) of sequence b is kept
    // when the 24 high bits of draw t * C + c of splitmix64 seeded with draw b of splitmix64 seeded
    // with the key, over 2^24, are >= p. Written out here on its own, for a few elements.
    auto splitmix = [](uint64_t seed, uint64_t n) {
      uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ULL;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      return z ^ (z >> 31);
    };
    for (int64_t b = 0; b < B; b++) {
      for (int64_t t = 0; t < std::min<int64_t>(offsets[b + 1] - offsets[b], 3); t++) {
        for (int64_t c : {int64_t{0}, int64_t{17}, C - 1}) {
          const uint64_t bits = splitmix(splitmix(key, uint64_t(b)), uint64_t(t * C + c));
          const bool keep = double(bits >> 40) / 16777216.0 >= double(p);
          CHECK(mask2[size_t((offsets[b] + t) * C + c)] == (keep ? scale : 0.0f));
        }
      }
    }

    // Backward: dinp += dout * mask, checked by finite differences of the forward on a small batch.
    const std::vector<int64_t> small = {0, 3, 8};  // 2 sequences, 8 tokens
    const int64_t n_small = 8 * C;
    std::vector<float> xs(x.begin(), x.begin() + n_small), ms(static_cast<size_t>(n_small));
    const std::vector<float> w = random_vector(size_t(n_small), 20);
    const std::vector<float> base = random_vector(size_t(n_small), 21);
    std::vector<float> ys(static_cast<size_t>(n_small)), dx = base;
    nk::dropout_forward(ys.data(), ms.data(), xs.data(), small.data(), 2, C, p, key, 0);
    nk::dropout_backward(dx.data(), w.data(), ms.data(), n_small);
    check_gradient(xs, minus_base(dx, base), [&] {
      std::vector<float> out(static_cast<size_t>(n_small)), m(static_cast<size_t>(n_small));
      nk::dropout_forward(out.data(), m.data(), xs.data(), small.data(), 2, C, p, key, 0);
      return weighted_sum(out, w);
    });
  }

  forward(y, mask, x, 0.0f, 5);
  CHECK(y == x);
  CHECK(std::all_of(mask.begin(), mask.end(), [](float m) { return m == 1.0f; }));
  forward(y, mask, x, 1.0f, 5);
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
  CHECK_THROWS_AS(forward(y, mask, x, 1.5f, 5), normlab::UsageError);
  CHECK_THROWS_AS(forward(y, mask, x, -0.1f, 5), normlab::UsageError);
}
