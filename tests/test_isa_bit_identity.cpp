// Every fast kernel on every path this CPU has (generic, avx2, avx512), compared bit for bit with
// the generic path: the paths differ in vector width and GEMM micro-tile, never in the numbers.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "isa_support.hpp"
#include "same_bytes.hpp"
#include "normlab/kernels/activations.hpp"
#include "normlab/kernels/adam.hpp"
#include "normlab/kernels/add.hpp"
#include "normlab/kernels/attention.hpp"
#include "normlab/kernels/batch_norm.hpp"
#include "normlab/kernels/cross_entropy.hpp"
#include "normlab/kernels/dropout.hpp"
#include "normlab/kernels/embedding.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/kernels/matmul.hpp"
#include "normlab/kernels/power_norm.hpp"
#include "normlab/kernels/rms_norm.hpp"
#include "normlab/kernels/softmax.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

using namespace normlab;
using namespace normlab::kernels;

namespace {

using Buffers = std::vector<std::vector<float>>;

std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// Runs `compute` (which returns every buffer the kernels wrote) on each available path and checks
// each buffer against the generic path's, bit for bit, at 1 and at 2 threads.
void check_every_path(const std::string& what, const std::function<Buffers()>& compute) {
  const int saved_threads = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Buffers reference;
    {
      test::ScopedIsa generic(Isa::generic);
      reference = compute();
    }
    for (Isa isa : test::available_isas()) {
      if (isa == Isa::generic) continue;
      test::ScopedIsa scoped(isa);
      const Buffers got = compute();
      REQUIRE(got.size() == reference.size());
      for (size_t b = 0; b < got.size(); b++) {
        INFO(what << " on " << std::string(isa_name(isa)) << ", " << threads << " threads, output " << b);
        REQUIRE(got[b].size() == reference[b].size());
        size_t first_difference = got[b].size();
        for (size_t i = 0; i < got[b].size(); i++) {
          if (std::memcmp(&got[b][i], &reference[b][i], sizeof(float)) != 0) {
            first_difference = i;
            break;
          }
        }
        INFO("first difference at " << first_difference);
        CHECK(first_difference == got[b].size());
      }
    }
  }
  set_num_threads(saved_threads);
}

}  // namespace

TEST_CASE("bit identity across paths: GEMM in all layouts with edges and several K blocks and accumulate") {
  struct Shape {
    int64_t M, K, N;
  };
  // Edge sizes for every micro-tile (4x16, 6x16, 8x32), K over one and several 256-blocks, and
  // tn with M > 256 (A packed).
  for (Shape s : {Shape{1, 1, 1}, Shape{7, 5, 33}, Shape{13, 300, 17}, Shape{50, 64, 70}, Shape{300, 40, 20},
                  Shape{97, 513, 65}}) {
    for (bool accumulate : {false, true}) {
      const std::string what = "matmul M=" + std::to_string(s.M) + " K=" + std::to_string(s.K) +
                               " N=" + std::to_string(s.N) + (accumulate ? " accumulate" : "");
      check_every_path(what, [&] {
        const auto a = randn(s.M * s.K, 1), b = randn(s.K * s.N, 2);
        auto nn = randn(s.M * s.N, 3), nt = nn, tn = nn;
        matmul_nn(nn.data(), a.data(), b.data(), s.M, s.K, s.N, accumulate);
        matmul_nt(nt.data(), a.data(), b.data(), s.M, s.K, s.N, accumulate);  // b read as (N, K)
        matmul_tn(tn.data(), a.data(), b.data(), s.M, s.K, s.N, accumulate);  // a read as (K, M)
        return Buffers{nn, nt, tn};
      });
    }
  }
}

TEST_CASE("bit identity across paths: GEMM at the demo's 135 rows, B read in place (N <= 256) and packed") {
  struct Shape {
    int64_t M, K, N;
  };
  // 135 = 16 panels of 8 and 7 rows (nn and nt read the last 7 in place on the FMA paths); N = 256
  // reads B in place for nn and tn, N = 257 packs it; K = 300 crosses a 256-block in place.
  for (Shape s : {Shape{135, 64, 256}, Shape{135, 300, 64}, Shape{135, 64, 257}, Shape{256, 135, 64}}) {
    const std::string what =
        "matmul M=" + std::to_string(s.M) + " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N);
    check_every_path(what, [&] {
      const auto a = randn(s.M * s.K, 21), b = randn(s.K * s.N, 22);
      auto nn = randn(s.M * s.N, 23), nt = nn, tn = nn;
      matmul_nn(nn.data(), a.data(), b.data(), s.M, s.K, s.N, true);
      matmul_nt(nt.data(), a.data(), b.data(), s.M, s.K, s.N, false);  // b read as (N, K)
      matmul_tn(tn.data(), a.data(), b.data(), s.M, s.K, s.N, false);  // a read as (K, M)
      return Buffers{nn, nt, tn};
    });
  }
}

