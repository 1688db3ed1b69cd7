// GEMM (kernels/matmul.hpp) and Linear (kernels/linear.hpp) against float64 reference loops,
// on random, block-edge and model shapes; determinism across runs and thread counts; a
// finite-difference check of the Linear backward.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "normlab/kernels/activations.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/kernels/matmul.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

using namespace normlab;
using namespace normlab::kernels;

namespace {

std::vector<float> random_vector(int64_t n, Rng& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.normal();
  return v;
}

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

struct Shape {
  int64_t M, K, N;
};

std::string describe(char variant, Shape s) {
  return std::string("matmul_") +
         (variant == 'n'   ? "nn"
          : variant == 't' ? "nt"
                           : "tn") +
         " M=" + std::to_string(s.M) + " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N);
}

// variant 'n' = nn (A (M,K), B (K,N)), 't' = nt (A (M,K), B stored (N,K)),
// 'T' = tn (A stored (K,M), B (K,N)).
float a_at(char variant, const std::vector<float>& A, Shape s, int64_t i, int64_t k) {
  return variant == 'T' ? A[k * s.M + i] : A[i * s.K + k];
}
float b_at(char variant, const std::vector<float>& B, Shape s, int64_t k, int64_t j) {
  return variant == 't' ? B[j * s.K + k] : B[k * s.N + j];
}

void run(char variant, float* C, const std::vector<float>& A, const std::vector<float>& B, Shape s, bool accumulate,
         bool parallel = true) {
  if (variant == 'n') matmul_nn(C, A.data(), B.data(), s.M, s.K, s.N, accumulate, parallel);
  if (variant == 't') matmul_nt(C, A.data(), B.data(), s.M, s.K, s.N, accumulate, parallel);
  if (variant == 'T') matmul_tn(C, A.data(), B.data(), s.M, s.K, s.N, accumulate, parallel);
}

// Checks one variant on one shape, without and with accumulation, against float64 loops. The
// tolerance is the classic bound for a float sum of K products, |error| <= K * u * sum|a||b|
// (u = 2^-24), with a factor 2 of slack: an indexing bug gives errors of order sum|a||b| itself.
void check_variant(char variant, Shape s, Rng& rng) {
  CAPTURE(describe(variant, s));
  const auto A = random_vector(s.M * s.K, rng);
  const auto B = random_vector(s.K * s.N, rng);
  const auto C0 = random_vector(s.M * s.N, rng);
  std::vector<float> C(C0.size(), NAN);  // accumulate=false must ignore what C holds
  std::vector<float> C_acc = C0;
  run(variant, C.data(), A, B, s, /*accumulate=*/false);
  run(variant, C_acc.data(), A, B, s, /*accumulate=*/true);
  // op(A) as (M,K) and op(B)^T as (N,K) in double, so each reference element is a plain dot
  // product over two contiguous rows.
  std::vector<double> a_rows(s.M * s.K), b_cols(s.N * s.K);
  for (int64_t k = 0; k < s.K; k++) {
    for (int64_t i = 0; i < s.M; i++) a_rows[i * s.K + k] = a_at(variant, A, s, i, k);
    for (int64_t j = 0; j < s.N; j++) b_cols[j * s.K + k] = b_at(variant, B, s, k, j);
  }
  const double u = std::ldexp(1.0, -24);
  int64_t bad = 0;
  for (int64_t i = 0; i < s.M; i++) {
    for (int64_t j = 0; j < s.N; j++) {
      const double* a = a_rows.data() + i * s.K;
      const double* b = b_cols.data() + j * s.K;
      double ref = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < s.K; k++) {
        ref += a[k] * b[k];
        magnitude += std::fabs(a[k] * b[k]);
      }
      const double c0 = C0[i * s.N + j];
      const double tol = 2.0 * double(s.K + 1) * u * magnitude + 1e-30;
      const double tol_acc = 2.0 * double(s.K + 2) * u * (magnitude + std::fabs(c0)) + 1e-30;
      if (!(std::fabs(C[i * s.N + j] - ref) <= tol)) bad++;
      if (!(std::fabs(C_acc[i * s.N + j] - (c0 + ref)) <= tol_acc)) bad++;
    }
  }
  CHECK(bad == 0);
}

