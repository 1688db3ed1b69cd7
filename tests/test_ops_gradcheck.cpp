// Every differentiable op against central finite differences (gradcheck.hpp).
#include <doctest/doctest.h>

#include <cmath>

#include "normlab/error.hpp"
#include "normlab/gradcheck.hpp"
#include "normlab/ops.hpp"
#include "normlab/rng.hpp"

using namespace normlab;
using Inputs = std::vector<Tensor>;

namespace {
Tensor param(const Shape& shape, uint64_t seed, float scale = 1.0f, float shift = 0.0f) {
  Rng rng(seed);
  Tensor t = Tensor::normal(shape, rng, shift, scale);
  t.set_requires_grad();
  return t;
}

void check_grad(const std::function<Tensor(const Inputs&)>& f, Inputs inputs, GradcheckOptions options = {}) {
  GradcheckResult r = gradcheck(f, std::move(inputs), options);
  INFO(r.worst);
  CHECK(r.checked > 0);
  CHECK(r.ok);
}
}  // namespace

TEST_CASE("gradcheck: the checker catches a wrong gradient") {
  // log computed with a deliberately wrong backward via a composed identity: x*x uses the right
  // gradient, so we instead compare f against a perturbed analytic gradient by scaling inputs.
  Tensor x = param({5}, 1);
  auto right = [](const Inputs& in) { return ops::square(in[0]); };
  CHECK(gradcheck(right, {x}).ok);
  // A function whose forward ignores the "detached" path but whose graph sees it: y = x*c where c is
  // a detached copy of x. The true derivative is 2x, autograd gives x: gradcheck must say no.
  auto wrong = [](const Inputs& in) { return ops::mul(in[0], in[0].detach()); };
  CHECK_FALSE(gradcheck(wrong, {param({5}, 2, 1.0f, 2.0f)}).ok);
}

TEST_CASE("gradcheck: elementwise ops with broadcasting") {
  Tensor a = param({2, 3, 4}, 1), b = param({3, 1}, 2), c = param({4}, 3, 0.5f, 2.0f);
  check_grad([](const Inputs& in) { return ops::add(in[0], in[1]); }, {a, b});
  check_grad([](const Inputs& in) { return ops::sub(in[0], in[1]); }, {a, b});
  check_grad([](const Inputs& in) { return ops::mul(in[0], in[1]); }, {a, b});
  check_grad([](const Inputs& in) { return ops::div(in[0], in[1]); }, {a, c});
  check_grad([](const Inputs& in) { return ops::mul(in[0], in[1]); }, {a, param({}, 4)});
  // b a single number of shape [1] (ReZero's alpha): a path of its own, b's gradient one sum
  Tensor s = param({1}, 5, 0.5f, 2.0f);
  check_grad([](const Inputs& in) { return ops::add(in[0], in[1]); }, {a, s});
  check_grad([](const Inputs& in) { return ops::sub(in[0], in[1]); }, {a, s});
  check_grad([](const Inputs& in) { return ops::mul(in[0], in[1]); }, {a, s});
  check_grad([](const Inputs& in) { return ops::div(in[0], in[1]); }, {a, s});
}

TEST_CASE("gradcheck: unary ops") {
  Tensor a = param({3, 5}, 5);
  Tensor positive = param({3, 5}, 6, 0.3f, 2.0f);
  check_grad([](const Inputs& in) { return ops::add_scalar(in[0], 0.5f); }, {a});
  check_grad([](const Inputs& in) { return ops::mul_scalar(in[0], -1.5f); }, {a});
  check_grad([](const Inputs& in) { return ops::neg(in[0]); }, {a});
  check_grad([](const Inputs& in) { return ops::exp(in[0]); }, {a});
  check_grad([](const Inputs& in) { return ops::log(in[0]); }, {positive});
  check_grad([](const Inputs& in) { return ops::tanh(in[0]); }, {a});
  check_grad([](const Inputs& in) { return ops::square(in[0]); }, {a});
  check_grad([](const Inputs& in) { return ops::gelu(in[0]); }, {a});
  // relu: keep inputs away from the kink at 0 where the derivative jumps.
  Tensor away = Tensor::from_data({6}, {-2, -1, -0.5f, 0.5f, 1, 2});
  away.set_requires_grad();
  check_grad([](const Inputs& in) { return ops::relu(in[0]); }, {away});
}

TEST_CASE("gradcheck: reductions and reshape") {
  Tensor a = param({2, 3, 4}, 7);
  check_grad([](const Inputs& in) { return ops::sum(in[0]); }, {a});
  check_grad([](const Inputs& in) { return ops::mean(in[0]); }, {a});
  check_grad([](const Inputs& in) { return ops::sum_trailing(in[0], 1); }, {a});
  check_grad([](const Inputs& in) { return ops::mean_trailing(in[0], 2, true); }, {a});
  check_grad([](const Inputs& in) { return ops::square(ops::reshape(in[0], {6, -1})); }, {a});
}