TEST_CASE("bit identity across paths: Linear + ReLU backward at 135 rows, dbias in register blocks and their rest") {
  // OC = 232: the serial dbias's blocks of 128 and 64 (avx512) or of 64 (avx2), then of 32, then
  // single columns; 135 x 232 stays on one thread at every thread count.
  const int64_t N = 135, C = 64, OC = 232;
  check_every_path("linear_relu OC=232", [&] {
    const auto x = randn(N * C, 24), w = randn(OC * C, 25, 0.1f), bias = randn(OC, 26), dy = randn(N * OC, 27);
    std::vector<float> y(N * OC);
    auto dx = randn(N * C, 28), dw = randn(OC * C, 29), db = randn(OC, 30);
    linear_relu_forward(y.data(), x.data(), w.data(), bias.data(), N, C, OC);
    linear_relu_backward(dx.data(), dw.data(), db.data(), dy.data(), y.data(), x.data(), w.data(), N, C, OC);
    std::vector<float> db2(OC);
    linear_backward(GradOut{}, GradOut{}, GradOut{db2.data(), false}, dy.data(), x.data(), w.data(), N, C, OC);
    return Buffers{y, dx, dw, db, db2};
  });
}

TEST_CASE("bit identity across paths: Linear forward and backward") {
  const int64_t N = 45, C = 40, OC = 72;
  check_every_path("linear", [&] {
    const auto x = randn(N * C, 4), w = randn(OC * C, 5, 0.2f), bias = randn(OC, 6), dy = randn(N * OC, 7);
    std::vector<float> y(N * OC);
    auto dx = randn(N * C, 8), dw = randn(OC * C, 9), db = randn(OC, 10);
    linear_forward(y.data(), x.data(), w.data(), bias.data(), N, C, OC);
    linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC);
    return Buffers{y, dx, dw, db};
  });
}

TEST_CASE("bit identity across paths: Linear + ReLU fused, over one and several K blocks") {
  for (int64_t C : {40, 300}) {
    const int64_t N = 45, OC = 72;
    check_every_path("linear_relu C=" + std::to_string(C), [&] {
      const auto x = randn(N * C, 11), w = randn(OC * C, 12, 0.1f), bias = randn(OC, 13), dy = randn(N * OC, 14);
      std::vector<float> y(N * OC);
      auto dx = randn(N * C, 15), dw = randn(OC * C, 16), db = randn(OC, 17);
      linear_relu_forward(y.data(), x.data(), w.data(), bias.data(), N, C, OC);
      linear_relu_backward(dx.data(), dw.data(), db.data(), dy.data(), y.data(), x.data(), w.data(), N, C, OC);
      return Buffers{y, dx, dw, db};
    });
  }
}

TEST_CASE("bit identity across paths: LayerNorm and RMSNorm forward and backward") {
  for (int64_t cols : {1, 7, 16, 67, 768}) {
    const int64_t rows = cols == 768 ? 48 : 53;
    check_every_path("norms cols=" + std::to_string(cols), [&] {
      auto x = randn(rows * cols, 11, 3.0f);
      for (auto& v : x) v += 100.0f;  // a large mean: the split-mean trick must agree too
      const auto gamma = randn(cols, 12), beta = randn(cols, 13), dy = randn(rows * cols, 14);
      std::vector<float> y(rows * cols), mean(rows), rstd(rows), ry(rows * cols), rrstd(rows);
      auto dx = randn(rows * cols, 15), dgamma = randn(cols, 16), dbeta = randn(cols, 17);
      auto rdx = dx, rdgamma = dgamma;
      layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows, cols, 1e-5f);
      layer_norm_backward(dx.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(), gamma.data(), mean.data(),
                          rstd.data(), rows, cols);
      rms_norm_forward(ry.data(), rrstd.data(), x.data(), gamma.data(), rows, cols, 1e-6f);
      rms_norm_backward(rdx.data(), rdgamma.data(), dy.data(), x.data(), gamma.data(), rrstd.data(), rows, cols);
      return Buffers{y, mean, rstd, dx, dgamma, dbeta, ry, rrstd, rdx, rdgamma};
    });
  }
}

