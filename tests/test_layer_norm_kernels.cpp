// LayerNorm kernels: parity with PyTorch (golden .npy files from scripts/golden/layer_norm.py),
// numerical stability against the reference kernels, finite differences, determinism.
//
// Error metric everywhere (relative_max_error), per tensor:
//   max_i |ours_i - ref_i| / max(1, max_i |ref_i|)
// i.e. relative to the tensor's largest entry, and absolute when every entry is below 1 (so a
// reference that is exactly 0 up to rounding noise, like dx when cols = 1, is not divided by that
// noise). Forward must be within 1e-5 of the reference, gradients within 1e-4.
#include <doctest/doctest.h>

#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "isa_support.hpp"
#include "normlab/io/npy.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/kernels/reference/layer_norm.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

namespace fs = std::filesystem;
using normlab::kernels::layer_norm_backward;
using normlab::kernels::layer_norm_forward;

using normlab::test::relative_max_error;

namespace {

std::vector<float> normals(normlab::Rng& rng, size_t n, float mean = 0.0f, float stddev = 1.0f) {
  std::vector<float> v(n);
  for (auto& e : v) e = rng.normal(mean, stddev);
  return v;
}

// Thread count restored at scope exit, so one test cannot change another's.
struct ThreadGuard {
  int saved = normlab::num_threads();
  ~ThreadGuard() { normlab::set_num_threads(saved); }
};

// The reference kernels (kernels/reference/layer_norm.hpp: plain loops, sums in double) are what
// the fast kernels are checked against in the stability tests.
struct Reference {
  std::vector<double> y, dx, dgamma, dbeta, mean, rstd;
};
Reference layer_norm_reference(const std::vector<float>& x, const std::vector<float>* gamma,
                               const std::vector<float>* beta, const std::vector<float>& dout, int64_t rows,
                               int64_t cols, double eps) {
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  std::vector<float> dx(x.size(), 0.0f), dgamma(size_t(cols), 0.0f), dbeta(size_t(cols), 0.0f);
  const float* g = gamma ? gamma->data() : nullptr;
  const float* b = beta ? beta->data() : nullptr;
  normlab::kernels::reference::layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), g, b, rows, cols,
                                                  float(eps));
  normlab::kernels::reference::layer_norm_backward(dx.data(), g ? dgamma.data() : nullptr, b ? dbeta.data() : nullptr,
                                                   dout.data(), x.data(), g, mean.data(), rstd.data(), rows, cols);
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  return {wide(y), wide(dx), wide(dgamma), wide(dbeta), wide(mean), wide(rstd)};
}