TEST_CASE("gradcheck: matmul and linear") {
  check_grad([](const Inputs& in) { return ops::matmul(in[0], in[1]); }, {param({2, 3, 5}, 8), param({5, 4}, 9)});
  check_grad([](const Inputs& in) { return ops::linear(in[0], in[1], in[2]); },
             {param({2, 3, 5}, 10), param({4, 5}, 11), param({4}, 12)});
  check_grad([](const Inputs& in) { return ops::linear(in[0], in[1], Tensor()); },
             {param({7, 5}, 13), param({6, 5}, 14)});
  // linear_relu: biases of +-2 over products of about 0.2 keep every unit away from the kink, some on
  // and some off.
  Tensor bias = Tensor::from_data({4}, {2.0f, -2.0f, 2.0f, -2.0f});
  bias.set_requires_grad();
  check_grad([](const Inputs& in) { return ops::linear_relu(in[0], in[1], in[2]); },
             {param({2, 3, 5}, 15, 0.3f), param({4, 5}, 16, 0.3f), bias});
}

TEST_CASE("gradcheck: layer_norm over one and two trailing dims, with and without affine") {
  Tensor x = param({2, 3, 8}, 20, 2.0f, 1.0f);
  Tensor gamma = param({8}, 21, 0.2f, 1.0f), beta = param({8}, 22, 0.2f);
  check_grad([](const Inputs& in) { return ops::layer_norm(in[0], {8}, in[1], in[2], 1e-5f); }, {x, gamma, beta});
  check_grad([](const Inputs& in) { return ops::layer_norm(in[0], {8}, Tensor(), Tensor(), 1e-12f); }, {x});
  Tensor x2 = param({2, 3, 4}, 23), g2 = param({3, 4}, 24, 0.2f, 1.0f), b2 = param({3, 4}, 25, 0.2f);
  check_grad([](const Inputs& in) { return ops::layer_norm(in[0], {3, 4}, in[1], in[2], 1e-5f); }, {x2, g2, b2});
}

TEST_CASE("gradcheck: rms_norm, batch_norm (training and eval), dyt") {
  Tensor x = param({6, 5}, 30, 1.5f, 0.5f);
  Tensor gamma = param({5}, 31, 0.2f, 1.0f), beta = param({5}, 32, 0.2f);
  check_grad([](const Inputs& in) { return ops::rms_norm(in[0], {5}, in[1], 1e-6f); }, {x, gamma});
  check_grad(
      [](const Inputs& in) { return ops::batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true, 0.1f, 1e-5f); },
      {x, gamma, beta});
  Tensor running_mean = Tensor::from_data({5}, {0.1f, -0.2f, 0.3f, 0.0f, 0.5f});
  Tensor running_var = Tensor::from_data({5}, {1.0f, 2.0f, 0.5f, 1.5f, 0.8f});
  check_grad(
      [=](const Inputs& in) {
        return ops::batch_norm(in[0], in[1], in[2], running_mean, running_var, false, 0.1f, 1e-5f);
      },
      {x, gamma, beta});
  Tensor alpha = Tensor::from_data({1}, {0.7f});
  alpha.set_requires_grad();
  check_grad([](const Inputs& in) { return ops::dyt(in[0], in[1], in[2], in[3]); }, {x, alpha, gamma, beta});
}

TEST_CASE("gradcheck: embedding, attention, softmax, mean_pool, cross_entropy, dropout") {
  const std::vector<int32_t> ids{3, 0, 3, 2, 1};
  check_grad([ids](const Inputs& in) { return ops::embedding(ids, in[0]); }, {param({4, 3}, 40)});

  const std::vector<int64_t> offsets{0, 3, 4, 9};  // lengths 3, 1, 5
  check_grad([offsets](const Inputs& in) { return ops::attention(in[0], offsets, 2); }, {param({9, 3 * 4}, 41)});

  check_grad([](const Inputs& in) { return ops::softmax(in[0]); }, {param({3, 6}, 42)});
  check_grad([offsets](const Inputs& in) { return ops::mean_pool(in[0], offsets); }, {param({9, 4}, 43)});

  const std::vector<int32_t> targets{1, -1, 0, 3, -1};
  check_grad([targets](const Inputs& in) { return ops::cross_entropy(in[0], targets); }, {param({5, 4}, 44)});

  // The mask is a function of the key and the element's coordinates: the same for every
  // perturbed evaluation.
  const std::vector<int64_t> drop_offsets{0, 3, 4};  // lengths 3, 1
  check_grad([drop_offsets](const Inputs& in) { return ops::dropout(in[0], drop_offsets, 0.3f, 77, 5, true); },
             {param({4, 6}, 45)});
}

// The ops build a failed check's message only when the check fails (src/ops/common.hpp, require): the
// message must still be the whole sentence, with the values that failed.
TEST_CASE("ops: a failed check still names what failed (messages are built only on failure)") {
  const Tensor logits = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(ops::cross_entropy(logits, {0, 3}), "cross_entropy: target 3 out of range [0, 3)", UsageError);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(logits, {0}), "cross_entropy: logits [2, 3] and 1 targets do not match",
                       UsageError);
  CHECK_NOTHROW(ops::cross_entropy(logits, {-1, 2}));  // -1: no target at that row
  CHECK_THROWS_WITH_AS(ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})),
                       "matmul: cannot multiply [2, 3] by [4, 5]", UsageError);
  CHECK_THROWS_WITH_AS(ops::mean_pool(Tensor::zeros({4, 2}), {0, 3, 2, 4}), "mean_pool: offsets must be non-decreasing",
                       UsageError);
  CHECK_THROWS_WITH_AS(ops::mean_pool(Tensor::zeros({4, 2}), {0, 3}),
                       "mean_pool: offsets must start at 0 and end at the number of tokens (4)", UsageError);
}