// An output of at least 2^22 floats is written with streaming stores on AVX2 and AVX-512 (the
// generic path has none): rows of 1031 floats start at every alignment, so each row has its
// ordinary-store head and tail.
TEST_CASE("bit identity across paths: LayerNorm forward with streaming stores") {
  const int64_t rows = 4070, cols = 1031;  // 4,196,170 floats: past the streaming threshold
  const auto x = randn(rows * cols, 21, 2.0f);
  const auto gamma = randn(cols, 22), beta = randn(cols, 23);
  check_every_path("layernorm forward, streamed output", [&] {
    std::vector<float> y(rows * cols), mean(rows), rstd(rows);
    layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows, cols, 1e-5f);
    return Buffers{y, mean, rstd};
  });
}

// The forward takes rows 4 at a time: every row must get the bits it gets alone (N = 1).
TEST_CASE("bit identity across paths: cross-entropy rows in groups equal each row alone") {
  const int64_t N = 11, V = 32;  // two groups of 4 and 3 rows left over, the demo's vocabulary
  check_every_path("cross_entropy grouped vs alone", [&] {
    auto logits = randn(N * V, 41, 4.0f);
    logits[5 * V + 7] = 0.0f;  // a row whose max is +0 beside a -0
    logits[5 * V + 9] = -0.0f;
    for (int64_t v = 0; v < V; v++) logits[5 * V + v] = std::min(logits[5 * V + v], 0.0f);
    std::vector<int32_t> targets(N);
    for (int64_t n = 0; n < N; n++) targets[n] = n == 6 ? -1 : int32_t((n * 7) % V);
    std::vector<float> losses(N), probs(N * V), losses_alone(N), probs_alone(N * V);
    cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    for (int64_t n = 0; n < N; n++)
      cross_entropy_forward(losses_alone.data() + n, probs_alone.data() + n * V, logits.data() + n * V,
                            targets.data() + n, 1, V);
    CHECK(std::memcmp(losses.data(), losses_alone.data(), sizeof(float) * size_t(N)) == 0);
    CHECK(std::memcmp(probs.data(), probs_alone.data(), sizeof(float) * size_t(N * V)) == 0);
    return Buffers{losses, probs};
  });
}

// The gradient norm's per-tensor sums: tensors side by side (largest first) must give each
// tensor's 8-lane sum exactly as one tensor alone, on every path; sizes 0, below one line of 8,
// not a multiple of 8, equal and unequal.
TEST_CASE("bit identity across paths: per-tensor sums of squares for the gradient norm") {
  const std::vector<int64_t> sizes = {192, 0, 16384, 7, 4096, 16384, 1, 12288, 64, 1003, 8, 9, 256, 64, 3};
  std::vector<std::vector<float>> grads;
  for (size_t k = 0; k < sizes.size(); k++) grads.push_back(randn(sizes[k], 50 + k, k % 3 == 0 ? 1e-3f : 2.0f));
  std::vector<double> expected(sizes.size());
  for (size_t k = 0; k < sizes.size(); k++) {  // one tensor alone, the lanes of kernels/adam.hpp
    double lanes[8] = {};
    for (int64_t i = 0; i < sizes[k]; i++) lanes[i % 8] += double(grads[k][size_t(i)]) * double(grads[k][size_t(i)]);
    for (int width = 4; width >= 1; width /= 2)
      for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
    expected[k] = lanes[0];
  }
  check_every_path("sums_of_squares", [&] {
    std::vector<const float*> g;
    for (const auto& v : grads) g.push_back(v.empty() ? nullptr : v.data());
    std::vector<double> sums(sizes.size(), -1.0);
    sums_of_squares(sums.data(), g.data(), sizes.data(), int64_t(sizes.size()));
    CHECK(std::memcmp(sums.data(), expected.data(), sizeof(double) * sums.size()) == 0);
    std::vector<float> bits(2 * sums.size());  // the doubles' bytes, for the comparison across paths
    std::memcpy(bits.data(), sums.data(), sizeof(double) * sums.size());
    return Buffers{bits};
  });
  {
    test::ScopedIsa reference(Isa::reference);
    std::vector<const float*> g;
    for (const auto& v : grads) g.push_back(v.empty() ? nullptr : v.data());
    std::vector<double> sums(sizes.size(), -1.0);
    sums_of_squares(sums.data(), g.data(), sizes.data(), int64_t(sizes.size()));
    CHECK(std::memcmp(sums.data(), expected.data(), sizeof(double) * sums.size()) == 0);
  }
}

