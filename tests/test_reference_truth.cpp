// Every reference kernel (kernels/reference/) against an independent truth written here in float64:
// the forward from the textbook (PyTorch's) formula, the backward by central differences of that
// float64 forward (so no analytic gradient is trusted), train and eval mode. The other kernel tests
// compare the fast kernels with these; this file keeps the yardstick itself honest (a LayerNorm
// with the unbiased variance, or a BatchNorm dividing by running_var + eps in eval mode, fails
// here even when fast and reference kernels agree with each other).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "normlab/kernels/reference/activations.hpp"
#include "normlab/kernels/reference/attention.hpp"
#include "normlab/kernels/reference/batch_norm.hpp"
#include "normlab/kernels/reference/cross_entropy.hpp"
#include "normlab/kernels/reference/layer_norm.hpp"
#include "normlab/kernels/reference/matmul.hpp"
#include "normlab/kernels/reference/rms_norm.hpp"
#include "normlab/kernels/reference/softmax.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/rng.hpp"
#include "normlab/tensor.hpp"
#include "isa_support.hpp"
#include "support.hpp"

namespace ref = normlab::kernels::reference;
using normlab::test::relative_max_error;
using Vec = std::vector<double>;
using Fn = std::function<Vec(const Vec&)>;

namespace {

// Float32 inputs (what the kernels take) and the same values in double (what the truth takes).
std::vector<float> normals(uint64_t seed, size_t n, float mean = 0.0f, float stddev = 1.0f) {
  normlab::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.normal(mean, stddev);
  return v;
}
Vec widen(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// d/dx_i of sum_j dout_j * f(x)_j by central differences in double (h = 1e-5 relative to the
// input's size: truncation ~h^2, rounding ~1e-16/h, both far below float's 6e-8).
Vec numeric_grad(const Fn& f, Vec x, const Vec& dout) {
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i], h = 1e-5 * std::max(1.0, std::fabs(saved));
    x[i] = saved + h;
    const Vec plus = f(x);
    x[i] = saved - h;
    const Vec minus = f(x);
    x[i] = saved;
    double g = 0.0;
    for (size_t j = 0; j < dout.size(); ++j) g += dout[j] * (plus[j] - minus[j]);
    grad[i] = g / (2.0 * h);
  }
  return grad;
}

// A backward kernel adds (+=) into its gradient buffers: they start at 0.25 here, taken off after.
constexpr float kStart = 0.25f;
std::vector<float> minus_start(std::vector<float> v) {
  for (float& x : v) x -= kStart;
  return v;
}

constexpr double kTol = 2e-5;  // float32 results of float64 arithmetic, relative to the largest entry

// ---------------------------------------------------------------- truths (float64, PyTorch's formulas)

// torch.nn.functional.layer_norm over the last dimension: biased variance (divided by C).
Vec layer_norm_truth(const Vec& x, const Vec& gamma, const Vec& beta, int64_t N, int64_t C, double eps,
                     Vec* mean = nullptr, Vec* rstd = nullptr) {
  Vec y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double m = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; ++c) m += x[size_t(n * C + c)] / double(C);
    for (int64_t c = 0; c < C; ++c) var += std::pow(x[size_t(n * C + c)] - m, 2) / double(C);
    for (int64_t c = 0; c < C; ++c)
      y[size_t(n * C + c)] = (x[size_t(n * C + c)] - m) / std::sqrt(var + eps) * gamma[size_t(c)] + beta[size_t(c)];
    if (mean) mean->push_back(m);
    if (rstd) rstd->push_back(1.0 / std::sqrt(var + eps));
  }
  return y;
}

// torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) * gamma.
Vec rms_norm_truth(const Vec& x, const Vec& gamma, int64_t N, int64_t C, double eps) {
  Vec y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0.0;
    for (int64_t c = 0; c < C; ++c) ms += x[size_t(n * C + c)] * x[size_t(n * C + c)] / double(C);
    for (int64_t c = 0; c < C; ++c)
      y[size_t(n * C + c)] = x[size_t(n * C + c)] / std::sqrt(ms + eps) * gamma[size_t(c)];
  }
  return y;
}