struct Grads {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};
Grads run_layer_norm(const std::vector<float>& x, const std::vector<float>* gamma, const std::vector<float>* beta,
                     const std::vector<float>& dout, int64_t rows, int64_t cols, float eps) {
  Grads out;
  out.y.assign(size_t(rows * cols), 0.0f);
  out.mean.assign(size_t(rows), 0.0f);
  out.rstd.assign(size_t(rows), 0.0f);
  out.dx.assign(size_t(rows * cols), 0.0f);
  out.dgamma.assign(size_t(cols), 0.0f);
  out.dbeta.assign(size_t(cols), 0.0f);
  const float* g = gamma ? gamma->data() : nullptr;
  const float* b = beta ? beta->data() : nullptr;
  layer_norm_forward(out.y.data(), out.mean.data(), out.rstd.data(), x.data(), g, b, rows, cols, eps);
  layer_norm_backward(out.dx.data(), g ? out.dgamma.data() : nullptr, b ? out.dbeta.data() : nullptr, dout.data(),
                      x.data(), g, out.mean.data(), out.rstd.data(), rows, cols);
  return out;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

std::vector<fs::path> golden_cases(const std::string& op) {
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(fs::path(NORMLAB_TEST_DATA_DIR) / "layernorm")) {
    std::ifstream meta_file(entry.path() / "meta.json");
    if (nlohmann::json::parse(meta_file).at("op") == op) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

}  // namespace

TEST_CASE("layernorm golden cases match PyTorch (forward 1e-5, gradients 1e-4)") {
  std::vector<fs::path> cases = golden_cases("layer_norm");
  REQUIRE(cases.size() >= 6);
  for (const fs::path& dir : cases) {
    INFO("case " << dir.filename().string());
    std::ifstream meta_file(dir / "meta.json");
    nlohmann::json meta = nlohmann::json::parse(meta_file);
    const auto input_shape = meta.at("input_shape").get<std::vector<int64_t>>();
    const auto normalized_shape = meta.at("normalized_shape").get<std::vector<int64_t>>();
    const bool affine = meta.at("affine").get<bool>();
    const float eps = meta.at("eps").get<float>();
    const int64_t cols = product(normalized_shape);
    const int64_t rows = product(input_shape) / cols;

    auto x = normlab::io::read_npy((dir / "x.npy").string());
    auto dout = normlab::io::read_npy((dir / "dout.npy").string());
    auto y_ref = normlab::io::read_npy((dir / "y.npy").string());
    auto dx_ref = normlab::io::read_npy((dir / "dx.npy").string());
    CHECK(x.shape == input_shape);
    CHECK(y_ref.shape == input_shape);
    normlab::io::NpyArray gamma, beta, dgamma_ref, dbeta_ref;
    if (affine) {
      gamma = normlab::io::read_npy((dir / "gamma.npy").string());
      beta = normlab::io::read_npy((dir / "beta.npy").string());
      dgamma_ref = normlab::io::read_npy((dir / "dgamma.npy").string());
      dbeta_ref = normlab::io::read_npy((dir / "dbeta.npy").string());
      CHECK(gamma.shape == normalized_shape);
      CHECK(beta.shape == normalized_shape);
    }

    Grads ours = run_layer_norm(x.data, affine ? &gamma.data : nullptr, affine ? &beta.data : nullptr, dout.data, rows,
                                cols, eps);
    CHECK(relative_max_error(ours.y, y_ref.data) <= 1e-5);
    CHECK(relative_max_error(ours.dx, dx_ref.data) <= 1e-4);
    if (affine) {
      CHECK(relative_max_error(ours.dgamma, dgamma_ref.data) <= 1e-4);
      CHECK(relative_max_error(ours.dbeta, dbeta_ref.data) <= 1e-4);
    }
  }
}

TEST_CASE("layernorm [4,100,512] example keeps its shape, gamma and beta are [512]") {
  const fs::path dir = fs::path(NORMLAB_TEST_DATA_DIR) / "layernorm" / "bert_4x100x512";
  auto x = normlab::io::read_npy((dir / "x.npy").string());
  auto gamma = normlab::io::read_npy((dir / "gamma.npy").string());
  auto beta = normlab::io::read_npy((dir / "beta.npy").string());
  auto y_ref = normlab::io::read_npy((dir / "y.npy").string());
  REQUIRE(x.shape == std::vector<int64_t>{4, 100, 512});
  CHECK(gamma.shape == std::vector<int64_t>{512});
  CHECK(beta.shape == std::vector<int64_t>{512});
  CHECK(y_ref.shape == x.shape);
  // rows = batch * seq_len tokens, one mean/rstd each ([4, 100, 1] in PyTorch's keepdim view).
  const int64_t rows = 4 * 100, cols = 512;
  std::vector<float> y(x.data.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data.data(), gamma.data.data(), beta.data.data(), rows, cols,
                     1e-12f);
  CHECK(y.size() == size_t(4 * 100 * 512));
  CHECK(relative_max_error(y, y_ref.data) <= 1e-5);
}

TEST_CASE("layernorm output rows have mean 0 and biased variance 1 with identity affine") {
  normlab::Rng rng(11);
  const int64_t rows = 37, cols = 300;
  std::vector<float> x = normals(rng, size_t(rows * cols), 3.0f, 5.0f);
  std::vector<float> ones(size_t(cols), 1.0f), zeros(size_t(cols), 0.0f);
  std::vector<float> y_plain(x.size()), y_identity(x.size());
  layer_norm_forward(y_plain.data(), nullptr, nullptr, x.data(), nullptr, nullptr, rows, cols, 1e-12f);
  layer_norm_forward(y_identity.data(), nullptr, nullptr, x.data(), ones.data(), zeros.data(), rows, cols, 1e-12f);
  CHECK(std::memcmp(y_plain.data(), y_identity.data(), y_plain.size() * sizeof(float)) == 0);
  for (int64_t r = 0; r < rows; r++) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < cols; i++) mean += y_plain[size_t(r * cols + i)];
    mean /= double(cols);
    for (int64_t i = 0; i < cols; i++) var += std::pow(y_plain[size_t(r * cols + i)] - mean, 2);
    var /= double(cols);
    CHECK(std::fabs(mean) < 1e-6);
    CHECK(std::fabs(var - 1.0) < 1e-5);
  }
}