TEST_CASE("bit identity across paths: BatchNorm train and eval and backward") {
  const int64_t N = 70, C = 37;
  check_every_path("batch_norm", [&] {
    const auto x = randn(N * C, 18, 2.0f), gamma = randn(C, 19), beta = randn(C, 20), dy = randn(N * C, 21);
    std::vector<float> y(N * C), mean(C), rstd(C), running_mean(C, 0.0f), running_var(C, 1.0f), ye(N * C);
    auto dx = randn(N * C, 22), dgamma = randn(C, 23), dbeta = randn(C, 24);
    batch_norm_forward_train(y.data(), mean.data(), rstd.data(), running_mean.data(), running_var.data(), x.data(),
                             gamma.data(), beta.data(), N, C, 1e-5f, 0.1f);
    batch_norm_forward_eval(ye.data(), x.data(), running_mean.data(), running_var.data(), gamma.data(), beta.data(), N,
                            C, 1e-5f);
    batch_norm_backward(dx.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(), gamma.data(), mean.data(),
                        rstd.data(), N, C);
    return Buffers{y, mean, rstd, running_mean, running_var, ye, dx, dgamma, dbeta};
  });
}

TEST_CASE("bit identity across paths: PowerNorm train and eval forward, both backwards") {
  for (int64_t N : {70, 1000}) {  // 1000 x 37 takes the threaded column sums
    const int64_t C = 37;
    check_every_path("power_norm N=" + std::to_string(N), [&] {
      const auto x = randn(N * C, 25, 2.0f), gamma = randn(C, 26), beta = randn(C, 27), dy = randn(N * C, 28);
      std::vector<float> y(N * C), ye(N * C), rstd(C), rstd_eval(C), running_phi(C, 1.5f);
      auto grad_ema = randn(C, 29, 0.3f);
      auto dx = randn(N * C, 30), dgamma = randn(C, 31), dbeta = randn(C, 32), dx_exact = dx;
      power_norm_forward(y.data(), rstd.data(), running_phi.data(), x.data(), gamma.data(), beta.data(), N, C, 1e-5f,
                         0.1f);
      power_norm_forward(ye.data(), rstd_eval.data(), running_phi.data(), x.data(), gamma.data(), beta.data(), N, C,
                         1e-5f, 0.0f);
      power_norm_backward(dx.data(), dgamma.data(), dbeta.data(), grad_ema.data(), dy.data(), x.data(), gamma.data(),
                          rstd.data(), N, C, 0.1f);
      power_norm_backward(dx_exact.data(), nullptr, nullptr, nullptr, dy.data(), x.data(), gamma.data(),
                          rstd_eval.data(), N, C, 0.1f);
      return Buffers{y, ye, rstd, rstd_eval, running_phi, grad_ema, dx, dgamma, dbeta, dx_exact};
    });
  }
}