void check_all_variants(Shape s, Rng& rng) {
  for (char variant : {'n', 't', 'T'}) check_variant(variant, s, rng);
}

}  // namespace

TEST_CASE("matmul: nn, nt, tn match float64 loops on random sizes 1..100") {
  Rng rng(1234);
  for (int trial = 0; trial < 40; trial++) {
    Shape s{1 + rng.below(100), 1 + rng.below(100), 1 + rng.below(100)};
    check_all_variants(s, rng);
  }
}

TEST_CASE("matmul: sizes at the edges of the 8x32 micro-tile, the 256 K block, the A packing") {
  Rng rng(99);
  const int64_t edges[] = {1, 7, 8, 9, 31, 33, 63, 64, 65, 127, 129};
  for (int64_t m : edges)
    for (int64_t n : edges) check_all_variants(Shape{m, 5, n}, rng);
  for (int64_t k : {1, 2, 63, 64, 65, 127, 129, 255, 256, 257, 513}) check_all_variants(Shape{17, k, 33}, rng);
  // Tiles are split over the threads: more rows than one tile, more columns than one tile.
  check_all_variants(Shape{200, 9, 300}, rng);
  // tn packs A's row panels when M > 256 (else reads A in place): both sides, ragged M, 2 K blocks.
  check_all_variants(Shape{256, 300, 45}, rng);
  check_all_variants(Shape{261, 300, 45}, rng);
}

TEST_CASE("matmul: the encoder's shapes, forward and backward") {
  Rng rng(7);
  // d_model 64, ffn 256, ~1040 packed tokens: qkv, out proj, ffn1, ffn2 (nt forward, nn dX),
  // and their weight gradients (tn, M = out features, K = tokens).
  const Shape forward[] = {{1040, 64, 192}, {1040, 64, 64}, {1040, 64, 256}, {1040, 256, 64}};
  for (Shape s : forward) {
    check_variant('t', s, rng);
    check_variant('n', Shape{s.M, s.N, s.K}, rng);  // dX (M,K) = dY (M,N) @ W (N,K)
    check_variant('T', Shape{s.N, s.M, s.K}, rng);  // dW (N,K) = dY^T (N,M) @ X (M,K)
  }
}

TEST_CASE("matmul: K = 0 gives zeros, or leaves C unchanged when accumulating") {
  Rng rng(3);
  const Shape s{5, 0, 7};
  const std::vector<float> A, B;
  for (char variant : {'n', 't', 'T'}) {
    CAPTURE(describe(variant, s));
    std::vector<float> C(35, NAN);
    run(variant, C.data(), A, B, s, /*accumulate=*/false);
    for (float c : C) CHECK(c == 0.0f);
    const auto C0 = random_vector(35, rng);
    std::vector<float> C_acc = C0;
    run(variant, C_acc.data(), A, B, s, /*accumulate=*/true);
    CHECK(std::memcmp(C_acc.data(), C0.data(), C0.size() * sizeof(float)) == 0);
  }
  // M = 0 or N = 0: nothing to write, nothing read.
  matmul_nn(nullptr, nullptr, nullptr, 0, 3, 4, false);
  matmul_nt(nullptr, nullptr, nullptr, 4, 3, 0, true);
  matmul_tn(nullptr, nullptr, nullptr, 0, 0, 0, false);
}