TEST_CASE("layernorm is stable where float shortcuts fail: matches float64 reference") {
  normlab::Rng rng(12);
  struct Case {
    const char* name;
    int64_t rows, cols;
    float mean, stddev, eps;
  };
  const Case cases[] = {
      {"mean 1e4, std 1", 16, 768, 1e4f, 1.0f, 1e-12f},
      {"mean -3e4, std 0.5", 5, 1000, -3e4f, 0.5f, 1e-5f},
      {"odd width 4099", 3, 4099, 0.5f, 2.0f, 1e-5f},
      {"single element (cols = 1)", 9, 1, 1.0f, 3.0f, 1e-5f},
      {"width below the lane count", 4, 13, 0.0f, 1.0f, 1e-12f},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.name));
    std::vector<float> x = normals(rng, size_t(c.rows * c.cols), c.mean, c.stddev);
    std::vector<float> gamma = normals(rng, size_t(c.cols), 1.0f, 0.2f);
    std::vector<float> beta = normals(rng, size_t(c.cols), 0.0f, 0.2f);
    std::vector<float> dout = normals(rng, x.size());
    Reference ref = layer_norm_reference(x, &gamma, &beta, dout, c.rows, c.cols, double(c.eps));
    Grads ours = run_layer_norm(x, &gamma, &beta, dout, c.rows, c.cols, c.eps);
    CHECK(relative_max_error(ours.y, ref.y) <= 1e-5);
    CHECK(relative_max_error(ours.rstd, ref.rstd) <= 1e-6);
    CHECK(relative_max_error(ours.mean, ref.mean) <= 1e-6);
    if (c.cols > 1) CHECK(relative_max_error(ours.dx, ref.dx) <= 1e-4);
    CHECK(relative_max_error(ours.dgamma, ref.dgamma) <= 1e-4);
    CHECK(relative_max_error(ours.dbeta, ref.dbeta) <= 1e-4);
    if (c.cols == 1) {  // one element: xhat = 0, y = beta, and no gradient reaches x or gamma
      for (size_t i = 0; i < ours.y.size(); i++) CHECK(ours.y[i] == beta[0]);
      for (float v : ours.dx) CHECK(v == 0.0f);
      CHECK(ours.dgamma[0] == 0.0f);
    }
  }
}

TEST_CASE("layernorm of a constant row: var 0, rstd = 1/sqrt(eps), output = beta") {
  normlab::Rng rng(13);
  const int64_t rows = 3, cols = 64;
  std::vector<float> x(size_t(rows * cols));
  const float values[rows] = {0.0f, 2.5f, -1234.5f};
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < cols; i++) x[size_t(r * cols + i)] = values[r];
  std::vector<float> gamma = normals(rng, size_t(cols), 1.0f, 0.2f);
  std::vector<float> beta = normals(rng, size_t(cols));
  std::vector<float> dout = normals(rng, x.size());
  for (float eps : {1e-12f, 1e-5f}) {
    INFO("eps " << eps);
    Grads ours = run_layer_norm(x, &gamma, &beta, dout, rows, cols, eps);
    Reference ref = layer_norm_reference(x, &gamma, &beta, dout, rows, cols, double(eps));
    for (int64_t r = 0; r < rows; r++) {
      CHECK(ours.mean[size_t(r)] == values[r]);
      CHECK(ours.rstd[size_t(r)] == doctest::Approx(1.0 / std::sqrt(double(eps))).epsilon(1e-6));
      for (int64_t i = 0; i < cols; i++) CHECK(ours.y[size_t(r * cols + i)] == beta[size_t(i)]);
    }
    // dx = rstd * (g - mean(g)): 1e6 times the centered g at eps 1e-12.
    CHECK(relative_max_error(ours.dx, ref.dx) <= 1e-4);
  }
}