// torch.nn.BatchNorm1d in training mode over (N, C): biased batch variance normalizes.
Vec batch_norm_train_truth(const Vec& x, const Vec& gamma, const Vec& beta, int64_t N, int64_t C, double eps) {
  Vec y(x.size());
  for (int64_t c = 0; c < C; ++c) {
    double m = 0.0, var = 0.0;
    for (int64_t n = 0; n < N; ++n) m += x[size_t(n * C + c)] / double(N);
    for (int64_t n = 0; n < N; ++n) var += std::pow(x[size_t(n * C + c)] - m, 2) / double(N);
    for (int64_t n = 0; n < N; ++n)
      y[size_t(n * C + c)] = (x[size_t(n * C + c)] - m) / std::sqrt(var + eps) * gamma[size_t(c)] + beta[size_t(c)];
  }
  return y;
}

Vec softmax_truth(const Vec& x, int64_t R, int64_t C) {
  Vec y(x.size());
  for (int64_t r = 0; r < R; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(x[size_t(r * C + c)]);
    for (int64_t c = 0; c < C; ++c) y[size_t(r * C + c)] = std::exp(x[size_t(r * C + c)]) / sum;
  }
  return y;
}

// Multi-head self-attention of packed sequences, softmax(q k^T / sqrt(hd)) v per head, each
// sequence attending to itself only. qkv rows: [q (C) | k (C) | v (C)].
Vec attention_truth(const Vec& qkv, const std::vector<int64_t>& offsets, int64_t C, int64_t NH) {
  const int64_t T = offsets.back(), hd = C / NH;
  Vec out(size_t(T * C), 0.0);
  for (size_t b = 0; b + 1 < offsets.size(); ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) {
        Vec scores;
        for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d)
            dot += qkv[size_t(i * 3 * C + h * hd + d)] * qkv[size_t(j * 3 * C + C + h * hd + d)];
          scores.push_back(dot / std::sqrt(double(hd)));
        }
        const Vec p = softmax_truth(scores, 1, int64_t(scores.size()));
        for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j)
          for (int64_t d = 0; d < hd; ++d)
            out[size_t(i * C + h * hd + d)] += p[size_t(j - offsets[b])] * qkv[size_t(j * 3 * C + 2 * C + h * hd + d)];
      }
  return out;
}

}  // namespace

