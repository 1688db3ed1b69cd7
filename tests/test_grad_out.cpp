// The first gradient to reach a tensor is written into an unfilled buffer, later ones are added
// (kernels/grad_out.hpp). Overwriting must give the bits of adding into zeros, write every
// element, and never lose a gradient of a tensor used twice by one op.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "isa_support.hpp"
#include "leaf.hpp"
#include "normlab/kernels/attention.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/kernels/reference/attention.hpp"
#include "normlab/kernels/reference/matmul.hpp"
#include "normlab/ops.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"
#include "normlab/tensor.hpp"

using namespace normlab;
using kernels::GradOut;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

std::vector<float> filled(int64_t n, float value) { return std::vector<float>(static_cast<size_t>(n), value); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One backward kernel call, given where its gradients go (three at most: unused ones stay empty).
using Backward = std::function<void(GradOut, GradOut, GradOut)>;

// For each subset of the gradients: those in the subset overwrite buffers full of NaN, the others
// add into buffers that already hold a gradient. Every result must equal, bit for bit, the kernel
// adding into zeros (for the overwritten ones) or into that same gradient (for the others).
void check_overwrite_matches_add(const std::string& what, const std::vector<int64_t>& sizes, const Backward& run) {
  const size_t n = sizes.size();
  auto call = [&](std::vector<std::vector<float>>& bufs, unsigned overwrite) {
    GradOut outs[3];
    for (size_t i = 0; i < n; i++) outs[i] = GradOut(bufs[i].data(), !(overwrite & (1u << i)));
    run(outs[0], outs[1], outs[2]);
  };
  for (unsigned overwrite = 1; overwrite < (1u << n); overwrite++) {
    std::vector<std::vector<float>> expected, got;
    for (size_t i = 0; i < n; i++) {
      const bool ow = overwrite & (1u << i);
      expected.push_back(ow ? filled(sizes[i], 0.0f) : randn(sizes[i], 100 + i));
      got.push_back(ow ? filled(sizes[i], kNaN) : randn(sizes[i], 100 + i));
    }
    call(expected, 0);  // all add: the old contract
    call(got, overwrite);
    for (size_t i = 0; i < n; i++) {
      INFO(what << ", overwrite mask " << overwrite << ", gradient " << i);
      CHECK(same_bits(got[i], expected[i]));
    }
  }
}

// Runs check on every path this CPU has, at 1 and 2 threads.
void on_every_path(const std::function<void(const std::string&)>& check) {
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (kernels::Isa isa : test::available_isas()) {
      test::ScopedIsa scoped(isa);
      check(std::string(kernels::isa_name(isa)) + ", " + std::to_string(threads) + " threads");
    }
  }
  set_num_threads(saved);
}

}  // namespace

TEST_CASE("grad out: Linear and Linear+ReLU backward overwrite with the bits of adding into zeros") {
  struct Shape {
    int64_t N, C, OC;
  };
  // Small; K blocks of 256 over C (300); many tokens with a small output, where dweight's GEMM
  // splits over K (the tokens) at 2 threads; a dbias width that is not a whole block of 32.
  for (Shape s : {Shape{45, 40, 72}, Shape{45, 300, 72}, Shape{1040, 64, 64}, Shape{7, 5, 33}}) {
    const auto x = randn(s.N * s.C, 1), w = randn(s.OC * s.C, 2, 0.2f), bias = randn(s.OC, 3);
    const auto dy = randn(s.N * s.OC, 4);
    std::vector<float> y(size_t(s.N * s.OC));
    kernels::linear_relu_forward(y.data(), x.data(), w.data(), bias.data(), s.N, s.C, s.OC);
    const std::string shape = "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " OC=" + std::to_string(s.OC);
    const std::vector<int64_t> sizes{s.N * s.C, s.OC * s.C, s.OC};
    on_every_path([&](const std::string& path) {
      check_overwrite_matches_add("linear_backward " + shape + " " + path, sizes, [&](GradOut a, GradOut b, GradOut c) {
        kernels::linear_backward(a, b, c, dy.data(), x.data(), w.data(), s.N, s.C, s.OC);
      });
      check_overwrite_matches_add("linear_relu_backward " + shape + " " + path, sizes,
                                  [&](GradOut a, GradOut b, GradOut c) {
                                    kernels::linear_relu_backward(a, b, c, dy.data(), y.data(), x.data(), w.data(), s.N,
                                                                  s.C, s.OC);
                                  });
    });
    check_overwrite_matches_add("reference linear_backward " + shape, sizes, [&](GradOut a, GradOut b, GradOut c) {
      kernels::reference::linear_backward(a, b, c, dy.data(), x.data(), w.data(), s.N, s.C, s.OC);
    });
  }
}

