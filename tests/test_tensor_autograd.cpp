// Tensor basics, the portable generator, and the autograd engine's contract.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/ops.hpp"
#include "normlab/rng.hpp"
#include "normlab/tensor.hpp"

using namespace normlab;

TEST_CASE("rng: PCG32 matches the reference generator's published output") {
  // pcg32-demo: pcg32_srandom_r(&rng, 42u, 54u) prints these six numbers first.
  Rng rng(42u, 54u);
  const uint32_t expected[] = {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu};
  for (uint32_t e : expected) CHECK(rng.next_u32() == e);
}

TEST_CASE("rng: normal() has mean 0 and variance 1, uniform() stays in range") {
  Rng rng(7);
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    double v = rng.normal();
    s += v;
    s2 += v * v;
  }
  CHECK(std::abs(s / n) < 0.01);
  CHECK(std::abs(s2 / n - 1.0) < 0.02);
  for (int i = 0; i < 10000; ++i) {
    float u = rng.uniform(-2.0f, 3.0f);
    CHECK((u >= -2.0f && u < 3.0f));
  }
  Rng a(99), b(99), c(100);
  CHECK(a.next_u64() == b.next_u64());
  CHECK(a.next_u64() != c.next_u64());
}

TEST_CASE("tensor: factories, shape queries and reshape views") {
  Tensor z = Tensor::zeros({4, 100, 512});
  CHECK(z.numel() == 4 * 100 * 512);
  CHECK(z.dim() == 3);
  CHECK(z.size(-1) == 512);
  CHECK(shape_str(z.shape()) == "[4, 100, 512]");
  Tensor o = Tensor::ones({3});
  CHECK(o.to_vector() == std::vector<float>{1, 1, 1});
  CHECK(Tensor::scalar(2.5f).item() == 2.5f);
  CHECK_THROWS_AS(Tensor::from_data({2, 2}, {1, 2, 3}), UsageError);
  CHECK_THROWS_AS(Tensor::zeros({-1, 3}), UsageError);
  CHECK_THROWS_AS(Tensor::zeros({int64_t(1) << 40, int64_t(1) << 40}), UsageError);

  Tensor a = Tensor::from_data({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor v = ops::reshape(a, {3, -1});
  CHECK(v.shape() == Shape{3, 2});
  v.data()[0] = 42;  // a view shares storage
  CHECK(a.data()[0] == 42);
  CHECK_THROWS_AS(ops::reshape(a, {4, -1}), UsageError);
  Tensor c = a.clone();
  c.data()[1] = -1;
  CHECK(a.data()[1] == 2);
}

TEST_CASE("tensor: shape_numel takes up to 2^34 elements and refuses more, an overflowing product or a negative dim") {
  const int64_t limit = int64_t(1) << 34;
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({limit}) == limit);
  CHECK(shape_numel({int64_t(1) << 17, int64_t(1) << 17}) == limit);
  CHECK(shape_numel({2, 3, 0, 5}) == 0);
  CHECK(shape_numel({0, INT64_MAX}) == 0);  // a zero dim first: nothing to overflow
  CHECK_THROWS_WITH_AS(shape_numel({limit + 1}), "shape [17179869185] is too large", UsageError);
  CHECK_THROWS_AS(shape_numel({int64_t(1) << 17, (int64_t(1) << 17) + 1}), UsageError);
  CHECK_THROWS_AS(shape_numel({int64_t(1) << 33, int64_t(1) << 33}), UsageError);  // 2^66 overflows int64
  CHECK_THROWS_AS(shape_numel({INT64_MAX, 0}), UsageError);  // the dims are checked in order: too large before the zero
  CHECK_THROWS_WITH_AS(shape_numel({2, -1}), "negative dimension in shape [2, -1]", UsageError);
}

TEST_CASE("tensor: a freed storage block serves the next tensor of its size class, and what is kept is bounded") {
  const float* first = nullptr;
  {
    Tensor a = Tensor::empty({1000});  // 4000 bytes: the class of 4096
    first = a.data();
  }
  {
    Tensor b = Tensor::empty({990});  // 3960 bytes: the same class, last freed first
    CHECK(b.data() == first);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
    Tensor c = Tensor::empty({990});  // b holds that block: another one
    CHECK(c.data() != first);
  }
  // 40 blocks of 3 MiB (120 MiB) freed at once: no more than the bound is kept for reuse.
  {
    std::vector<Tensor> many;
    for (int i = 0; i < 40; ++i) many.push_back(Tensor::empty({(int64_t(3) << 20) / 4}));
  }
  CHECK(detail::storage_cached_bytes() <= detail::kStorageCacheBytes);
  CHECK(detail::storage_cached_bytes() >= detail::kStorageCacheBytes - (int64_t(4) << 20));
  // Above the largest class, blocks go straight back: the kept bytes do not change.
  const size_t kept = detail::storage_cached_bytes();
  { Tensor big = Tensor::empty({int64_t(8) << 20}); }
  CHECK(detail::storage_cached_bytes() == kept);
  // A zero-filled tensor in a reused block is still all zeros.
  { Tensor dirty = Tensor::full({777}, 3.0f); }
  CHECK(Tensor::zeros({777}).to_vector() == std::vector<float>(777, 0.0f));
}

TEST_CASE("tensor: seeded normal tensors are reproducible") {
  Rng r1(5), r2(5);
  CHECK(Tensor::normal({10}, r1).to_vector() == Tensor::normal({10}, r2).to_vector());
}

TEST_CASE("autograd: a tensor used twice receives the sum of both gradients") {
  Tensor x = Tensor::from_data({3}, {1, -2, 0.5f});
  x.set_requires_grad();
  Tensor y = ops::sum(ops::add(ops::mul(x, x), x));  // dy/dx = 2x + 1
  y.backward();
  std::vector<float> g = x.grad().to_vector();
  CHECK(g[0] == doctest::Approx(3.0));
  CHECK(g[1] == doctest::Approx(-3.0));
  CHECK(g[2] == doctest::Approx(2.0));
}

TEST_CASE("autograd: a sum passes its gradient through to one input, and later gradients still add to it") {
  // y = x + 2x: the add's gradient goes to x itself (its buffer), then mul_scalar's adds 2g to it.
  Tensor x = Tensor::from_data({3}, {1, -2, 0.5f});
  x.set_requires_grad();
  ops::add(x, ops::mul_scalar(x, 2.0f)).backward(Tensor::from_data({3}, {1, 10, -0.25f}));
  CHECK(x.grad().to_vector() == std::vector<float>{3, 30, -0.75f});
  // The first input needs no gradient: the second takes the buffer.
  Tensor c = Tensor::from_data({3}, {5, 6, 7});
  Tensor w = Tensor::from_data({3}, {1, 2, 3});
  w.set_requires_grad();
  ops::add(c, w).backward(Tensor::from_data({3}, {-1, 0.5f, 4}));
  CHECK(w.grad().to_vector() == std::vector<float>{-1, 0.5f, 4});
  CHECK_FALSE(c.has_grad());
  // A leaf that already has a gradient adds to it; x + x gets both.
  ops::add(c, w).backward(Tensor::from_data({3}, {1, 1, 1}));
  CHECK(w.grad().to_vector() == std::vector<float>{0, 1.5f, 5});
  Tensor v = Tensor::from_data({2}, {1, 2});
  v.set_requires_grad();
  ops::add(v, v).backward(Tensor::from_data({2}, {3, -4}));
  CHECK(v.grad().to_vector() == std::vector<float>{6, -8});
  // Both inputs want a gradient: one takes the buffer, the other a copy; the seed is untouched.
  Tensor a = Tensor::from_data({2}, {0, 0}), b = Tensor::from_data({2}, {0, 0});
  a.set_requires_grad();
  b.set_requires_grad();
  Tensor seed = Tensor::from_data({2}, {7, -8});
  ops::add(a, b).backward(seed);
  CHECK(a.grad().to_vector() == std::vector<float>{7, -8});
  CHECK(b.grad().to_vector() == std::vector<float>{7, -8});
  CHECK(a.grad_data() != b.grad_data());
  CHECK(seed.to_vector() == std::vector<float>{7, -8});
}

TEST_CASE("autograd: leaf gradients accumulate across backward calls until zero_grad") {
  Tensor w = Tensor::from_data({2}, {1, 2});
  w.set_requires_grad();
  for (int i = 0; i < 2; ++i) ops::sum(ops::mul_scalar(w, 3.0f)).backward();
  CHECK(w.grad().to_vector() == std::vector<float>{6, 6});
  w.zero_grad();
  CHECK_FALSE(w.has_grad());
}

TEST_CASE("autograd: a deep graph does not overflow the stack") {
  Tensor x = Tensor::from_data({1}, {1.0f});
  x.set_requires_grad();
  Tensor y = x;
  const int depth = 200000;
  for (int i = 0; i < depth; ++i) y = ops::add_scalar(y, 1e-6f);
  CHECK(graph_size(y) == depth);
  ops::sum(y).backward();
  CHECK(x.grad().to_vector()[0] == doctest::Approx(1.0));
}

TEST_CASE("autograd: the graph is released after backward - a second backward is an error") {
  Tensor x = Tensor::from_data({2}, {1, 2});
  x.set_requires_grad();
  Tensor loss = ops::sum(ops::mul(x, x));
  loss.backward();
  REQUIRE(loss.grad_fn() != nullptr);
  CHECK(loss.grad_fn()->released);
  CHECK(loss.grad_fn()->inputs.empty());  // activations and parents freed
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("released graph"), UsageError);
}