TEST_CASE("bit identity across paths: activations (ReLU GELU DyT) and softmax and dropout") {
  const int64_t N = 33, C = 61;
  check_every_path("activations", [&] {
    const auto x = randn(N * C, 25, 4.0f), dy = randn(N * C, 26);
    std::vector<float> relu(N * C), gelu(N * C), dyt(N * C), soft(N * C), drop(N * C), mask(N * C);
    auto drelu = randn(N * C, 27), dgelu = drelu, ddyt = drelu, dsoft = drelu, ddrop = drelu;
    const std::vector<float> alpha{0.7f};
    const auto gamma = randn(C, 28), beta = randn(C, 29);
    std::vector<float> dalpha{0.5f};
    auto dgamma = randn(C, 30), dbeta = randn(C, 31);
    relu_forward(relu.data(), x.data(), N * C);
    relu_backward(drelu.data(), dy.data(), x.data(), N * C);
    gelu_forward(gelu.data(), x.data(), N * C);
    gelu_backward(dgelu.data(), dy.data(), x.data(), N * C);
    dyt_forward(dyt.data(), x.data(), alpha.data(), gamma.data(), beta.data(), N, C);
    dyt_backward(ddyt.data(), dalpha.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(), alpha.data(),
                 gamma.data(), N, C);
    softmax_forward(soft.data(), x.data(), N, C);
    softmax_backward(dsoft.data(), dy.data(), soft.data(), N, C);
    const std::vector<int64_t> offsets{0, 5, 6, 20, N};  // 4 sequences, the share of a rank from sequence 3
    dropout_forward(drop.data(), mask.data(), x.data(), offsets.data(), 4, C, 0.3f, dropout_key(32, 1, 0), 3);
    dropout_backward(ddrop.data(), dy.data(), mask.data(), N * C);
    return Buffers{relu, drelu, gelu, dgelu, dyt, ddyt, dalpha, dgamma, dbeta, soft, dsoft, drop, mask, ddrop};
  });
}

TEST_CASE("bit identity across paths: cross-entropy and embedding") {
  const int64_t N = 29, V = 50, C = 24;
  check_every_path("cross_entropy+embedding", [&] {
    const auto logits = randn(N * V, 33, 5.0f);
    std::vector<int32_t> targets(N), ids(N);
    for (int64_t n = 0; n < N; n++) {
      targets[n] = n % 7 == 3 ? -1 : int32_t((n * 13) % V);
      ids[n] = int32_t((n * 5) % V);
    }
    std::vector<float> losses(N), probs(N * V), loss(1), emb(N * C);
    auto dlogits = randn(N * V, 34);
    const auto table = randn(V * C, 35), dy = randn(N * C, 36);
    auto dtable = randn(V * C, 37);
    loss[0] = cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V, 0.75f);
    embedding_forward(emb.data(), ids.data(), table.data(), N, V, C);
    embedding_backward(dtable.data(), dy.data(), ids.data(), N, V, C);
    return Buffers{losses, probs, loss, dlogits, emb, dtable};
  });
}

TEST_CASE("bit identity across paths: attention forward and backward over a packed batch") {
  // Head dims 16 and 20 (one padded vector of 16, or two), 12 and 3 (the 8x8 transpose blocks and
  // the 8-float row loops with a scalar tail, or with none taken): lengths 1..100 give whole and
  // partial register tiles, a second query block (48 rows) and rows padded to 16 floats.
  for (const auto& [C, NH] : {std::pair<int64_t, int64_t>{48, 3}, {40, 2}, {36, 3}, {12, 4}}) {
    CAPTURE(C);
    const std::vector<int64_t> offsets{0, 1, 9, 30, 30, 43, 143};
    const int64_t B = int64_t(offsets.size()) - 1, T = offsets.back();
    check_every_path("attention", [&] {
      const auto qkv = randn(T * 3 * C, 38), dout = randn(T * C, 39);
      std::vector<float> out(T * C), att(attention_cache_size(offsets.data(), B, NH));
      auto dqkv = randn(T * 3 * C, 40);
      attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
      attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), offsets.data(), B, C, NH);
      return Buffers{out, att, dqkv};
    });
  }
}