TEST_CASE("layernorm backward matches central finite differences") {
  normlab::Rng rng(14);
  const int64_t rows = 3, cols = 7;
  const float eps = 1e-5f;
  std::vector<float> x = normals(rng, size_t(rows * cols), 0.3f, 1.5f);
  std::vector<float> gamma = normals(rng, size_t(cols), 1.0f, 0.3f);
  std::vector<float> beta = normals(rng, size_t(cols), 0.0f, 0.3f);
  std::vector<float> weights = normals(rng, x.size());  // loss = sum(y * weights), so dout = weights

  auto loss = [&] {
    std::vector<float> y(x.size());
    layer_norm_forward(y.data(), nullptr, nullptr, x.data(), gamma.data(), beta.data(), rows, cols, eps);
    double total = 0.0;
    for (size_t i = 0; i < y.size(); i++) total += double(y[i]) * double(weights[i]);
    return total;
  };
  auto numeric = [&](std::vector<float>& param) {
    std::vector<double> grad(param.size());
    for (size_t i = 0; i < param.size(); i++) {
      const float saved = param[i];
      const float h = 1e-2f * std::max(1.0f, std::fabs(saved));
      param[i] = saved + h;
      const float up = param[i];
      double loss_up = loss();
      param[i] = saved - h;
      const float down = param[i];
      double loss_down = loss();
      param[i] = saved;
      grad[i] = (loss_up - loss_down) / (double(up) - double(down));
    }
    return grad;
  };
  Grads ours = run_layer_norm(x, &gamma, &beta, weights, rows, cols, eps);
  CHECK(relative_max_error(ours.dx, numeric(x)) <= 2e-3);
  CHECK(relative_max_error(ours.dgamma, numeric(gamma)) <= 2e-3);
  CHECK(relative_max_error(ours.dbeta, numeric(beta)) <= 2e-3);
}

TEST_CASE("layernorm backward accumulates into dinp, dgamma, dbeta and allows nullptr outputs") {
  normlab::Rng rng(15);
  const int64_t rows = 6, cols = 50;
  std::vector<float> x = normals(rng, size_t(rows * cols));
  std::vector<float> gamma = normals(rng, size_t(cols), 1.0f, 0.2f);
  std::vector<float> beta = normals(rng, size_t(cols));
  std::vector<float> dout = normals(rng, x.size());
  Grads fresh = run_layer_norm(x, &gamma, &beta, dout, rows, cols, 1e-12f);

  std::vector<float> dx(x.size(), 1.0f), dgamma(size_t(cols), 2.0f), dbeta(size_t(cols), -1.0f);
  layer_norm_backward(dx.data(), dgamma.data(), dbeta.data(), dout.data(), x.data(), gamma.data(), fresh.mean.data(),
                      fresh.rstd.data(), rows, cols);
  for (size_t i = 0; i < dx.size(); i++) CHECK(dx[i] == doctest::Approx(1.0f + fresh.dx[i]).epsilon(1e-6));
  for (size_t i = 0; i < dgamma.size(); i++) {
    CHECK(dgamma[i] == doctest::Approx(2.0f + fresh.dgamma[i]).epsilon(1e-6));
    CHECK(dbeta[i] == doctest::Approx(-1.0f + fresh.dbeta[i]).epsilon(1e-6));
  }

  // Only parameter gradients (frozen input), and only the input gradient.
  std::vector<float> dgamma_only(size_t(cols), 0.0f);
  layer_norm_backward(nullptr, dgamma_only.data(), nullptr, dout.data(), x.data(), gamma.data(), fresh.mean.data(),
                      fresh.rstd.data(), rows, cols);
  CHECK(std::memcmp(dgamma_only.data(), fresh.dgamma.data(), dgamma_only.size() * sizeof(float)) == 0);
  std::vector<float> dx_only(x.size(), 0.0f);
  layer_norm_backward(dx_only.data(), nullptr, nullptr, dout.data(), x.data(), gamma.data(), fresh.mean.data(),
                      fresh.rstd.data(), rows, cols);
  CHECK(std::memcmp(dx_only.data(), fresh.dx.data(), dx_only.size() * sizeof(float)) == 0);
}

