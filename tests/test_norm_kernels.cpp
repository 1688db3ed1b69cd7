// RMSNorm, BatchNorm and PowerNorm kernels: the reference kernels, PyTorch golden data (RMSNorm), finite
// differences, running statistics, determinism, and the per-token vs per-batch contrast with
// LayerNorm. Error metric: max|ours - ref| / max(1, max|ref|) per tensor (see
// test_layer_norm_kernels.cpp).
#include <doctest/doctest.h>

#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "normlab/io/npy.hpp"
#include "normlab/kernels/batch_norm.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/kernels/power_norm.hpp"
#include "normlab/kernels/reference/batch_norm.hpp"
#include "normlab/kernels/reference/power_norm.hpp"
#include "normlab/kernels/reference/rms_norm.hpp"
#include "normlab/kernels/rms_norm.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

namespace fs = std::filesystem;
namespace k = normlab::kernels;

using normlab::test::relative_max_error;

namespace {

std::vector<float> normals(normlab::Rng& rng, size_t n, float mean = 0.0f, float stddev = 1.0f) {
  std::vector<float> v(n);
  for (auto& e : v) e = rng.normal(mean, stddev);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct ThreadGuard {
  int saved = normlab::num_threads();
  ~ThreadGuard() { normlab::set_num_threads(saved); }
};

// Central differences of loss = sum(forward() * weights) (accumulated in double) w.r.t. param.
std::vector<double> numeric_gradient(std::vector<float>& param, const std::function<std::vector<float>()>& forward,
                                     const std::vector<float>& weights) {
  auto loss = [&] {
    std::vector<float> y = forward();
    double total = 0.0;
    for (size_t i = 0; i < y.size(); i++) total += double(y[i]) * double(weights[i]);
    return total;
  };
  std::vector<double> grad(param.size());
  for (size_t i = 0; i < param.size(); i++) {
    const float saved = param[i];
    const float h = 1e-2f * std::max(1.0f, std::fabs(saved));
    param[i] = saved + h;
    const float up = param[i];
    const double loss_up = loss();
    param[i] = saved - h;
    const float down = param[i];
    const double loss_down = loss();
    param[i] = saved;
    grad[i] = (loss_up - loss_down) / (double(up) - double(down));
  }
  return grad;
}

// ---- RMSNorm ----

struct RmsResult {
  std::vector<float> y, rstd, dx, dgamma;
};
RmsResult run_rms_norm(const std::vector<float>& x, const std::vector<float>* gamma, const std::vector<float>& dout,
                       int64_t rows, int64_t cols, float eps) {
  RmsResult out;
  out.y.assign(x.size(), 0.0f);
  out.rstd.assign(size_t(rows), 0.0f);
  out.dx.assign(x.size(), 0.0f);
  out.dgamma.assign(size_t(cols), 0.0f);
  const float* g = gamma ? gamma->data() : nullptr;
  k::rms_norm_forward(out.y.data(), out.rstd.data(), x.data(), g, rows, cols, eps);
  k::rms_norm_backward(out.dx.data(), g ? out.dgamma.data() : nullptr, dout.data(), x.data(), g, out.rstd.data(), rows,
                       cols);
  return out;
}

// ---- BatchNorm: the reference kernels (kernels/reference/batch_norm.hpp), widened to double ----

struct BatchNormReference {
  std::vector<double> y, dx, dgamma, dbeta, mean, var;
};
BatchNormReference batch_norm_reference(const std::vector<float>& x, const std::vector<float>& gamma,
                                        const std::vector<float>& beta, const std::vector<float>& dout, int64_t N,
                                        int64_t C, double eps) {
  std::vector<float> y(x.size()), mean(static_cast<size_t>(C)), rstd(static_cast<size_t>(C)), dx(x.size(), 0.0f);
  std::vector<float> dgamma(size_t(C), 0.0f), dbeta(size_t(C), 0.0f);
  // momentum 1 from a zero running_var leaves the unbiased batch variance there
  std::vector<float> running_mean(size_t(C), 0.0f), unbiased_var(size_t(C), 0.0f);
  normlab::kernels::reference::batch_norm_forward_train(y.data(), mean.data(), rstd.data(), running_mean.data(),
                                                        unbiased_var.data(), x.data(), gamma.data(), beta.data(), N, C,
                                                        float(eps), 1.0f, nullptr);
  normlab::kernels::reference::batch_norm_backward(dx.data(), dgamma.data(), dbeta.data(), dout.data(), x.data(),
                                                   gamma.data(), mean.data(), rstd.data(), N, C, nullptr);
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  BatchNormReference ref{wide(y), wide(dx), wide(dgamma), wide(dbeta), wide(mean), wide(unbiased_var)};
  for (double& v : ref.var) v = v * double(N - 1) / double(N);  // biased, as normalization uses it
  return ref;
}

struct BatchNormResult {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};
BatchNormResult run_batch_norm(const std::vector<float>& x, const std::vector<float>& gamma,
                               const std::vector<float>& beta, const std::vector<float>& dout, int64_t N, int64_t C,
                               float eps) {
  BatchNormResult out;
  out.y.assign(x.size(), 0.0f);
  out.mean.assign(size_t(C), 0.0f);
  out.rstd.assign(size_t(C), 0.0f);
  out.dx.assign(x.size(), 0.0f);
  out.dgamma.assign(size_t(C), 0.0f);
  out.dbeta.assign(size_t(C), 0.0f);
  k::batch_norm_forward_train(out.y.data(), out.mean.data(), out.rstd.data(), nullptr, nullptr, x.data(), gamma.data(),
                              beta.data(), N, C, eps, 0.1f);
  k::batch_norm_backward(out.dx.data(), out.dgamma.data(), out.dbeta.data(), dout.data(), x.data(), gamma.data(),
                         out.mean.data(), out.rstd.data(), N, C);
  return out;
}

}  // namespace

TEST_CASE("rmsnorm golden case matches the PyTorch formula (forward 1e-5, gradients 1e-4)") {
  const fs::path dir = fs::path(NORMLAB_TEST_DATA_DIR) / "layernorm" / "rms_norm_3x10x64";
  auto x = normlab::io::read_npy((dir / "x.npy").string());
  auto gamma = normlab::io::read_npy((dir / "gamma.npy").string());
  auto dout = normlab::io::read_npy((dir / "dout.npy").string());
  auto y_ref = normlab::io::read_npy((dir / "y.npy").string());
  auto dx_ref = normlab::io::read_npy((dir / "dx.npy").string());
  auto dgamma_ref = normlab::io::read_npy((dir / "dgamma.npy").string());
  REQUIRE(x.shape == std::vector<int64_t>{3, 10, 64});
  RmsResult ours = run_rms_norm(x.data, &gamma.data, dout.data, 30, 64, 1e-6f);
  CHECK(relative_max_error(ours.y, y_ref.data) <= 1e-5);
  CHECK(relative_max_error(ours.dx, dx_ref.data) <= 1e-4);
  CHECK(relative_max_error(ours.dgamma, dgamma_ref.data) <= 1e-4);
}

TEST_CASE("rmsnorm matches the reference kernel and has unit mean square with identity gamma") {
  normlab::Rng rng(21);
  const int64_t rows = 11, cols = 333;
  std::vector<float> x = normals(rng, size_t(rows * cols), 0.7f, 3.0f);
  std::vector<float> dout = normals(rng, x.size());
  std::vector<float> gamma = normals(rng, size_t(cols), 1.0f, 0.2f);
  const double eps = 1e-6;
  std::vector<float> y_ref(x.size()), rstd_ref(static_cast<size_t>(rows));
  std::vector<float> dx_ref(x.size(), 0.0f), dgamma_ref(size_t(cols), 0.0f);
  normlab::kernels::reference::rms_norm_forward(y_ref.data(), rstd_ref.data(), x.data(), gamma.data(), rows, cols,
                                                float(eps));
  normlab::kernels::reference::rms_norm_backward(dx_ref.data(), dgamma_ref.data(), dout.data(), x.data(), gamma.data(),
                                                 rstd_ref.data(), rows, cols);
  RmsResult ours = run_rms_norm(x, &gamma, dout, rows, cols, float(eps));
  CHECK(relative_max_error(ours.y, y_ref) <= 1e-5);
  CHECK(relative_max_error(ours.dx, dx_ref) <= 1e-4);
  CHECK(relative_max_error(ours.dgamma, dgamma_ref) <= 1e-4);

  RmsResult plain = run_rms_norm(x, nullptr, dout, rows, cols, 1e-12f);
  for (int64_t r = 0; r < rows; r++) {
    double mean_square = 0.0;
    for (int64_t i = 0; i < cols; i++) mean_square += std::pow(plain.y[size_t(r * cols + i)], 2) / double(cols);
    CHECK(mean_square == doctest::Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("rmsnorm backward matches central finite differences") {
  normlab::Rng rng(22);
  const int64_t rows = 3, cols = 6;
  const float eps = 1e-5f;
  std::vector<float> x = normals(rng, size_t(rows * cols), 0.5f, 1.0f);
  std::vector<float> gamma = normals(rng, size_t(cols), 1.0f, 0.3f);
  std::vector<float> weights = normals(rng, x.size());
  auto forward = [&] {
    std::vector<float> y(x.size());
    k::rms_norm_forward(y.data(), nullptr, x.data(), gamma.data(), rows, cols, eps);
    return y;
  };
  RmsResult ours = run_rms_norm(x, &gamma, weights, rows, cols, eps);
  CHECK(relative_max_error(ours.dx, numeric_gradient(x, forward, weights)) <= 2e-3);
  CHECK(relative_max_error(ours.dgamma, numeric_gradient(gamma, forward, weights)) <= 2e-3);
}

TEST_CASE("rmsnorm is bit-identical run to run at a fixed thread count") {
  ThreadGuard guard;
  normlab::set_num_threads(2);
  normlab::Rng rng(23);
  const int64_t rows = 200, cols = 300;
  std::vector<float> x = normals(rng, size_t(rows * cols));
  std::vector<float> gamma = normals(rng, size_t(cols), 1.0f, 0.2f);
  std::vector<float> dout = normals(rng, x.size());
  RmsResult a = run_rms_norm(x, &gamma, dout, rows, cols, 1e-6f);
  RmsResult b = run_rms_norm(x, &gamma, dout, rows, cols, 1e-6f);
  CHECK(same_bits(a.y, b.y));
  CHECK(same_bits(a.dx, b.dx));
  CHECK(same_bits(a.dgamma, b.dgamma));
}

TEST_CASE("batchnorm training forward and backward match the reference kernels") {
  normlab::Rng rng(31);
  const int64_t N = 150, C = 24;
  // Features with very different scales and a large offset: per-feature statistics must cope.
  std::vector<float> x(size_t(N * C));
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) x[size_t(n * C + c)] = rng.normal(c == 3 ? 1e4f : float(c), 0.5f + float(c));
  std::vector<float> gamma = normals(rng, size_t(C), 1.0f, 0.2f);
  std::vector<float> beta = normals(rng, size_t(C));
  std::vector<float> dout = normals(rng, x.size());
  BatchNormReference ref = batch_norm_reference(x, gamma, beta, dout, N, C, 1e-5);
  BatchNormResult ours = run_batch_norm(x, gamma, beta, dout, N, C, 1e-5f);
  CHECK(relative_max_error(ours.y, ref.y) <= 1e-5);
  CHECK(relative_max_error(ours.mean, ref.mean) <= 1e-6);
  CHECK(relative_max_error(ours.dx, ref.dx) <= 1e-4);
  CHECK(relative_max_error(ours.dgamma, ref.dgamma) <= 1e-4);
  CHECK(relative_max_error(ours.dbeta, ref.dbeta) <= 1e-4);
}

TEST_CASE("batchnorm running statistics follow PyTorch (unbiased var) and drive eval mode") {
  normlab::Rng rng(32);
  const int64_t N = 40, C = 5;
  const float momentum = 0.1f, eps = 1e-5f;
  std::vector<float> x = normals(rng, size_t(N * C), 2.0f, 3.0f);
  std::vector<float> gamma = normals(rng, size_t(C), 1.0f, 0.2f);
  std::vector<float> beta = normals(rng, size_t(C));
  std::vector<float> running_mean(size_t(C), 0.5f), running_var(size_t(C), 2.0f);
  std::vector<float> y(x.size()), mean(static_cast<size_t>(C)), rstd(static_cast<size_t>(C));
  k::batch_norm_forward_train(y.data(), mean.data(), rstd.data(), running_mean.data(), running_var.data(), x.data(),
                              gamma.data(), beta.data(), N, C, eps, momentum);
  BatchNormReference ref = batch_norm_reference(x, gamma, beta, y, N, C, double(eps));
  for (int64_t c = 0; c < C; c++) {
    const size_t k = size_t(c);
    const double unbiased = ref.var[k] * double(N) / double(N - 1);
    CHECK(running_mean[k] == doctest::Approx(0.9 * 0.5 + 0.1 * ref.mean[k]).epsilon(1e-6));
    CHECK(running_var[k] == doctest::Approx(0.9 * 2.0 + 0.1 * unbiased).epsilon(1e-6));
    CHECK(rstd[k] == doctest::Approx(1.0 / std::sqrt(ref.var[k] + double(eps))).epsilon(1e-6));
  }

  // Eval: the running statistics replace the batch's, token by token.
  std::vector<float> y_eval(x.size());
  k::batch_norm_forward_eval(y_eval.data(), x.data(), running_mean.data(), running_var.data(), gamma.data(),
                             beta.data(), N, C, eps);
  std::vector<double> y_eval_ref(x.size());
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      const size_t i = size_t(n * C + c), k = size_t(c);
      y_eval_ref[i] =
          (x[i] - double(running_mean[k])) / std::sqrt(double(running_var[k]) + double(eps)) * gamma[k] + beta[k];
    }
  CHECK(relative_max_error(y_eval, y_eval_ref) <= 1e-5);

  // One token: the unbiased variance is undefined, running_var stays, running_mean moves.
  std::vector<float> one(size_t(C), 3.0f), y_one(static_cast<size_t>(C));
  std::vector<float> running_var_before = running_var;
  k::batch_norm_forward_train(y_one.data(), mean.data(), rstd.data(), running_mean.data(), running_var.data(),
                              one.data(), gamma.data(), beta.data(), 1, C, eps, momentum);
  CHECK(same_bits(running_var, running_var_before));
  for (int64_t c = 0; c < C; c++) CHECK(y_one[size_t(c)] == beta[size_t(c)]);  // x - mean = 0
}

TEST_CASE("batchnorm backward matches central finite differences") {
  normlab::Rng rng(33);
  const int64_t N = 5, C = 3;
  const float eps = 1e-5f;
  std::vector<float> x = normals(rng, size_t(N * C), 0.5f, 1.5f);
  std::vector<float> gamma = normals(rng, size_t(C), 1.0f, 0.3f);
  std::vector<float> beta = normals(rng, size_t(C), 0.0f, 0.3f);
  std::vector<float> weights = normals(rng, x.size());
  auto forward = [&] {
    std::vector<float> y(x.size()), mean(static_cast<size_t>(C)), rstd(static_cast<size_t>(C));
    k::batch_norm_forward_train(y.data(), mean.data(), rstd.data(), nullptr, nullptr, x.data(), gamma.data(),
                                beta.data(), N, C, eps, 0.1f);
    return y;
  };
  BatchNormResult ours = run_batch_norm(x, gamma, beta, weights, N, C, eps);
  CHECK(relative_max_error(ours.dx, numeric_gradient(x, forward, weights)) <= 2e-3);
  CHECK(relative_max_error(ours.dgamma, numeric_gradient(gamma, forward, weights)) <= 2e-3);
  CHECK(relative_max_error(ours.dbeta, numeric_gradient(beta, forward, weights)) <= 2e-3);
}

TEST_CASE("batchnorm is bit-identical run to run at a fixed thread count") {
  ThreadGuard guard;
  normlab::Rng rng(34);
  const int64_t N = 700, C = 64;
  std::vector<float> x = normals(rng, size_t(N * C), 1.0f, 2.0f);
  std::vector<float> gamma = normals(rng, size_t(C), 1.0f, 0.2f);
  std::vector<float> beta = normals(rng, size_t(C));
  std::vector<float> dout = normals(rng, x.size());
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    normlab::set_num_threads(threads);
    BatchNormResult a = run_batch_norm(x, gamma, beta, dout, N, C, 1e-5f);
    BatchNormResult b = run_batch_norm(x, gamma, beta, dout, N, C, 1e-5f);
    CHECK(same_bits(a.y, b.y));
    CHECK(same_bits(a.dx, b.dx));
    CHECK(same_bits(a.dgamma, b.dgamma));
    CHECK(same_bits(a.dbeta, b.dbeta));
  }
}

TEST_CASE("batchnorm output of a token depends on its batch-mates - layernorm's does not") {
  normlab::Rng rng(35);
  const int64_t C = 16;
  // Batch A: tokens 0..9. Batch B: the same 10 tokens plus 6 others (a second sequence).
  std::vector<float> batch_b = normals(rng, size_t(16 * C), 0.0f, 2.0f);
  std::vector<float> batch_a(batch_b.begin(), batch_b.begin() + 10 * C);
  std::vector<float> gamma(size_t(C), 1.0f), beta(size_t(C), 0.0f);
  std::vector<float> mean(static_cast<size_t>(C)), rstd(static_cast<size_t>(C));

  std::vector<float> bn_a(batch_a.size()), bn_b(batch_b.size());
  k::batch_norm_forward_train(bn_a.data(), mean.data(), rstd.data(), nullptr, nullptr, batch_a.data(), gamma.data(),
                              beta.data(), 10, C, 1e-5f, 0.1f);
  k::batch_norm_forward_train(bn_b.data(), mean.data(), rstd.data(), nullptr, nullptr, batch_b.data(), gamma.data(),
                              beta.data(), 16, C, 1e-5f, 0.1f);
  double bn_change = 0.0;
  for (size_t i = 0; i < bn_a.size(); i++) bn_change = std::max(bn_change, double(std::fabs(bn_a[i] - bn_b[i])));
  CHECK(bn_change > 1e-2);

  std::vector<float> ln_a(batch_a.size()), ln_b(batch_b.size());
  k::layer_norm_forward(ln_a.data(), nullptr, nullptr, batch_a.data(), gamma.data(), beta.data(), 10, C, 1e-5f);
  k::layer_norm_forward(ln_b.data(), nullptr, nullptr, batch_b.data(), gamma.data(), beta.data(), 16, C, 1e-5f);
  CHECK(std::memcmp(ln_a.data(), ln_b.data(), ln_a.size() * sizeof(float)) == 0);
}

namespace {

// One PowerNorm training step (forward, then the approximate backward) from running_phi = 1.5 and a
// given grad_ema, by the fast kernels or the reference ones.
struct PowerNormStep {
  std::vector<float> y, rstd, running_phi, grad_ema, dx, dgamma, dbeta;
};

template <class Forward, class Backward>
PowerNormStep power_norm_step(Forward forward, Backward backward, const std::vector<float>& x,
                              const std::vector<float>& gamma, const std::vector<float>& beta,
                              const std::vector<float>& dout, const std::vector<float>& grad_ema, int64_t N,
                              int64_t C) {
  PowerNormStep s;
  s.y.resize(x.size());
  s.rstd.resize(size_t(C));
  s.running_phi.assign(size_t(C), 1.5f);
  s.grad_ema = grad_ema;
  s.dx.assign(x.size(), 0.0f);
  s.dgamma.assign(size_t(C), 0.0f);
  s.dbeta.assign(size_t(C), 0.0f);
  forward(s.y.data(), s.rstd.data(), s.running_phi.data(), x.data(), gamma.data(), beta.data(), N, C, 1e-5f, 0.1f);
  backward(s.dx.data(), s.dgamma.data(), s.dbeta.data(), s.grad_ema.data(), dout.data(), x.data(), gamma.data(),
           s.rstd.data(), N, C, 0.1f);
  return s;
}

}  // namespace

TEST_CASE("powernorm matches the reference kernels and is bit-identical run to run at a fixed thread count") {
  ThreadGuard guard;
  normlab::Rng rng(36);
  const int64_t N = 900, C = 48;  // over kMinParallelElements: the threaded column sums
  std::vector<float> x = normals(rng, size_t(N * C), 0.5f, 2.0f);
  std::vector<float> gamma = normals(rng, size_t(C), 1.0f, 0.2f), beta = normals(rng, size_t(C));
  std::vector<float> dout = normals(rng, x.size()), grad_ema = normals(rng, size_t(C), 0.0f, 0.3f);
  const PowerNormStep ref = power_norm_step(k::reference::power_norm_forward, k::reference::power_norm_backward, x,
                                            gamma, beta, dout, grad_ema, N, C);
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    normlab::set_num_threads(threads);
    const PowerNormStep a =
        power_norm_step(k::power_norm_forward, k::power_norm_backward, x, gamma, beta, dout, grad_ema, N, C);
    const PowerNormStep b =
        power_norm_step(k::power_norm_forward, k::power_norm_backward, x, gamma, beta, dout, grad_ema, N, C);
    CHECK(relative_max_error(a.y, ref.y) <= 1e-6);
    CHECK(relative_max_error(a.running_phi, ref.running_phi) <= 1e-6);
    CHECK(relative_max_error(a.dx, ref.dx) <= 1e-5);
    CHECK(relative_max_error(a.dgamma, ref.dgamma) <= 1e-5);
    CHECK(relative_max_error(a.dbeta, ref.dbeta) <= 1e-5);
    CHECK(relative_max_error(a.grad_ema, ref.grad_ema) <= 1e-5);
    CHECK(same_bits(a.y, b.y));
    CHECK(same_bits(a.running_phi, b.running_phi));
    CHECK(same_bits(a.dx, b.dx));
    CHECK(same_bits(a.dgamma, b.dgamma));
    CHECK(same_bits(a.grad_ema, b.grad_ema));
  }
}