TEST_CASE("matmul: bit-identical across runs, thread counts 1, 2, 3, and the serial path") {
  ThreadCountGuard guard;
  Rng rng(11);
  // {64, 1040, 256}, {300, 1040, 100} and {70, 800, 33} as tn at 2 threads take the split over K
  // (a small C, K cut into two even runs of blocks; M > 256 packs A; 70 and 33 leave ragged tiles).
  const Shape shapes[] = {{1040, 64, 192}, {64, 1040, 256},  {130, 513, 70},
                          {300, 257, 100}, {300, 1040, 100}, {70, 800, 33}};
  for (Shape s : shapes) {
    const auto A = random_vector(s.M * s.K, rng);
    const auto B = random_vector(s.K * s.N, rng);
    for (char variant : {'n', 't', 'T'}) {
      CAPTURE(describe(variant, s));
      const size_t bytes = static_cast<size_t>(s.M * s.N) * sizeof(float);
      std::vector<float> first(s.M * s.N), again(s.M * s.N), two(s.M * s.N), three(s.M * s.N), serial(s.M * s.N);
      set_num_threads(1);
      run(variant, first.data(), A, B, s, false);
      run(variant, again.data(), A, B, s, false);
      set_num_threads(2);
      run(variant, two.data(), A, B, s, false);
      run(variant, serial.data(), A, B, s, false, /*parallel=*/false);
      set_num_threads(3);  // another split of the tiles (more threads than cores is fine)
      run(variant, three.data(), A, B, s, false);
      CHECK(std::memcmp(first.data(), again.data(), bytes) == 0);
      CHECK(std::memcmp(first.data(), two.data(), bytes) == 0);
      CHECK(std::memcmp(first.data(), three.data(), bytes) == 0);
      CHECK(std::memcmp(first.data(), serial.data(), bytes) == 0);
      // Accumulating into a nonzero C: the blocks are added to it in the same order.
      std::vector<float> acc1 = random_vector(s.M * s.N, rng), acc2 = acc1;
      set_num_threads(1);
      run(variant, acc1.data(), A, B, s, true);
      set_num_threads(2);
      run(variant, acc2.data(), A, B, s, true);
      CHECK(std::memcmp(acc1.data(), acc2.data(), bytes) == 0);
    }
  }
}

TEST_CASE("matmul: the serial path runs from inside the caller's OpenMP loop") {
  ThreadCountGuard guard;
  set_num_threads(2);
  // Like attention: one small q k^T per (sequence, head), each on the thread that owns it.
  Rng rng(5);
  const int64_t heads = 6, T = 37, D = 16;
  const auto q = random_vector(heads * T * D, rng);
  const auto k = random_vector(heads * T * D, rng);
  std::vector<float> inside(heads * T * T), outside(heads * T * T);
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < heads; h++)
    matmul_nt(inside.data() + h * T * T, q.data() + h * T * D, k.data() + h * T * D, T, D, T, false,
              /*parallel=*/false);
  for (int64_t h = 0; h < heads; h++)
    matmul_nt(outside.data() + h * T * T, q.data() + h * T * D, k.data() + h * T * D, T, D, T, false);
  CHECK(std::memcmp(inside.data(), outside.data(), inside.size() * sizeof(float)) == 0);
}

TEST_CASE("matmul: a parallel call from inside the caller's OpenMP region gives the same bits") {
  // Nested regions run with one thread: every path must still cover all of C (the tn shapes take
  // the split over K at 2 threads when called from outside).
  ThreadCountGuard guard;
  set_num_threads(2);
  Rng rng(9);
  const Shape shapes[] = {{64, 1040, 64}, {1040, 64, 192}};
  for (Shape s : shapes) {
    const auto A = random_vector(s.M * s.K, rng);
    const auto B = random_vector(s.K * s.N, rng);
    for (char variant : {'n', 'T'}) {
      CAPTURE(describe(variant, s));
      std::vector<float> outside(s.M * s.N), inside(2 * s.M * s.N);
      run(variant, outside.data(), A, B, s, false);
#pragma omp parallel for schedule(static) num_threads(2)
      for (int64_t copy = 0; copy < 2; copy++) run(variant, inside.data() + copy * s.M * s.N, A, B, s, false);
      const size_t bytes = static_cast<size_t>(s.M * s.N) * sizeof(float);
      CHECK(std::memcmp(outside.data(), inside.data(), bytes) == 0);
      CHECK(std::memcmp(outside.data(), inside.data() + s.M * s.N, bytes) == 0);
    }
  }
}