TEST_CASE("grad out: attention backward overwrites every row, with the bits of adding into zeros") {
  // Head dims 16 (whole vectors: products store straight into dqkv) and 12 (through scratch rows);
  // lengths up to 100 (a second query block: dk and dv summed in scratch first); the first
  // sequence starting at row 3, so rows 0..2 belong to no sequence and must be written as 0.
  for (const auto& [C, NH] : {std::pair<int64_t, int64_t>{48, 3}, {36, 3}}) {
    const std::vector<int64_t> offsets{3, 4, 12, 33, 33, 46, 146};
    const int64_t B = int64_t(offsets.size()) - 1, T = offsets.back();
    const auto qkv = randn(T * 3 * C, 5), dout = randn(T * C, 6);
    const std::string shape = "C=" + std::to_string(C) + " NH=" + std::to_string(NH);
    on_every_path([&](const std::string& path) {
      std::vector<float> out(size_t(T * C)), att(size_t(kernels::attention_cache_size(offsets.data(), B, NH)));
      kernels::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
      check_overwrite_matches_add("attention_backward " + shape + " " + path, {T * 3 * C},
                                  [&](GradOut d, GradOut, GradOut) {
                                    kernels::attention_backward(d, dout.data(), qkv.data(), att.data(), offsets.data(),
                                                                B, C, NH);
                                  });
    });
    std::vector<float> out(size_t(T * C)), att(size_t(kernels::reference::attention_cache_size(offsets.data(), B, NH)));
    kernels::reference::attention_forward(out.data(), att.data(), qkv.data(), offsets.data(), B, C, NH);
    check_overwrite_matches_add("reference attention_backward " + shape, {T * 3 * C}, [&](GradOut d, GradOut, GradOut) {
      kernels::reference::attention_backward(d, dout.data(), qkv.data(), att.data(), offsets.data(), B, C, NH);
    });
  }
}

namespace {

using test::leaf;

// Backward of sum(f(inputs) * r) twice: once as the first gradient to reach each input (written
// into an unfilled buffer; freed buffers full of NaN are left for the allocator to hand out), once
// with a zero gradient already there (added to). The gradients must have the same bits.
void check_first_gradient_written(const std::string& what, std::vector<Tensor> inputs,
                                  const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  std::vector<std::vector<float>> grads[2];
  for (int pass = 0; pass < 2; pass++) {
    for (Tensor& t : inputs) t.zero_grad();
    if (pass == 1)
      for (Tensor& t : inputs) t.grad_data();  // a zero-filled gradient
    Tensor y = f(inputs);
    Rng rng(77);
    const Tensor r = Tensor::normal(y.shape(), rng);
    Tensor loss = ops::sum(ops::mul(y, r));
    if (pass == 0)
      for (const Tensor& t : inputs) {
        std::vector<float> junk(static_cast<size_t>(t.numel()), kNaN);
        volatile float sink = junk.back();  // keep the fill
        (void)sink;
      }
    loss.backward();
    for (const Tensor& t : inputs) grads[pass].push_back(t.grad().to_vector());
  }
  for (size_t i = 0; i < inputs.size(); i++) {
    INFO(what << ": input " << i);
    for (float g : grads[0][i]) REQUIRE(std::isfinite(g));
    CHECK(same_bits(grads[0][i], grads[1][i]));
  }
}

}  // namespace