TEST_CASE("bit identity across paths: GEMM and attention on values that need the generic path's exact fma") {
  // The generic path's fast software fma (kernels/exact_fma.hpp) hands two kinds of input to its
  // exact fallback: operands with tiny values (0 < |x| < 2^-50: here subnormals and 1e-20s among
  // normal values) and sums that land on a float midpoint (integers up to 2^12 whose products
  // and sums pass 2^24, where every odd integer is halfway between two floats).
  Rng rng(26);
  auto integers = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = float(int(rng.below(8192)) - 4096);
    return v;
  };
  auto with_tiny = [&](std::vector<float> v) {
    for (size_t i = 0; i < v.size(); i += 7) v[i] = (i % 2 ? 1e-20f : 3e-40f) * v[i];
    return v;
  };
  const int64_t M = 37, K = 300, N = 21;
  const auto ia = integers(M * K), ib = integers(K * N);
  const auto ta = with_tiny(randn(M * K, 5)), tb = randn(K * N, 6);
  for (const bool tiny : {false, true}) {
    const auto& a = tiny ? ta : ia;
    const auto& b = tiny ? tb : ib;
    check_every_path(tiny ? "matmul with tiny values" : "matmul on integers past 2^24", [&] {
      std::vector<float> nn(M * N), nt(M * N), tn(M * N);
      matmul_nn(nn.data(), a.data(), b.data(), M, K, N, false);
      matmul_nt(nt.data(), a.data(), b.data(), M, K, N, false);
      matmul_tn(tn.data(), a.data(), b.data(), M, K, N, false);
      return Buffers{nn, nt, tn};
    });
  }
  // Attention with large scores: most exponentials underflow to tiny values or subnormals.
  const int64_t C = 32, NH = 2;
  // (the last sequence, 270 tokens, past kAttentionKeptExpsMaxLength: the backward recomputes its exponentials)
  const std::vector<int64_t> offsets{0, 5, 60, 330};
  const int64_t B = int64_t(offsets.size()) - 1, T = offsets.back();
  check_every_path("attention with exponentials far below 2^-50", [&] {
    const auto qkv = randn(T * 3 * C, 41, 12.0f), dout = randn(T * C, 42);
    std::vector<float> out(T * C), att(attention_cache_size(offsets.data(), B, NH));
    std::vector<float> dqkv(T * 3 * C);
    attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), offsets.data(), B, C, NH);
    return Buffers{out, att, dqkv};
  });
}

// The Adam step's element loop in all three forms (AdamW decay, Adam decay, none), over a length
// with a vector tail, three steps each: every path against the generic one, and the generic one
// against the reference build of the kernel (the loop written out one element at a time).
TEST_CASE("bit identity across paths: the Adam update (AdamW decay, Adam decay, none)") {
  const int64_t N = 1000 + 13;
  auto scalars = [](bool decoupled, float wd, int64_t t) {
    const double b1 = 0.9, b2 = 0.98, lr = 0.003;
    AdamScalars s{};
    s.decoupled = decoupled;
    s.param_scale = float(1.0 - lr * (decoupled ? wd : 0.0));
    s.grad_decay = decoupled ? 0.0f : wd;
    s.beta1 = float(b1), s.beta2 = float(b2), s.one_minus_beta1 = float(1 - b1), s.one_minus_beta2 = float(1 - b2);
    s.bias_correction2_sqrt = float(std::sqrt(1.0 - std::pow(b2, double(t))));
    s.eps = 1e-8f;
    s.neg_step_size = float(-(lr / (1.0 - std::pow(b1, double(t)))));
    return s;
  };
  auto run = [&](bool decoupled, float wd) {
    auto p = randn(N, 40), m = std::vector<float>(N, 0.0f), v = std::vector<float>(N, 0.0f);
    for (int64_t t = 1; t <= 3; t++) {
      auto g = randn(N, 40 + uint64_t(t), 0.01f);
      g[5] = 0.0f;  // v stays 0 there: the denominator is eps alone
      adam_update(p.data(), m.data(), v.data(), g.data(), N, scalars(decoupled, wd, t));
    }
    return Buffers{p, m, v};
  };
  for (auto [decoupled, wd] : {std::pair{true, 0.01f}, std::pair{false, 0.01f}, std::pair{true, 0.0f}}) {
    INFO("decoupled " << decoupled << ", weight decay " << wd);
    check_every_path("adam", [&] { return run(decoupled, wd); });
    Buffers generic, reference;
    {
      test::ScopedIsa scoped(Isa::generic);
      generic = run(decoupled, wd);
    }
    {
      test::ScopedIsa scoped(Isa::reference);
      reference = run(decoupled, wd);
    }
    for (size_t b = 0; b < generic.size(); b++)
      CHECK(std::memcmp(generic[b].data(), reference[b].data(), generic[b].size() * sizeof(float)) == 0);
    // The steps moved the weights (a kernel that did nothing would pass the comparisons above).
    CHECK(std::memcmp(generic[0].data(), randn(N, 40).data(), N * sizeof(float)) != 0);
  }
}