TEST_CASE("reference truth: LayerNorm forward (biased variance, mean, rstd) and backward against float64") {
  const int64_t N = 5, C = 16;
  const double eps = 1e-5;
  // A mean far from 0 and a small spread: the variance formula matters, not only its shape.
  const std::vector<float> x = normals(1, size_t(N * C), 3.0f, 0.7f), gamma = normals(2, size_t(C), 1.0f, 0.3f),
                           beta = normals(3, size_t(C)), dout = normals(4, size_t(N * C));
  std::vector<float> y(size_t(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  ref::layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N, C, float(eps));
  Vec mean_truth, rstd_truth;
  const Vec y_truth = layer_norm_truth(widen(x), widen(gamma), widen(beta), N, C, eps, &mean_truth, &rstd_truth);
  CHECK(relative_max_error(y, y_truth) < kTol);
  CHECK(relative_max_error(mean, mean_truth) < kTol);
  CHECK(relative_max_error(rstd, rstd_truth, 0.0) < kTol);

  // No affine (gamma, beta nullptr): gamma 1, beta 0.
  std::vector<float> y_plain(size_t(N * C));
  ref::layer_norm_forward(y_plain.data(), nullptr, nullptr, x.data(), nullptr, nullptr, N, C, float(eps));
  CHECK(relative_max_error(y_plain, layer_norm_truth(widen(x), Vec(size_t(C), 1.0), Vec(size_t(C), 0.0), N, C, eps)) <
        kTol);

  std::vector<float> dx(size_t(N * C), kStart), dgamma(size_t(C), kStart), dbeta(size_t(C), kStart);
  ref::layer_norm_backward(dx.data(), dgamma.data(), dbeta.data(), dout.data(), x.data(), gamma.data(), mean.data(),
                           rstd.data(), N, C);
  const Vec g = widen(gamma), b = widen(beta), xv = widen(x);
  CHECK(relative_max_error(minus_start(dx),
                           numeric_grad([&](const Vec& v) { return layer_norm_truth(v, g, b, N, C, eps); }, xv,
                                        widen(dout))) < kTol);
  CHECK(relative_max_error(minus_start(dgamma),
                           numeric_grad([&](const Vec& v) { return layer_norm_truth(xv, v, b, N, C, eps); }, g,
                                        widen(dout))) < kTol);
  CHECK(relative_max_error(minus_start(dbeta),
                           numeric_grad([&](const Vec& v) { return layer_norm_truth(xv, g, v, N, C, eps); }, b,
                                        widen(dout))) < kTol);
}

TEST_CASE("reference truth: RMSNorm forward and backward against float64") {
  const int64_t N = 4, C = 12;
  const double eps = 1e-6;
  const std::vector<float> x = normals(5, size_t(N * C), 0.5f), gamma = normals(6, size_t(C), 1.0f, 0.3f),
                           dout = normals(7, size_t(N * C));
  std::vector<float> y(size_t(N * C)), rstd(static_cast<size_t>(N));
  ref::rms_norm_forward(y.data(), rstd.data(), x.data(), gamma.data(), N, C, float(eps));
  const Vec g = widen(gamma), xv = widen(x);
  CHECK(relative_max_error(y, rms_norm_truth(xv, g, N, C, eps)) < kTol);
  std::vector<float> dx(size_t(N * C), kStart), dgamma(size_t(C), kStart);
  ref::rms_norm_backward(dx.data(), dgamma.data(), dout.data(), x.data(), gamma.data(), rstd.data(), N, C);
  CHECK(relative_max_error(minus_start(dx), numeric_grad([&](const Vec& v) { return rms_norm_truth(v, g, N, C, eps); },
                                                         xv, widen(dout))) < kTol);
  CHECK(relative_max_error(minus_start(dgamma),
                           numeric_grad([&](const Vec& v) { return rms_norm_truth(xv, v, N, C, eps); }, g,
                                        widen(dout))) < kTol);
}

TEST_CASE(
    "reference truth: BatchNorm train (batch statistics, running averages with the unbiased variance), eval (running "
    "statistics) and backward") {
  const int64_t N = 7, C = 5;
  const double eps = 1e-5, momentum = 0.1;
  const std::vector<float> x = normals(8, size_t(N * C), -2.0f, 1.5f), gamma = normals(9, size_t(C), 1.0f, 0.3f),
                           beta = normals(10, size_t(C)), dout = normals(11, size_t(N * C));
  const Vec xv = widen(x), g = widen(gamma), b = widen(beta);
  std::vector<float> y(size_t(N * C)), mean(static_cast<size_t>(C)), rstd(static_cast<size_t>(C));
  std::vector<float> running_mean = normals(12, size_t(C)), running_var(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) running_var[size_t(c)] = 0.5f + 0.25f * float(c);
  const std::vector<float> running_mean0 = running_mean, running_var0 = running_var;
  ref::batch_norm_forward_train(y.data(), mean.data(), rstd.data(), running_mean.data(), running_var.data(), x.data(),
                                gamma.data(), beta.data(), N, C, float(eps), float(momentum), nullptr);
  CHECK(relative_max_error(y, batch_norm_train_truth(xv, g, b, N, C, eps)) < kTol);
  // torch: running = (1 - momentum) running + momentum batch, the variance unbiased (N - 1).
  Vec mean_truth(static_cast<size_t>(C)), rstd_truth(static_cast<size_t>(C)), rm_truth(static_cast<size_t>(C)),
      rv_truth(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double m = 0.0, ss = 0.0;
    for (int64_t n = 0; n < N; ++n) m += xv[size_t(n * C + c)] / double(N);
    for (int64_t n = 0; n < N; ++n) ss += std::pow(xv[size_t(n * C + c)] - m, 2);
    mean_truth[size_t(c)] = m;
    rstd_truth[size_t(c)] = 1.0 / std::sqrt(ss / double(N) + eps);
    rm_truth[size_t(c)] = (1 - momentum) * running_mean0[size_t(c)] + momentum * m;
    rv_truth[size_t(c)] = (1 - momentum) * running_var0[size_t(c)] + momentum * ss / double(N - 1);
  }
  CHECK(relative_max_error(mean, mean_truth) < kTol);
  CHECK(relative_max_error(rstd, rstd_truth, 0.0) < kTol);
  CHECK(relative_max_error(running_mean, rm_truth) < kTol);
  CHECK(relative_max_error(running_var, rv_truth, 0.0) < kTol);

  // Eval: (x - running_mean) / sqrt(running_var + eps) * gamma + beta, each token on its own.
  std::vector<float> y_eval(size_t(N * C));
  ref::batch_norm_forward_eval(y_eval.data(), x.data(), running_mean0.data(), running_var0.data(), gamma.data(),
                               beta.data(), N, C, float(eps));
  Vec eval_truth(size_t(N * C));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      eval_truth[size_t(n * C + c)] = (xv[size_t(n * C + c)] - running_mean0[size_t(c)]) /
                                          std::sqrt(double(running_var0[size_t(c)]) + eps) * g[size_t(c)] +
                                      b[size_t(c)];
  CHECK(relative_max_error(y_eval, eval_truth) < kTol);

  std::vector<float> dx(size_t(N * C), kStart), dgamma(size_t(C), kStart), dbeta(size_t(C), kStart);
  ref::batch_norm_backward(dx.data(), dgamma.data(), dbeta.data(), dout.data(), x.data(), gamma.data(), mean.data(),
                           rstd.data(), N, C, nullptr);
  CHECK(relative_max_error(minus_start(dx),
                           numeric_grad([&](const Vec& v) { return batch_norm_train_truth(v, g, b, N, C, eps); }, xv,
                                        widen(dout))) < kTol);
  CHECK(relative_max_error(minus_start(dgamma),
                           numeric_grad([&](const Vec& v) { return batch_norm_train_truth(xv, v, b, N, C, eps); }, g,
                                        widen(dout))) < kTol);
  CHECK(relative_max_error(minus_start(dbeta),
                           numeric_grad([&](const Vec& v) { return batch_norm_train_truth(xv, g, v, N, C, eps); }, b,
                                        widen(dout))) < kTol);
}

TEST_CASE("reference truth: GELU (erf form) and ReLU, forward and backward") {
  std::vector<float> x = normals(13, 64, 0.0f, 2.0f);
  x[0] = 0.0f;  // ReLU's gradient at exactly 0 is 0, as in PyTorch
  const std::vector<float> dout = normals(14, 64);
  auto gelu = [](const Vec& v) {
    Vec y(v.size());
    for (size_t i = 0; i < v.size(); ++i) y[i] = v[i] * 0.5 * (1.0 + std::erf(v[i] / std::sqrt(2.0)));
    return y;
  };
  std::vector<float> y(64), dx(64, kStart);
  ref::gelu_forward(y.data(), x.data(), 64);
  CHECK(relative_max_error(y, gelu(widen(x))) < kTol);
  ref::gelu_backward(dx.data(), dout.data(), x.data(), 64);
  CHECK(relative_max_error(minus_start(dx), numeric_grad(gelu, widen(x), widen(dout))) < kTol);

  std::vector<float> r(64), dr(64, kStart);
  ref::relu_forward(r.data(), x.data(), 64);
  ref::relu_backward(dr.data(), dout.data(), x.data(), 64);
  for (size_t i = 0; i < 64; ++i) {
    CHECK(r[i] == std::max(0.0f, x[i]));
    CHECK(dr[i] == kStart + (x[i] > 0.0f ? dout[i] : 0.0f));  // the same float sum
  }
}

TEST_CASE("reference truth: softmax and cross-entropy (mean over the targets, -1 ignored), forward and backward") {
  const int64_t R = 4, C = 9;
  const std::vector<float> x = normals(15, size_t(R * C), 0.0f, 3.0f), dout = normals(16, size_t(R * C));
  std::vector<float> y(size_t(R * C)), dx(size_t(R * C), kStart);
  ref::softmax_forward(y.data(), x.data(), R, C);
  CHECK(relative_max_error(y, softmax_truth(widen(x), R, C)) < kTol);
  ref::softmax_backward(dx.data(), dout.data(), y.data(), R, C);
  CHECK(relative_max_error(minus_start(dx), numeric_grad([&](const Vec& v) { return softmax_truth(v, R, C); }, widen(x),
                                                         widen(dout))) < kTol);

  const std::vector<int32_t> targets{3, -1, 0, 8};
  auto loss = [&](const Vec& z) {
    double total = 0.0;
    int count = 0;
    for (int64_t n = 0; n < R; ++n) {
      if (targets[size_t(n)] == -1) continue;
      double sum = 0.0;
      for (int64_t v = 0; v < C; ++v) sum += std::exp(z[size_t(n * C + v)]);
      total += std::log(sum) - z[size_t(n * C + targets[size_t(n)])];
      ++count;
    }
    return Vec{total / count};
  };
  std::vector<float> losses(static_cast<size_t>(R)), probs(size_t(R * C)), dlogits(size_t(R * C), kStart);
  const float mean_loss = ref::cross_entropy_forward(losses.data(), probs.data(), x.data(), targets.data(), R, C);
  CHECK(std::fabs(mean_loss - loss(widen(x))[0]) < kTol * std::fabs(loss(widen(x))[0]));
  CHECK(losses[1] == 0.0f);
  CHECK(relative_max_error(probs, softmax_truth(widen(x), R, C)) < kTol);
  const float dloss = 0.75f;
  ref::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), R, C, dloss);
  CHECK(relative_max_error(minus_start(dlogits), numeric_grad(loss, widen(x), Vec{double(dloss)})) < kTol);
}