TEST_CASE("grad out: every op that writes its first gradient gives the bits of adding into zeros") {
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    CAPTURE(threads);
    const Shape big{300, 64};  // above the size where the elementwise ops use threads
    check_first_gradient_written("add", {leaf(big, 1), leaf(big, 2)}, [](auto& in) { return ops::add(in[0], in[1]); });
    check_first_gradient_written("sub", {leaf(big, 1), leaf(big, 2)}, [](auto& in) { return ops::sub(in[0], in[1]); });
    check_first_gradient_written("mul", {leaf(big, 1), leaf(big, 2)}, [](auto& in) { return ops::mul(in[0], in[1]); });
    check_first_gradient_written("div", {leaf(big, 1), ops::add_scalar(ops::square(leaf(big, 2)), 1.0f).detach()},
                                 [](auto& in) { return ops::div(in[0], in[1]); });
    check_first_gradient_written("tanh", {leaf(big, 3)}, [](auto& in) { return ops::tanh(in[0]); });
    check_first_gradient_written("mul_scalar", {leaf(big, 3)}, [](auto& in) { return ops::mul_scalar(in[0], -2.5f); });
    check_first_gradient_written("reshape", {leaf(big, 4)}, [](auto& in) { return ops::reshape(in[0], {64, 300}); });
    check_first_gradient_written("linear", {leaf({300, 40}, 5), leaf({72, 40}, 6, 0.2f), leaf({72}, 7)},
                                 [](auto& in) { return ops::linear(in[0], in[1], in[2]); });
    check_first_gradient_written("linear_relu", {leaf({300, 40}, 5), leaf({72, 40}, 6, 0.2f), leaf({72}, 7)},
                                 [](auto& in) { return ops::linear_relu(in[0], in[1], in[2]); });
    const std::vector<int64_t> offsets{0, 5, 70, 100};
    check_first_gradient_written("attention", {leaf({100, 3 * 32}, 8)},
                                 [&](auto& in) { return ops::attention(in[0], offsets, 2); });
  }
  set_num_threads(saved);
}

TEST_CASE("grad out: an input given twice to one op receives both gradients") {
  // x + x and x * x: d/dx = 2 g and 2 x g.
  const Tensor x = leaf({300, 64}, 9);
  Rng rng(10);
  const Tensor g = Tensor::normal({300, 64}, rng);
  {
    Tensor twice = x;
    twice.zero_grad();
    ops::add(twice, twice).backward(g);
    const auto dx = x.grad().to_vector(), gv = g.to_vector();
    for (size_t i = 0; i < dx.size(); i++) REQUIRE(dx[i] == 2.0f * gv[i]);
  }
  {
    Tensor twice = x;
    twice.zero_grad();
    ops::mul(twice, twice).backward(g);
    const auto dx = x.grad().to_vector(), gv = g.to_vector(), xv = x.to_vector();
    for (size_t i = 0; i < dx.size(); i++) REQUIRE(dx[i] == gv[i] * xv[i] + gv[i] * xv[i]);
  }
  // linear(w, w, b) with w (n, n): w is both the input and the weight. Its gradient is the sum of
  // the two a copy of w in either place receives, in the order the kernel adds them (dinp first).
  for (bool fused : {false, true}) {
    CAPTURE(fused);
    const int64_t n = 48;
    Tensor w = leaf({n, n}, 11, 0.3f), b = leaf({n}, 12);
    Tensor w_as_input = leaf({n, n}, 11, 0.3f);
    Rng rg(13);
    const Tensor gy = Tensor::normal({n, n}, rg);
    auto op = [&](const Tensor& in, const Tensor& weight) {
      return fused ? ops::linear_relu(in, weight, b) : ops::linear(in, weight, b);
    };
    op(w_as_input, w).backward(gy);
    const auto as_input = w_as_input.grad().to_vector(), as_weight = w.grad().to_vector();
    w.zero_grad();
    b.zero_grad();
    op(w, w).backward(gy);
    const auto both = w.grad().to_vector();
    for (size_t i = 0; i < both.size(); i++) REQUIRE(both[i] == 0.0f + as_input[i] + as_weight[i]);
  }
}

TEST_CASE("grad out: a tensor times a single number: its gradient written, the number's summed in order") {
  // ReZero's f(x) * alpha, above the size where the elementwise ops use threads: a's gradient is
  // g * alpha element by element, alpha's the sum of g * f(x) in element order (the bits of the
  // general broadcasting loop), at any thread count.
  const int saved = num_threads();
  const Tensor x = leaf({300, 64}, 14);
  Tensor alpha = leaf({1}, 15);
  Rng rng(16);
  const Tensor g = Tensor::normal({300, 64}, rng);
  const auto xv = x.to_vector(), gv = g.to_vector();
  const float s = alpha.item();
  float expected_dalpha = 0.0f;
  for (size_t i = 0; i < xv.size(); i++) expected_dalpha += gv[i] * xv[i];
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_num_threads(threads);
    Tensor xt = x;
    xt.zero_grad();
    alpha.zero_grad();
    ops::mul(xt, alpha).backward(g);
    const auto dx = x.grad().to_vector();
    for (size_t i = 0; i < dx.size(); i++) REQUIRE(dx[i] == gv[i] * s);
    CHECK(alpha.grad().item() == expected_dalpha);
  }
  set_num_threads(saved);
}