namespace {

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias, in double.
std::vector<double> linear_reference(const std::vector<float>& inp, const std::vector<float>& weight, const float* bias,
                                     int64_t N, int64_t C, int64_t OC) {
  std::vector<double> out(N * OC);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      double sum = bias ? double(bias[o]) : 0.0;
      for (int64_t c = 0; c < C; c++) sum += double(inp[n * C + c]) * double(weight[o * C + c]);
      out[n * OC + o] = sum;
    }
  return out;
}

}  // namespace

TEST_CASE("linear: forward with and without bias matches float64 loops") {
  Rng rng(21);
  for (auto [N, C, OC] : {Shape{1, 1, 1}, Shape{37, 64, 192}, Shape{300, 65, 33}}) {
    CAPTURE(N);
    const auto inp = random_vector(N * C, rng);
    const auto weight = random_vector(OC * C, rng);
    const auto bias = random_vector(OC, rng);
    for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> out(N * OC, NAN);
      linear_forward(out.data(), inp.data(), weight.data(), b, N, C, OC);
      const auto ref = linear_reference(inp, weight, b, N, C, OC);
      double max_error = 0.0;
      for (int64_t i = 0; i < N * OC; i++) max_error = std::fmax(max_error, std::fabs(out[i] - ref[i]));
      CHECK(max_error < 1e-4);
    }
  }
}

TEST_CASE("linear: backward accumulates dinp, dweight, dbias like float64 loops") {
  Rng rng(22);
  const int64_t N = 75, C = 40, OC = 50;
  const auto inp = random_vector(N * C, rng);
  const auto weight = random_vector(OC * C, rng);
  const auto dout = random_vector(N * OC, rng);
  const auto dinp0 = random_vector(N * C, rng);
  const auto dweight0 = random_vector(OC * C, rng);
  const auto dbias0 = random_vector(OC, rng);
  auto dinp = dinp0, dweight = dweight0, dbias = dbias0;
  linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), N, C, OC);
  double err_dinp = 0, err_dweight = 0, err_dbias = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      double ref = dinp0[n * C + c];
      for (int64_t o = 0; o < OC; o++) ref += double(dout[n * OC + o]) * double(weight[o * C + c]);
      err_dinp = std::fmax(err_dinp, std::fabs(dinp[n * C + c] - ref));
    }
  for (int64_t o = 0; o < OC; o++) {
    for (int64_t c = 0; c < C; c++) {
      double ref = dweight0[o * C + c];
      for (int64_t n = 0; n < N; n++) ref += double(dout[n * OC + o]) * double(inp[n * C + c]);
      err_dweight = std::fmax(err_dweight, std::fabs(dweight[o * C + c] - ref));
    }
    double ref = dbias0[o];
    for (int64_t n = 0; n < N; n++) ref += double(dout[n * OC + o]);
    err_dbias = std::fmax(err_dbias, std::fabs(dbias[o] - ref));
  }
  CHECK(err_dinp < 1e-4);
  CHECK(err_dweight < 1e-4);
  CHECK(err_dbias < 1e-4);

  // Any output may be skipped: the others are unchanged by that.
  auto dweight_only = dweight0;
  linear_backward(nullptr, dweight_only.data(), nullptr, dout.data(), inp.data(), weight.data(), N, C, OC);
  CHECK(std::memcmp(dweight_only.data(), dweight.data(), dweight.size() * sizeof(float)) == 0);
  auto dbias_only = dbias0;
  linear_backward(nullptr, nullptr, dbias_only.data(), dout.data(), nullptr, nullptr, N, C, OC);
  CHECK(std::memcmp(dbias_only.data(), dbias.data(), dbias.size() * sizeof(float)) == 0);
}