// Scores that are NaN or infinite reach attention's exponential as x - max = NaN or -inf, and
// huge finite scores as x - max far below -87 (exp underflows to 0): the vector exp takes every
// such argument the way math::exp does, on every path. A NaN result is compared by being a NaN
// in the same places (its payload may depend on the instruction order).
TEST_CASE("bit identity across paths: attention with NaN, infinite and huge scores") {
  const int64_t C = 48, NH = 3;
  const std::vector<int64_t> offsets{0, 7, 40, 100};
  const int64_t B = int64_t(offsets.size()) - 1, T = offsets.back();
  auto compute = [&] {
    auto qkv = randn(T * 3 * C, 41);
    const auto dout = randn(T * C, 42);
    qkv[size_t(8 * 3 * C + 2)] = std::numeric_limits<float>::quiet_NaN();      // a query of sequence 1
    qkv[size_t(50 * 3 * C + C + 1)] = std::numeric_limits<float>::infinity();  // a key of sequence 2
    for (int64_t c = 0; c < C; c++) qkv[size_t(70 * 3 * C + C + c)] *= 1e4f;   // a huge key in sequence 2
    std::vector<float> out(T * C), att(attention_cache_size(offsets.data(), B, NH));
    auto dqkv = randn(T * 3 * C, 43);
    attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), offsets.data(), B, C, NH);
    return Buffers{out, dqkv};
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); i++) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return false;
      if (!std::isnan(a[i]) && std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
    }
    return true;
  };
  Buffers generic;
  {
    test::ScopedIsa scoped(Isa::generic);
    generic = compute();
  }
  size_t nans = 0;
  for (float v : generic[0]) nans += std::isnan(v);
  CHECK(nans > 0);                      // the NaN query's row is NaN...
  CHECK(nans < generic[0].size() / 2);  // ...and the other sequences are not
  for (Isa isa : test::available_isas()) {
    test::ScopedIsa scoped(isa);
    const Buffers got = compute();
    INFO(std::string(isa_name(isa)));
    CHECK(same(got[0], generic[0]));
    CHECK(same(got[1], generic[1]));
  }
}

// The Adam update with the gradient's sum of squares from the same pass: on every path the same
// p, m, v as adam_update and the same sum as sums_of_squares (which the tests above tie to the
// plain lanes), for lengths around the vector widths (16, 8) and the lines of 8, all three forms.
TEST_CASE("bit identity across paths: the Adam update with its sum of squares") {
  AdamScalars s{};
  s.beta1 = 0.9f, s.beta2 = 0.98f, s.one_minus_beta1 = 0.1f, s.one_minus_beta2 = 0.02f;
  s.bias_correction2_sqrt = 0.14f, s.eps = 1e-8f, s.neg_step_size = -0.03f;
  const std::vector<int64_t> sizes = {0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 100, 1013};
  for (auto [decoupled, wd] : {std::pair{true, 0.01f}, std::pair{false, 0.01f}, std::pair{true, 0.0f}}) {
    INFO("decoupled " << decoupled << ", weight decay " << wd);
    s.decoupled = decoupled;
    s.param_scale = decoupled ? 1.0f - 0.003f * wd : 1.0f;
    s.grad_decay = decoupled ? 0.0f : wd;
    check_every_path("adam_update_sum_squares", [&] {
      Buffers out;
      for (int64_t N : sizes) {
        INFO("N " << N);
        auto p = randn(N, 60, 1.0f), m = randn(N, 61, 0.01f), v = randn(N, 62, 1e-4f), g = randn(N, 63, 0.02f);
        for (auto& x : v) x = x * x;
        if (N > 5) g[5] = 0.0f;
        auto p2 = p, m2 = m, v2 = v;
        const double sum = adam_update_sum_squares(p.data(), m.data(), v.data(), g.data(), N, s);
        adam_update(p2.data(), m2.data(), v2.data(), g.data(), N, s);
        double expected = -1.0;
        const float* gp = g.data();
        sums_of_squares(&expected, &gp, &N, 1);
        CHECK(std::memcmp(&sum, &expected, sizeof(double)) == 0);
        CHECK(normlab::test::same_bytes(p.data(), p2.data(), sizeof(float) * size_t(N)));
        CHECK(normlab::test::same_bytes(m.data(), m2.data(), sizeof(float) * size_t(N)));
        CHECK(normlab::test::same_bytes(v.data(), v2.data(), sizeof(float) * size_t(N)));
        std::vector<float> bits(2);
        std::memcpy(bits.data(), &sum, sizeof(double));
        for (auto* b : {&p, &m, &v, &bits}) out.push_back(*b);
      }
      return out;
    });
    test::ScopedIsa reference(Isa::reference);  // the plain loop, the same bits as the generic path
    auto p = randn(1013, 60, 1.0f), m = randn(1013, 61, 0.01f), v = randn(1013, 62, 1e-4f), g = randn(1013, 63, 0.02f);
    for (auto& x : v) x = x * x;
    g[5] = 0.0f;
    auto p2 = p, m2 = m, v2 = v;
    const double sum = adam_update_sum_squares(p.data(), m.data(), v.data(), g.data(), 1013, s);
    {
      test::ScopedIsa generic(Isa::generic);
      const double generic_sum = adam_update_sum_squares(p2.data(), m2.data(), v2.data(), g.data(), 1013, s);
      CHECK(std::memcmp(&sum, &generic_sum, sizeof(double)) == 0);
    }
    CHECK(p == p2);
    CHECK(m == m2);
    CHECK(v == v2);
  }
}