TEST_CASE("layernorm without affine equals affine with gamma = 1, beta = 0, in both directions") {
  normlab::Rng rng(16);
  const int64_t rows = 40, cols = 96;
  std::vector<float> x = normals(rng, size_t(rows * cols), 1.0f, 2.0f);
  std::vector<float> dout = normals(rng, x.size());
  std::vector<float> ones(size_t(cols), 1.0f), zeros(size_t(cols), 0.0f);
  Grads plain = run_layer_norm(x, nullptr, nullptr, dout, rows, cols, 1e-5f);
  Grads identity = run_layer_norm(x, &ones, &zeros, dout, rows, cols, 1e-5f);
  CHECK(std::memcmp(plain.y.data(), identity.y.data(), plain.y.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(plain.dx.data(), identity.dx.data(), plain.dx.size() * sizeof(float)) == 0);
}

TEST_CASE("layernorm is bit-identical run to run, and a row does not depend on its batch-mates") {
  ThreadGuard guard;
  normlab::Rng rng(17);
  const int64_t rows = 300, cols = 257;  // rows * cols above the kernels' parallel threshold
  std::vector<float> x = normals(rng, size_t(rows * cols), 0.5f, 2.0f);
  std::vector<float> gamma = normals(rng, size_t(cols), 1.0f, 0.2f);
  std::vector<float> beta = normals(rng, size_t(cols));
  std::vector<float> dout = normals(rng, x.size());
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };

  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    normlab::set_num_threads(threads);
    Grads first = run_layer_norm(x, &gamma, &beta, dout, rows, cols, 1e-12f);
    Grads second = run_layer_norm(x, &gamma, &beta, dout, rows, cols, 1e-12f);
    CHECK(same(first.y, second.y));
    CHECK(same(first.dx, second.dx));
    CHECK(same(first.dgamma, second.dgamma));
    CHECK(same(first.dbeta, second.dbeta));
  }

  // y, mean, rstd and dx of a row are computed from that row alone: the same bits at any thread
  // count and at any position in the batch (here: row 123 run on its own, from a copy elsewhere).
  normlab::set_num_threads(2);
  Grads batch = run_layer_norm(x, &gamma, &beta, dout, rows, cols, 1e-12f);
  normlab::set_num_threads(1);
  Grads batch_one_thread = run_layer_norm(x, &gamma, &beta, dout, rows, cols, 1e-12f);
  CHECK(same(batch.y, batch_one_thread.y));
  CHECK(same(batch.dx, batch_one_thread.dx));
  const int64_t r = 123;
  std::vector<float> x_row(x.begin() + r * cols, x.begin() + (r + 1) * cols);
  std::vector<float> dout_row(dout.begin() + r * cols, dout.begin() + (r + 1) * cols);
  Grads alone = run_layer_norm(x_row, &gamma, &beta, dout_row, 1, cols, 1e-12f);
  CHECK(std::memcmp(alone.y.data(), batch.y.data() + r * cols, size_t(cols) * sizeof(float)) == 0);
  CHECK(std::memcmp(alone.dx.data(), batch.dx.data() + r * cols, size_t(cols) * sizeof(float)) == 0);
  CHECK(alone.mean[0] == batch.mean[size_t(r)]);
  CHECK(alone.rstd[0] == batch.rstd[size_t(r)]);
}

