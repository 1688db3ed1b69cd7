// The LayerNorm kernels process rows in groups (several rows side by side) and send a thread's
// last rows, those that do not fill a group, one at a time. Whatever path a row takes, its results
// must be the bits it gets alone: checked here against a one-row-at-a-time reference built from
// calls with rows = 1, for row counts around the group sizes, on every kernel path.
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

std::vector<float> randn(int64_t n, uint64_t seed, float mean = 0.0f, float stddev = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.normal(mean, stddev);
  return v;
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

struct Batch {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};

// Forward then backward over all rows at once; dx, dgamma and dbeta start from the given values.
Batch run_batch(const std::vector<float>& x, const std::vector<float>& dy, const std::vector<float>& gamma,
                const std::vector<float>& beta, const std::vector<float>& dx0, const std::vector<float>& dgamma0,
                const std::vector<float>& dbeta0, int64_t rows, int64_t cols) {
  Batch b{std::vector<float>(x.size()),
          std::vector<float>(size_t(rows)),
          std::vector<float>(size_t(rows)),
          dx0,
          dgamma0,
          dbeta0};
  layer_norm_forward(b.y.data(), b.mean.data(), b.rstd.data(), x.data(), gamma.data(), beta.data(), rows, cols, 1e-5f);
  layer_norm_backward(b.dx.data(), b.dgamma.data(), b.dbeta.data(), dy.data(), x.data(), gamma.data(), b.mean.data(),
                      b.rstd.data(), rows, cols);
  return b;
}

}  // namespace

TEST_CASE("layernorm rows in groups and left over give the bits of each row alone, on every path") {
  const int saved_threads = num_threads();
  for (Isa isa : test::available_isas()) {
    test::ScopedIsa scoped(isa);
    // Row counts around the group sizes, on one thread (these calls are below the kernels'
    // parallel threshold). 131 rows of 256 are above it, so the threads' row blocks (66 + 65,
    // 44 + 44 + 43) end in partial groups too. Rows of 1024 floats are too long for the forward's
    // groups (2048 floats) and for the backward's on avx2 and generic, not for avx512's backward
    // (groups up to 16384 floats, kMaxBackwardGroupFloats): 4096 columns is its last grouped width
    // and 4100 the first one taken a row at a time. Rows of 513-768 columns take avx2's pipelined
    // backward (a row's pass 1 beside the previous row's pass 2): 45 x 768 and 67 x 513 are above
    // the threshold, so each thread's block starts and ends its own pipeline.
    struct Shape {
      int64_t rows, cols;
      bool threaded;
    };
    std::vector<Shape> shapes = {{131, 256, true}, {37, 1024, true}, {9, 4096, true},
                                 {9, 4100, true},  {45, 768, true},  {67, 513, true}};
    for (int64_t cols : {1, 16, 19, 64})
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 17, 37}) shapes.push_back({rows, cols, false});
    for (const Shape& shape : shapes) {
      const int64_t rows = shape.rows, cols = shape.cols;
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        INFO(std::string(isa_name(isa)) << " rows=" << rows << " cols=" << cols << " threads=" << threads);
        // A large mean: the split-mean and shift corrections are exercised too.
        const auto x = randn(rows * cols, 1, 30.0f, 2.0f), dy = randn(rows * cols, 2);
        const auto gamma = randn(cols, 3, 1.0f, 0.3f), beta = randn(cols, 4);
        const auto dx0 = randn(rows * cols, 5), dgamma0 = randn(cols, 6), dbeta0 = randn(cols, 7);
        const Batch batch = run_batch(x, dy, gamma, beta, dx0, dgamma0, dbeta0, rows, cols);

        // Row by row: y, mean, rstd and dx must match bit for bit. Called with zeroed dgamma and
        // dbeta, a lone row leaves its exact float terms dout * xhat and dout there (one term,
        // 0.0 + term in double, rounded back to float: no rounding at all).
        std::vector<double> dgamma_sum(size_t(cols), 0.0), dbeta_sum(size_t(cols), 0.0);
        bool rows_match = true;
        for (int64_t r = 0; r < rows; r++) {
          const size_t o = size_t(r * cols);
          auto row_of = [&](const std::vector<float>& v) {
            return std::vector<float>(v.begin() + int64_t(o), v.begin() + int64_t(o) + cols);
          };
          const std::vector<float> x_r = row_of(x), dy_r = row_of(dy), dx0_r = row_of(dx0);
          const Batch alone = run_batch(x_r, dy_r, gamma, beta, dx0_r, std::vector<float>(size_t(cols), 0.0f),
                                        std::vector<float>(size_t(cols), 0.0f), 1, cols);
          rows_match = rows_match && same_bits(alone.y.data(), batch.y.data() + o, cols) &&
                       same_bits(alone.dx.data(), batch.dx.data() + o, cols) &&
                       alone.mean[0] == batch.mean[size_t(r)] && alone.rstd[0] == batch.rstd[size_t(r)];
          for (int64_t j = 0; j < cols; j++) {  // rows in order, in double: the kernel's reduction on one thread
            dgamma_sum[size_t(j)] += double(alone.dgamma[size_t(j)]);
            dbeta_sum[size_t(j)] += double(alone.dbeta[size_t(j)]);
          }
        }
        CHECK(rows_match);
        // dgamma/dbeta: on one thread (every call here but the threaded shapes at threads > 1)
        // the kernel sums each column's terms over rows in row order, in double, then adds the
        // rounded sum into dgamma.
        if (threads == 1 || !shape.threaded) {
          bool params_match = true;
          for (size_t j = 0; j < size_t(cols); j++) {
            params_match = params_match && batch.dgamma[j] == dgamma0[j] + float(dgamma_sum[j]) &&
                           batch.dbeta[j] == dbeta0[j] + float(dbeta_sum[j]);
          }
          CHECK(params_match);
        }
      }
    }
  }
  set_num_threads(saved_threads);
}

TEST_CASE("layernorm called from inside the caller's OpenMP region covers every row, as one thread") {
  // A nested region runs with one thread: its rows and its dgamma/dbeta partials must be those of
  // that one thread, the bits of a call made outside at 1 thread.
  const int saved_threads = num_threads();
  const int64_t rows = 600, cols = 64;  // above the threading threshold
  const auto x = randn(rows * cols, 31, 0.5f, 2.0f), dy = randn(rows * cols, 32);
  const auto gamma = randn(cols, 33, 1.0f, 0.2f), beta = randn(cols, 34, 0.0f, 0.2f);
  const std::vector<float> dx0(size_t(rows * cols), 0.25f), dg0(size_t(cols), 0.5f), db0(size_t(cols), -0.5f);
  set_num_threads(1);
  const Batch outside = run_batch(x, dy, gamma, beta, dx0, dg0, db0, rows, cols);
  set_num_threads(2);
  Batch inside[2];
#pragma omp parallel for schedule(static) num_threads(2)
  for (int copy = 0; copy < 2; copy++) inside[copy] = run_batch(x, dy, gamma, beta, dx0, dg0, db0, rows, cols);
  for (const Batch& b : inside) {
    CHECK(same_bits(b.y.data(), outside.y.data(), rows * cols));
    CHECK(same_bits(b.dx.data(), outside.dx.data(), rows * cols));
    CHECK(same_bits(b.dgamma.data(), outside.dgamma.data(), cols));
    CHECK(same_bits(b.dbeta.data(), outside.dbeta.data(), cols));
  }
  set_num_threads(saved_threads);
}