TEST_CASE("powernorm output of a token does not depend on its batch-mates, its running statistic does") {
  normlab::Rng rng(37);
  const int64_t C = 16;
  std::vector<float> batch_b = normals(rng, size_t(16 * C), 0.0f, 2.0f);
  std::vector<float> batch_a(batch_b.begin(), batch_b.begin() + 10 * C);
  std::vector<float> gamma(size_t(C), 1.0f), beta(size_t(C), 0.0f), rstd(static_cast<size_t>(C));
  std::vector<float> y_a(batch_a.size()), y_b(batch_b.size()), phi_a(size_t(C), 2.0f), phi_b(size_t(C), 2.0f);
  k::power_norm_forward(y_a.data(), rstd.data(), phi_a.data(), batch_a.data(), gamma.data(), beta.data(), 10, C, 1e-5f,
                        0.1f);
  k::power_norm_forward(y_b.data(), rstd.data(), phi_b.data(), batch_b.data(), gamma.data(), beta.data(), 16, C, 1e-5f,
                        0.1f);
  CHECK(same_bits(y_a, std::vector<float>(y_b.begin(), y_b.begin() + 10 * C)));  // the statistic of past steps
  CHECK(!same_bits(phi_a, phi_b));                                               // this batch moves it
  for (int64_t c = 0; c < C; c++) CHECK(y_a[size_t(c)] == doctest::Approx(batch_a[size_t(c)] / std::sqrt(2.0 + 1e-5)));
}