TEST_CASE("reference truth: matmul (nn, nt, tn, accumulate) and Linear forward and backward") {
  const int64_t M = 3, K = 5, N = 4;
  const std::vector<float> a = normals(17, size_t(M * K)), b = normals(18, size_t(K * N)),
                           start = normals(19, size_t(M * N));
  // truth[i][j] = sum_k A[i][k] B[k][j] (+ start)
  auto product = [&](bool add) {
    Vec c(size_t(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = add ? start[size_t(i * N + j)] : 0.0;
        for (int64_t k = 0; k < K; ++k) acc += double(a[size_t(i * K + k)]) * b[size_t(k * N + j)];
        c[size_t(i * N + j)] = acc;
      }
    return c;
  };
  // The same product from transposed storage: A^T stored (K, M), B^T stored (N, K).
  std::vector<float> at(size_t(K * M)), bt(size_t(N * K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) at[size_t(k * M + i)] = a[size_t(i * K + k)];
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) bt[size_t(j * K + k)] = b[size_t(k * N + j)];
  for (bool add : {false, true}) {
    std::vector<float> nn = start, nt = start, tn = start;
    ref::matmul_nn(nn.data(), a.data(), b.data(), M, K, N, add, false);
    ref::matmul_nt(nt.data(), a.data(), bt.data(), M, K, N, add, false);
    ref::matmul_tn(tn.data(), at.data(), b.data(), M, K, N, add, false);
    CHECK(relative_max_error(nn, product(add)) < kTol);
    CHECK(relative_max_error(nt, product(add)) < kTol);
    CHECK(relative_max_error(tn, product(add)) < kTol);
  }

  // Linear, PyTorch's layout: y = x W^T + b, W (OC, C).
  const int64_t T = 4, C = 6, OC = 3;
  const std::vector<float> x = normals(20, size_t(T * C)), w = normals(21, size_t(OC * C)),
                           bias = normals(22, size_t(OC)), dout = normals(23, size_t(T * OC));
  auto linear = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
    Vec y(size_t(T * OC));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < OC; ++o) {
        double acc = bv[size_t(o)];
        for (int64_t c = 0; c < C; ++c) acc += xv[size_t(t * C + c)] * wv[size_t(o * C + c)];
        y[size_t(t * OC + o)] = acc;
      }
    return y;
  };
  const Vec xv = widen(x), wv = widen(w), bv = widen(bias);
  std::vector<float> y(size_t(T * OC));
  ref::linear_forward(y.data(), x.data(), w.data(), bias.data(), T, C, OC);
  CHECK(relative_max_error(y, linear(xv, wv, bv)) < kTol);
  std::vector<float> dx(size_t(T * C), kStart), dw(size_t(OC * C), kStart), db(size_t(OC), kStart);
  ref::linear_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), T, C, OC);
  CHECK(relative_max_error(minus_start(dx),
                           numeric_grad([&](const Vec& v) { return linear(v, wv, bv); }, xv, widen(dout))) < kTol);
  CHECK(relative_max_error(minus_start(dw),
                           numeric_grad([&](const Vec& v) { return linear(xv, v, bv); }, wv, widen(dout))) < kTol);
  CHECK(relative_max_error(minus_start(db),
                           numeric_grad([&](const Vec& v) { return linear(xv, wv, v); }, bv, widen(dout))) < kTol);
}