// all_finite: an infinity or a NaN anywhere (in a vector's body or in the tail) is found, on every
// path; the largest finite float, subnormals and -0 are finite.
TEST_CASE("bit identity across paths: all_finite finds each infinity and NaN") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (Isa isa : test::available_isas()) {
    test::ScopedIsa scoped(isa);
    INFO(isa_name(isa));
    for (int64_t N : {0, 1, 7, 16, 17, 40, 1013}) {
      auto x = randn(N, 70, 1.0f);
      if (N > 3) {
        x[0] = std::numeric_limits<float>::max();
        x[1] = -std::numeric_limits<float>::max();
        x[2] = std::numeric_limits<float>::denorm_min();
        x[3] = -0.0f;
      }
      CHECK(all_finite(x.data(), N));
      for (int64_t at : {int64_t(0), N / 2, N - 1}) {
        if (N == 0) continue;
        for (float bad : {inf, -inf, nan, -nan}) {
          auto y = x;
          y[size_t(at)] = bad;
          INFO("N " << N << ", at " << at << ", " << bad);
          CHECK(!all_finite(y.data(), N));
        }
      }
    }
  }
  test::ScopedIsa reference(Isa::reference);
  std::vector<float> x(9, 1.0f);
  CHECK(all_finite(x.data(), 9));
  x[8] = inf;
  CHECK(!all_finite(x.data(), 9));
}

// The residual sum and its gradient, written and added, over lengths around the vector widths; the
// reference build's plain loops give the same bits.
TEST_CASE("bit identity across paths: the residual add and its gradient") {
  auto run = [] {
    Buffers out;
    for (int64_t N : {0, 1, 15, 16, 17, 8832, 8847}) {
      const auto a = randn(N, 80), b = randn(N, 81, 3.0f), g = randn(N, 82);
      std::vector<float> sum(size_t(N), -1.0f), written(size_t(N), std::numeric_limits<float>::quiet_NaN());
      auto added = randn(N, 83);
      add_forward(sum.data(), a.data(), b.data(), N);
      add_backward(GradOut(written.data(), false), g.data(), N);
      add_backward(GradOut(added.data(), true), g.data(), N);
      add_backward(GradOut(), g.data(), N);  // not wanted: nothing to write
      bool sums_right = true;
      for (int64_t i = 0; i < N; i++) sums_right &= sum[size_t(i)] == a[size_t(i)] + b[size_t(i)];
      CHECK(sums_right);
      CHECK(normlab::test::same_bytes(written.data(), g.data(), sizeof(float) * size_t(N)));
      for (auto* buffer : {&sum, &written, &added}) out.push_back(*buffer);
    }
    return out;
  };
  check_every_path("add", run);
  Buffers generic, reference;
  {
    test::ScopedIsa scoped(Isa::generic);
    generic = run();
  }
  {
    test::ScopedIsa scoped(Isa::reference);
    reference = run();
  }
  REQUIRE(generic.size() == reference.size());
  for (size_t k = 0; k < generic.size(); k++)
    CHECK(normlab::test::same_bytes(generic[k].data(), reference[k].data(), sizeof(float) * generic[k].size()));
}