namespace {

// One forward and backward of a (rows, cols) LayerNorm on the current path, with seeded data of one
// kind: 0 normal, 1 signed zeros and a constant first row, 2 subnormal x, 3 exponents 2^-40 ..
// 2^40 side by side. dx, dgamma and dbeta start from nonzero values (the backward accumulates).
struct PathResult {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};
PathResult run_layer_norm(int64_t rows, int64_t cols, int kind, bool affine, bool with_dx) {
  normlab::Rng rng(uint64_t(rows * 1000 + cols * 10 + kind));
  std::vector<float> x(static_cast<size_t>(rows * cols)), dy(x.size());
  std::vector<float> gamma(static_cast<size_t>(cols)), beta(static_cast<size_t>(cols));
  for (auto& v : x) v = rng.normal();
  for (auto& v : dy) v = rng.normal();
  for (auto& v : gamma) v = 1.0f + 0.1f * rng.normal();
  for (auto& v : beta) v = 0.1f * rng.normal();
  for (size_t i = 0; i < x.size(); i++) {
    if (kind == 1 && i % 7 == 0) x[i] = (i % 2 == 0) ? 0.0f : -0.0f;
    if (kind == 1 && i % 5 == 0) dy[i] = -0.0f;
    if (kind == 2) x[i] = std::ldexp(x[i], -130);  // subnormal floats
    if (kind == 3) x[i] = std::ldexp(x[i], int(i * 37 % 81) - 40), dy[i] = std::ldexp(dy[i], int(i * 11 % 81) - 40);
  }
  if (kind == 1) std::fill(x.begin(), x.begin() + cols, 3.0f);  // a constant first row
  PathResult r{std::vector<float>(x.size()), std::vector<float>(size_t(rows)), std::vector<float>(size_t(rows)),
               std::vector<float>(x.size(), 0.5f), std::vector<float>(size_t(cols), 0.25f),
               std::vector<float>(size_t(cols), -0.25f)};
  const float* g = affine ? gamma.data() : nullptr;
  normlab::kernels::layer_norm_forward(r.y.data(), r.mean.data(), r.rstd.data(), x.data(), g,
                                       affine ? beta.data() : nullptr, rows, cols, 1e-12f);
  normlab::kernels::layer_norm_backward(with_dx ? r.dx.data() : nullptr, affine ? r.dgamma.data() : nullptr,
                                        affine ? r.dbeta.data() : nullptr, dy.data(), x.data(), g, r.mean.data(),
                                        r.rstd.data(), rows, cols);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every available path against the generic path's portable loops, bit for bit, for each of the
// kinds of data and each of (affine, with dx), (affine, no dx) and, with_no_affine, (no affine,
// with dx).
void check_paths_against_generic(int64_t rows, int64_t cols, std::initializer_list<int> kinds = {0, 1, 2, 3},
                                 bool with_no_affine = true) {
  for (int kind : kinds) {
    for (auto [affine, with_dx] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
      if (!affine && !with_no_affine) continue;
      PathResult expected;
      {
        normlab::test::ScopedIsa generic(normlab::kernels::Isa::generic);
        expected = run_layer_norm(rows, cols, kind, affine, with_dx);
      }
      for (normlab::kernels::Isa isa : normlab::test::available_isas()) {
        normlab::test::ScopedIsa scoped(isa);
        const PathResult got = run_layer_norm(rows, cols, kind, affine, with_dx);
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(kind);
        CAPTURE(affine);
        CAPTURE(with_dx);
        CHECK(same_bits(got.y, expected.y));
        CHECK(same_bits(got.mean, expected.mean));
        CHECK(same_bits(got.rstd, expected.rstd));
        CHECK(same_bits(got.dx, expected.dx));
        CHECK(same_bits(got.dgamma, expected.dgamma));
        CHECK(same_bits(got.dbeta, expected.dbeta));
      }
    }
  }
}

}  // namespace

// The AVX2/AVX-512 passes (intrinsics: rows in pairs, x-hat kept from pass 1, groups up to 512
// columns, lines of 16 then a scalar tail) against the generic path's portable loops, bit for bit:
// widths around the line and group limits, rows left over after groups and pairs, no affine,
// no input gradient, and values that test the exactness of each step (signed zeros, subnormals,
// exponents 2^-40 .. 2^40 side by side, a constant row).
TEST_CASE("layernorm: every path's vector passes give the generic path's bits, tails and edge values included") {
  for (int64_t cols : {16, 17, 40, 300, 520, 1040}) {
    for (int64_t rows : {1, 2, 5, 9}) check_paths_against_generic(rows, cols);
  }
}

// Rows longer than the backward's groups in a call of at least 2^18 elements (arrays beyond L2):
// on AVX-512 the backward's pass 2 forms x-hat and g again from x, dout and gamma instead of
// reading pass 1's scratch rows, with the rows ahead prefetched further (only with gamma: rows
// without it take the portable loops). The same bits as the generic path, at a width with a scalar
// tail (769 = 48 lines + 1) and one of whole lines; normal data, signed zeros with a constant row,
// and wide exponents. (Small calls, the other user of that pass 2, are the test above's shapes.)
TEST_CASE("layernorm: long rows streamed from memory give the generic path's bits on every path") {
  check_paths_against_generic(341, 769, {0, 1, 3}, false);   // 262,229 elements: just above 2^18
  check_paths_against_generic(257, 1024, {0, 1, 3}, false);  // 263,168
  // At most 768 columns the AVX-512 passes of consecutive rows are pipelined (a row's pass 1 in one
  // loop with the previous row's pass 2): 760 = 47 lines + 8.
  check_paths_against_generic(345, 760, {0, 1, 3}, false);  // 262,200
}

// On AVX2, rows of 513-768 columns (with gamma) take the pipelined backward: a row's pass 1 in one
// loop with the previous row's pass 2, each over half lines, through two alternating scratch slots.
// The same bits as the generic path for a first row with no pass 2 before it and a last with no
// pass 1 after it (1 row), row counts odd and even, rows that start off a 16-float line (513, 760
// columns: a tail of 1 and 8 floats past the last whole line), whole lines (640, 768), 769 columns (one past the limit: the
// rows one at a time), and on 2 threads calls above the parallel threshold (2^15 elements), whose
// halves of the rows run the pipeline each from its own first row.
TEST_CASE("layernorm: the AVX2 pipelined backward's rows give the generic path's bits on 1 and 2 threads") {
  ThreadGuard guard;
  normlab::set_num_threads(1);
  for (int64_t cols : {513, 640, 760, 768, 769}) {
    for (int64_t rows : {1, 2, 3, 6}) check_paths_against_generic(rows, cols, {0, 1, 3}, false);
  }
  for (int threads : {1, 2}) {
    normlab::set_num_threads(threads);
    CAPTURE(threads);
    check_paths_against_generic(45, 768, {0, 3}, false);  // 34,560 elements: rows 23 + 22 on 2 threads
    check_paths_against_generic(67, 513, {0, 1}, false);  // 34,371: 34 + 33
  }
}

// A forward output of at least 2^22 floats is written with streaming stores, and on AVX2 and
// AVX-512 rows of 257-1024 columns go through the pipelined forward (a row's squared deviations
// in one loop with the previous row's normalization): with the output vector-aligned (the fused
// loop streams its stores) and one float off (the row's passes one after the other). The same bits as
// the generic path; 4097 rows: an odd count, so the last row's sum goes alone after the pairs.
TEST_CASE("layernorm: a streamed forward output, aligned or not, gives the generic path's bits on every path") {
  const int64_t rows = 4097, cols = 1024;  // 4,195,328 floats: just above 2^22
  normlab::Rng rng(4097);
  std::vector<float> x(static_cast<size_t>(rows * cols)), gamma(static_cast<size_t>(cols)), beta(static_cast<size_t>(cols));
  for (size_t i = 0; i < x.size(); i++) x[i] = (i / size_t(cols)) % 3 == 0 ? 1e4f + rng.normal() : rng.normal();
  for (auto& v : gamma) v = 1.0f + 0.1f * rng.normal();
  for (auto& v : beta) v = 0.1f * rng.normal();
  // y at `offset` floats past the first 64-byte boundary of a buffer.
  auto forward = [&](size_t offset) {
    std::vector<float> buffer(x.size() + 32), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
    const size_t misalign = reinterpret_cast<uintptr_t>(buffer.data()) % 64 / sizeof(float);
    float* y = buffer.data() + (misalign == 0 ? 0 : 16 - misalign) + offset;
    normlab::kernels::layer_norm_forward(y, mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows, cols,
                                         1e-12f);
    std::vector<float> out(y, y + x.size());
    out.insert(out.end(), mean.begin(), mean.end());
    out.insert(out.end(), rstd.begin(), rstd.end());
    return out;
  };
  for (size_t offset : {size_t{0}, size_t{1}}) {
    std::vector<float> expected;
    {
      normlab::test::ScopedIsa generic(normlab::kernels::Isa::generic);
      expected = forward(offset);
    }
    for (normlab::kernels::Isa isa : normlab::test::available_isas()) {
      normlab::test::ScopedIsa scoped(isa);
      CAPTURE(offset);
      CHECK(same_bits(forward(offset), expected));
    }
  }
}