TEST_CASE("linear: backward agrees with central finite differences of the forward") {
  // loss = sum(out * G): dloss/dout = G. The loss is linear in each parameter, so the difference
  // quotient is exact up to the rounding of the forward.
  Rng rng(23);
  const int64_t N = 3, C = 5, OC = 4;
  auto inp = random_vector(N * C, rng);
  auto weight = random_vector(OC * C, rng);
  auto bias = random_vector(OC, rng);
  const auto G = random_vector(N * OC, rng);
  auto loss = [&]() {
    std::vector<float> out(N * OC);
    linear_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    double sum = 0.0;
    for (int64_t i = 0; i < N * OC; i++) sum += double(out[i]) * double(G[i]);
    return sum;
  };
  std::vector<float> dinp(N * C, 0.0f), dweight(OC * C, 0.0f), dbias(OC, 0.0f);
  linear_backward(dinp.data(), dweight.data(), dbias.data(), G.data(), inp.data(), weight.data(), N, C, OC);
  const float h = 1e-2f;
  auto check_param = [&](std::vector<float>& param, const std::vector<float>& grad, const char* name) {
    for (size_t i = 0; i < param.size(); i++) {
      CAPTURE(name);
      CAPTURE(i);
      const float saved = param[i];
      param[i] = saved + h;
      const double plus = loss();
      param[i] = saved - h;
      const double minus = loss();
      param[i] = saved;
      const double numeric = (plus - minus) / (2.0 * double(h));
      CHECK(std::fabs(numeric - grad[i]) < 2e-3 * (1.0 + std::fabs(numeric)));
    }
  };
  check_param(inp, dinp, "inp");
  check_param(weight, dweight, "weight");
  check_param(bias, dbias, "bias");
}

