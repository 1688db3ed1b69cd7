// The fused residual LayerNorm (post-LN's LN(x + f(x))) against its unfused composition, an add
// followed by layer_norm_forward / layer_norm_backward into a zeroed buffer plus the add's
// backward: the same bits, on every kernel path and thread count, with and without affine.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "isa_support.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

using namespace normlab;
using namespace normlab::kernels;

namespace {

std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("layer_norm_residual matches add then layer_norm bit for bit on every path") {
  const int saved_threads = num_threads();
  for (Isa isa : test::available_isas()) {
    test::ScopedIsa scoped(isa);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (int64_t cols : {1, 19, 64, 768}) {
        for (bool affine : {true, false}) {
          const int64_t rows = cols == 768 ? 50 : 37;
          INFO(std::string(isa_name(isa)) << " threads=" << threads << " cols=" << cols << " affine=" << affine);
          const auto x = randn(rows * cols, 1, 2.0f), residual = randn(rows * cols, 2), dy = randn(rows * cols, 3);
          const auto gamma_v = randn(cols, 4), beta_v = randn(cols, 5);
          const float* gamma = affine ? gamma_v.data() : nullptr;
          const float* beta = affine ? beta_v.data() : nullptr;

          // Unfused: s = x + residual; y = LN(s); ds = LN backward into zeros; dx += ds; dres += ds.
          std::vector<float> s(rows * cols), y(rows * cols), mean(rows), rstd(rows), ds(rows * cols, 0.0f);
          for (size_t i = 0; i < s.size(); i++) s[i] = x[i] + residual[i];
          layer_norm_forward(y.data(), mean.data(), rstd.data(), s.data(), gamma, beta, rows, cols, 1e-5f);
          auto dx = randn(rows * cols, 6), dres = randn(rows * cols, 7);
          auto dgamma = randn(cols, 8), dbeta = randn(cols, 9);
          layer_norm_backward(ds.data(), affine ? dgamma.data() : nullptr, affine ? dbeta.data() : nullptr, dy.data(),
                              s.data(), gamma, mean.data(), rstd.data(), rows, cols);
          for (size_t i = 0; i < ds.size(); i++) {
            dx[i] += ds[i];
            dres[i] += ds[i];
          }

          std::vector<float> fs(rows * cols), fy(rows * cols), fmean(rows), frstd(rows);
          layer_norm_residual_forward(fy.data(), fs.data(), fmean.data(), frstd.data(), x.data(), residual.data(), gamma,
                                      beta, rows, cols, 1e-5f);
          auto fdx = randn(rows * cols, 6), fdres = randn(rows * cols, 7);
          auto fdgamma = randn(cols, 8), fdbeta = randn(cols, 9);
          layer_norm_residual_backward(fdx.data(), fdres.data(), affine ? fdgamma.data() : nullptr,
                                       affine ? fdbeta.data() : nullptr, dy.data(), fs.data(), gamma, fmean.data(),
                                       frstd.data(), rows, cols);
          CHECK(same_bits(fs, s));
          CHECK(same_bits(fy, y));
          CHECK(same_bits(fmean, mean));
          CHECK(same_bits(frstd, rstd));
          CHECK(same_bits(fdx, dx));
          CHECK(same_bits(fdres, dres));
          CHECK(same_bits(fdgamma, dgamma));
          CHECK(same_bits(fdbeta, dbeta));
        }
      }
    }
  }
  set_num_threads(saved_threads);
}