TEST_CASE("autograd: no graph is recorded under NoGradGuard") {
  Tensor x = Tensor::from_data({2}, {1, 2});
  x.set_requires_grad();
  {
    NoGradGuard guard;
    Tensor y = ops::mul(x, x);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK_THROWS_AS(ops::sum(y).backward(), UsageError);
  }
  CHECK(grad_enabled());
  CHECK(ops::mul(x, x).requires_grad());
}

TEST_CASE("autograd: backward needs a scalar or an explicit gradient of the same shape") {
  Tensor x = Tensor::from_data({2}, {1, 2});
  x.set_requires_grad();
  Tensor y = ops::mul_scalar(x, 2.0f);
  CHECK_THROWS_AS(y.backward(), UsageError);
  CHECK_THROWS_AS(y.backward(Tensor::ones({3})), UsageError);
  y.backward(Tensor::from_data({2}, {1, 10}));
  CHECK(x.grad().to_vector() == std::vector<float>{2, 20});
}

TEST_CASE("autograd: broadcasting matches NumPy rules and reduces gradients back") {
  CHECK(ops::broadcast_shapes({4, 1, 3}, {5, 1}) == Shape{4, 5, 3});
  CHECK(ops::broadcast_shapes({}, {2, 2}) == Shape{2, 2});
  CHECK_THROWS_AS(ops::broadcast_shapes({2, 3}, {4}), UsageError);
  Tensor a = Tensor::from_data({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_data({3}, {10, 20, 30});
  b.set_requires_grad();
  Tensor c = ops::add(a, b);
  CHECK(c.to_vector() == std::vector<float>{11, 22, 33, 14, 25, 36});
  ops::sum(c).backward();
  CHECK(b.grad().to_vector() == std::vector<float>{2, 2, 2});
}

// LeafGradientCheck: a finite loss whose backward overflows one leaf's gradient (d(a/b)/db =
// -a/b^2, and b^2 underflows to 0) is caught; every leaf that got a gradient is checked once; a
// check not alive, or a graph whose gradients are finite, reports nothing.
TEST_CASE("autograd: LeafGradientCheck finds a non-finite leaf gradient under a finite loss") {
  Tensor a = Tensor::from_data({2}, {1e-10f, 2.0f});
  Tensor b = Tensor::from_data({2}, {1e-30f, 4.0f});
  Tensor unused = Tensor::from_data({1}, {1.0f});
  for (Tensor* t : {&a, &b, &unused}) t->set_requires_grad(true);
  {
    LeafGradientCheck check;
    Tensor loss = ops::sum(ops::div(a, b));  // 1e20 + 0.5: finite
    REQUIRE(std::isfinite(loss.item()));
    loss.backward();
    CHECK(!check.all_finite());
    CHECK(check.leaves_checked() == 2);
    CHECK(std::isinf(b.grad_data()[0]));
  }
  a.zero_grad();
  b.zero_grad();
  {
    LeafGradientCheck outer;
    {
      LeafGradientCheck inner;  // the innermost alive one is told
      ops::sum(ops::mul(a, b)).backward();
      CHECK(inner.all_finite());
      CHECK(inner.leaves_checked() == 2);
    }
    CHECK(outer.leaves_checked() == 0);
    a.zero_grad();
    b.zero_grad();
    ops::sum(ops::div(a, b)).backward();
    CHECK(!outer.all_finite());
  }
  a.zero_grad();
  b.zero_grad();
  ops::sum(ops::div(a, b)).backward();  // no check alive: nothing to tell, nothing breaks
  CHECK(std::isinf(b.grad_data()[0]));
}