TEST_CASE("linear: forward and backward are bit-identical for thread counts 1 and 2") {
  ThreadCountGuard guard;
  Rng rng(24);
  // Large enough that every loop (bias init, GEMMs, dbias columns) runs threaded.
  const int64_t N = 1040, C = 64, OC = 192;
  const auto inp = random_vector(N * C, rng);
  const auto weight = random_vector(OC * C, rng);
  const auto bias = random_vector(OC, rng);
  const auto dout = random_vector(N * OC, rng);
  struct Result {
    std::vector<float> out, dinp, dweight, dbias;
  };
  auto compute = [&](int threads) {
    set_num_threads(threads);
    Result r{std::vector<float>(N * OC), std::vector<float>(N * C, 0.5f), std::vector<float>(OC * C, 0.5f),
             std::vector<float>(OC, 0.5f)};
    linear_forward(r.out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    linear_backward(r.dinp.data(), r.dweight.data(), r.dbias.data(), dout.data(), inp.data(), weight.data(), N, C, OC);
    return r;
  };
  const Result one = compute(1), two = compute(2), again = compute(2);
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  CHECK(same(one.out, two.out));
  CHECK(same(one.dinp, two.dinp));
  CHECK(same(one.dweight, two.dweight));
  CHECK(same(one.dbias, two.dbias));
  CHECK(same(two.out, again.out));
  CHECK(same(two.dweight, again.dweight));
}

TEST_CASE("linear_relu: the fused kernels give the bits of linear, relu and their backwards") {
  ThreadCountGuard guard;
  // One K block and several (C = 300: the ReLU goes with the last block's store), micro-tile edges,
  // with and without bias, 1 and 2 threads; the threaded shape runs the dbias loop on full blocks.
  for (Shape s : {Shape{1, 1, 1}, Shape{45, 40, 72}, Shape{13, 300, 17}, Shape{1040, 64, 256}}) {
    for (bool with_bias : {true, false}) {
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        const int64_t N = s.M, C = s.K, OC = s.N;
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(OC);
        CAPTURE(with_bias);
        CAPTURE(threads);
        Rng rng(uint64_t(N * 7 + C + OC));
        auto inp = random_vector(N * C, rng);
        const auto weight = random_vector(OC * C, rng);
        const auto bias = random_vector(OC, rng);
        auto dout = random_vector(N * OC, rng);
        // A NaN input (its row's units are off either way) and -0 gradients at active units
        // (a zeroed buffer plus -0 is +0: the fused backward must keep that).
        inp[0] = std::nanf("");
        for (size_t i = 0; i < dout.size(); i += 3) dout[i] = -0.0f;
        const float* b = with_bias ? bias.data() : nullptr;

        std::vector<float> pre(N * OC), want(N * OC), got(N * OC);
        linear_forward(pre.data(), inp.data(), weight.data(), b, N, C, OC);
        relu_forward(want.data(), pre.data(), N * OC);
        linear_relu_forward(got.data(), inp.data(), weight.data(), b, N, C, OC);
        CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);

        std::vector<float> dpre(N * OC, 0.0f);
        relu_backward(dpre.data(), dout.data(), pre.data(), N * OC);
        std::vector<float> dinp_want(N * C, 0.25f), dw_want(OC * C, 0.25f), db_want(OC, 0.25f);
        auto dinp_got = dinp_want, dw_got = dw_want, db_got = db_want;
        linear_backward(dinp_want.data(), dw_want.data(), db_want.data(), dpre.data(), inp.data(), weight.data(), N, C,
                        OC);
        linear_relu_backward(dinp_got.data(), dw_got.data(), db_got.data(), dout.data(), got.data(), inp.data(),
                             weight.data(), N, C, OC);
        CHECK(std::memcmp(dinp_want.data(), dinp_got.data(), dinp_want.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(dw_want.data(), dw_got.data(), dw_want.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(db_want.data(), db_got.data(), db_want.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("linear, linear_relu backward: dbias on one thread (one pass, fused with the ReLU mask) gives the bits of two") {
  ThreadCountGuard guard;
  // N * OC >= 2^15, so two threads run the dbias pipeline; OC = 72 ends in a partial block of 32;
  // N = 520 makes two K blocks for dW. Adding to a gradient and overwriting one (NaN before).
  const int64_t N = 520, C = 40, OC = 72;
  Rng rng(77);
  auto inp = random_vector(N * C, rng);
  const auto weight = random_vector(OC * C, rng);
  const auto bias = random_vector(OC, rng);
  auto dout = random_vector(N * OC, rng);
  for (size_t i = 0; i < dout.size(); i += 5) dout[i] = -0.0f;
  std::vector<float> out(N * OC);
  linear_relu_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  for (bool fused : {false, true}) {
    for (bool accumulate : {true, false}) {
      CAPTURE(fused);
      CAPTURE(accumulate);
      auto compute = [&](int threads) {
        set_num_threads(threads);
        const float start = accumulate ? 0.5f : std::nanf("");
        std::vector<float> dinp(N * C, start), dw(OC * C, start), db(OC, start);
        const GradOut gx(dinp.data(), accumulate), gw(dw.data(), accumulate), gb(db.data(), accumulate);
        if (fused) {
          linear_relu_backward(gx, gw, gb, dout.data(), out.data(), inp.data(), weight.data(), N, C, OC);
        } else {
          linear_backward(gx, gw, gb, dout.data(), inp.data(), weight.data(), N, C, OC);
        }
        dinp.insert(dinp.end(), dw.begin(), dw.end());
        dinp.insert(dinp.end(), db.begin(), db.end());
        return dinp;
      };
      const auto one = compute(1), two = compute(2);
      REQUIRE(one.size() == two.size());
      CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
      // dbias is the column sums in row order: check one column against a plain loop.
      float want = accumulate ? 0.5f : 0.0f, sum = 0.0f;
      for (int64_t n = 0; n < N; n++) sum += fused ? (out[n * OC + 71] > 0.0f ? dout[n * OC + 71] : 0.0f) : dout[n * OC + 71];
      want = accumulate ? want + sum : sum;
      CHECK(one.back() == want);
    }
  }
}