TEST_CASE("reference truth: packed multi-head attention forward and backward against float64") {
  const int64_t C = 8, NH = 2;
  const std::vector<int64_t> offsets{0, 3, 4, 8};  // sequences of 3, 1 and 4 tokens
  const int64_t T = offsets.back(), B = int64_t(offsets.size()) - 1;
  const std::vector<float> qkv = normals(24, size_t(T * 3 * C)), dout = normals(25, size_t(T * C));
  std::vector<float> out(size_t(T * C)), att(size_t(ref::attention_cache_size(offsets.data(), B, NH)));
  ref::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
  CHECK(relative_max_error(out, attention_truth(widen(qkv), offsets, C, NH)) < kTol);
  std::vector<float> dqkv(size_t(T * 3 * C), kStart);
  ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), offsets.data(), B, C, NH);
  CHECK(relative_max_error(minus_start(dqkv),
                           numeric_grad([&](const Vec& v) { return attention_truth(v, offsets, C, NH); }, widen(qkv),
                                        widen(dout))) < kTol);
}

TEST_CASE("reference truth: Adam and AdamW steps against torch.optim's update rule") {
  // The optimizer on the reference path: its scalars in double, then reference::adam_update's loop.
  const normlab::test::ScopedIsa reference_path(normlab::kernels::Isa::reference);
  const int64_t N = 10;
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, wd = 0.1;
  for (bool decoupled : {false, true}) {
    INFO("decoupled " << decoupled);
    normlab::optim::OptimizerOptions options;
    options.name = decoupled ? normlab::optim::OptimizerKind::adamw : normlab::optim::OptimizerKind::adam;
    options.beta1 = float(beta1), options.beta2 = float(beta2), options.eps = float(eps);
    options.weight_decay = float(wd);
    normlab::Tensor param = normlab::Tensor::from_data({N}, normals(26, size_t(N)));
    normlab::optim::Optimizer optimizer(options, {{"linear1.weight", param}});
    Vec p_truth = widen(param.to_vector()), m_truth(size_t(N), 0.0), v_truth(size_t(N), 0.0);
    for (int64_t t = 1; t <= 3; ++t) {
      const std::vector<float> grad = normals(uint64_t(30 + t), size_t(N));
      std::copy(grad.begin(), grad.end(), param.grad_data());
      optimizer.step(lr);
      for (size_t i = 0; i < size_t(N); ++i) {
        double g = grad[i];
        if (decoupled) p_truth[i] *= 1.0 - lr * wd;  // AdamW: decay the weight itself
        else g += wd * p_truth[i];                   // Adam: L2 in the gradient
        m_truth[i] = beta1 * m_truth[i] + (1 - beta1) * g;
        v_truth[i] = beta2 * v_truth[i] + (1 - beta2) * g * g;
        const double m_hat = m_truth[i] / (1 - std::pow(beta1, double(t)));
        const double v_hat = v_truth[i] / (1 - std::pow(beta2, double(t)));
        p_truth[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
      const auto state = optimizer.state();  // exp_avg, then exp_avg_sq
      CHECK(relative_max_error(param.to_vector(), p_truth) < kTol);
      CHECK(relative_max_error(state[0].second.to_vector(), m_truth, 0.0) < kTol);
      CHECK(relative_max_error(state[1].second.to_vector(), v_truth, 0.0) < 1e-4);
    }
  }
}
