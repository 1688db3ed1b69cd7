// Optimizers, gradient clipping and lr schedules: hand-computed steps, parity with torch.optim
// (tests/data/optim, made by scripts/golden/optim.py), weight-decay name rules, checkpoint state
// round trips and option checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/io/npy.hpp"
#include "normlab/nn/module.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"
#include "normlab/shortest.hpp"
#include "normlab/tensor.hpp"
#include "same_bytes.hpp"

using normlab::Shape;
using normlab::Tensor;
using normlab::nn::NamedTensors;
using namespace normlab::optim;

namespace {

const std::string kDataDir = std::string(NORMLAB_TEST_DATA_DIR) + "/optim/";

Tensor param(const Shape& shape, std::vector<float> values) {
  Tensor t = Tensor::from_data(shape, std::move(values));
  t.set_requires_grad(true);
  return t;
}

void set_grad(Tensor& t, const std::vector<float>& g) {
  REQUIRE(static_cast<int64_t>(g.size()) == t.numel());
  float* dst = t.grad_data();
  for (size_t i = 0; i < g.size(); i++) dst[i] = g[i];
}

std::vector<float> grad_vector(const Tensor& t) {
  const float* g = t.grad_data();
  REQUIRE(g != nullptr);
  return std::vector<float>(g, g + t.numel());
}

OptimizerOptions make_options(const std::string& name, float weight_decay) {
  OptimizerOptions o;
  for (auto [kind, text] : normlab::optim::kOptimizerNames)
    if (name == text) o.name = kind;
  o.weight_decay = weight_decay;
  return o;
}

}  // namespace

TEST_CASE("optim sgd momentum: first two steps by hand") {
  const float lr = 0.1f, momentum = 0.9f, wd = 0.01f;
  Tensor w = param({2}, {1.0f, -2.0f});
  OptimizerOptions o = make_options("sgd", wd);
  o.momentum = momentum;
  Optimizer opt(o, {{"linear.weight", w}});

  const double g1[2] = {0.5, -0.25}, g2[2] = {-1.0, 2.0};
  double p[2] = {1.0, -2.0}, buf[2];
  // Step 1: buf = g + wd*p; p -= lr*buf.
  for (int i = 0; i < 2; i++) {
    buf[i] = g1[i] + 0.01 * p[i];
    p[i] -= 0.1 * buf[i];
  }
  set_grad(w, {0.5f, -0.25f});
  opt.step(normlab::shortest(lr));
  CHECK(opt.step_count() == 1);
  for (int i = 0; i < 2; i++) CHECK(w.data()[i] == doctest::Approx(p[i]).epsilon(1e-6));
  // Step 2: buf = 0.9*buf + g + wd*p.
  for (int i = 0; i < 2; i++) {
    buf[i] = 0.9 * buf[i] + g2[i] + 0.01 * p[i];
    p[i] -= 0.1 * buf[i];
  }
  opt.zero_grad();
  CHECK_FALSE(w.has_grad());
  set_grad(w, {-1.0f, 2.0f});
  opt.step(normlab::shortest(lr));
  for (int i = 0; i < 2; i++) CHECK(w.data()[i] == doctest::Approx(p[i]).epsilon(1e-6));
  NamedTensors st = opt.state();
  REQUIRE(st.size() == 1);
  CHECK(st[0].first == "optim.momentum_buffer.linear.weight");
  for (int i = 0; i < 2; i++) CHECK(st[0].second.data()[i] == doctest::Approx(buf[i]).epsilon(1e-6));

  // Without momentum there is no state and the step is plain gradient descent.
  Tensor v = param({1, 2}, {3.0f, 4.0f});
  Optimizer plain(make_options("sgd", 0.0f), {{"v", v}});
  CHECK(plain.state().empty());
  set_grad(v, {1.0f, -2.0f});
  plain.step(0.5);
  CHECK(v.data()[0] == 2.5f);
  CHECK(v.data()[1] == 5.0f);
}

// Adam and AdamW differ only in where weight decay enters; both are checked against the textbook
// formula in double.
TEST_CASE("optim adam and adamw: first two steps by hand") {
  for (std::string name : {"adam", "adamw"}) {
    CAPTURE(name);
    const double lr = 0.01, wd = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    Tensor w = param({3}, {0.5f, -1.5f, 2.0f});
    Optimizer opt(make_options(name, 0.1f), {{"encoder.linear1.weight", w}});
    const std::vector<std::vector<double>> grads = {{0.3, -0.02, 4.0}, {-0.1, -0.05, 3.0}};
    double p[3] = {0.5, -1.5, 2.0}, m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
    for (int t = 1; t <= 2; t++) {
      for (int i = 0; i < 3; i++) {
        double g = grads[t - 1][i];
        if (name == "adam") g += wd * p[i];
        if (name == "adamw") p[i] *= 1.0 - lr * wd;
        m[i] = beta1 * m[i] + (1 - beta1) * g;
        v[i] = beta2 * v[i] + (1 - beta2) * g * g;
        double m_hat = m[i] / (1 - std::pow(beta1, t));
        double v_hat = v[i] / (1 - std::pow(beta2, t));
        p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
      opt.zero_grad();
      std::vector<float> gf(grads[t - 1].begin(), grads[t - 1].end());
      set_grad(w, gf);
      opt.step(normlab::shortest(0.01f));
      for (int i = 0; i < 3; i++) CHECK(w.data()[i] == doctest::Approx(p[i]).epsilon(1e-6));
    }
    NamedTensors st = opt.state();
    REQUIRE(st.size() == 2);
    CHECK(st[0].first == "optim.exp_avg.encoder.linear1.weight");
    CHECK(st[1].first == "optim.exp_avg_sq.encoder.linear1.weight");
    for (int i = 0; i < 3; i++) {
      CHECK(st[0].second.data()[i] == doctest::Approx(m[i]).epsilon(1e-6));
      CHECK(st[1].second.data()[i] == doctest::Approx(v[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("optim adam first step moves each weight by about lr against its gradient sign") {
  // m_hat = g and v_hat = g^2 at t = 1, so the step is lr * g / (|g| + eps): scale-free.
  Tensor w = param({4}, {0.0f, 0.0f, 0.0f, 0.0f});
  Optimizer opt(make_options("adam", 0.0f), {{"w", w}});
  set_grad(w, {1e-3f, -50.0f, 7.0f, -1e-2f});
  opt.step(normlab::shortest(0.001f));
  const double expected[4] = {-0.001, 0.001, -0.001, 0.001};
  for (int i = 0; i < 4; i++) CHECK(w.data()[i] == doctest::Approx(expected[i]).epsilon(1e-4));
}

// Golden trajectories from torch.optim: 5 steps with a varying lr; "linear.weight" decays,
// "linear.bias" is in a no-decay group in PyTorch and excluded by no_decay_name here.
TEST_CASE("optim parity with torch.optim sgd/adam/adamw over 5 steps") {
  using normlab::io::read_npy;
  auto weight0 = read_npy(kDataDir + "weight0.npy");
  auto bias0 = read_npy(kDataDir + "bias0.npy");
  auto grad_weight = read_npy(kDataDir + "grad_weight.npy");
  auto grad_bias = read_npy(kDataDir + "grad_bias.npy");
  auto lrs = read_npy(kDataDir + "lrs.npy");
  REQUIRE(weight0.shape == std::vector<int64_t>{3, 5});
  REQUIRE(bias0.shape == std::vector<int64_t>{5});
  const int64_t steps = static_cast<int64_t>(lrs.data.size());
  REQUIRE(steps == 5);
  REQUIRE(grad_weight.shape == std::vector<int64_t>{steps, 3, 5});
  REQUIRE(grad_bias.shape == std::vector<int64_t>{steps, 5});

  struct Case {
    std::string name;
    float momentum, weight_decay;
  };
  for (const Case& c : {Case{"sgd", 0.9f, 0.01f}, Case{"adam", 0.0f, 0.01f}, Case{"adamw", 0.0f, 0.1f}}) {
    CAPTURE(c.name);
    auto want_weight = read_npy(kDataDir + c.name + "_weight.npy");
    auto want_bias = read_npy(kDataDir + c.name + "_bias.npy");
    REQUIRE(want_weight.data.size() == static_cast<size_t>(steps * 15));
    REQUIRE(want_bias.data.size() == static_cast<size_t>(steps * 5));

    Tensor weight = param({3, 5}, weight0.data);
    Tensor bias = param({5}, bias0.data);
    OptimizerOptions o = make_options(c.name, c.weight_decay);
    o.momentum = c.momentum;
    Optimizer opt(o, {{"linear.weight", weight}, {"linear.bias", bias}});
    double max_rel = 0.0;
    for (int64_t s = 0; s < steps; s++) {
      opt.zero_grad();
      set_grad(weight, std::vector<float>(grad_weight.data.begin() + s * 15, grad_weight.data.begin() + (s + 1) * 15));
      set_grad(bias, std::vector<float>(grad_bias.data.begin() + s * 5, grad_bias.data.begin() + (s + 1) * 5));
      opt.step(normlab::shortest(lrs.data[s]));
      auto check = [&](const Tensor& t, const std::vector<float>& want, int64_t offset) {
        for (int64_t i = 0; i < t.numel(); i++) {
          double expected = want[offset + i];
          double got = t.data()[i];
          double rel = std::abs(got - expected) / std::max(std::abs(expected), 1e-3);
          max_rel = std::max(max_rel, rel);
          CHECK_MESSAGE(rel <= 1e-6, "step ", s, " element ", i, ": got ", got, " want ", expected);
        }
      };
      check(weight, want_weight.data, s * 15);
      check(bias, want_bias.data, s * 5);
    }
    MESSAGE(c.name, ": max relative difference to torch.optim ", max_rel);
  }
}

TEST_CASE("optim no_decay_name on the model's parameter names") {
  Tensor matrix = Tensor::zeros({4, 4});
  Tensor vector = Tensor::zeros({4});
  Tensor one = Tensor::zeros({1});
  CHECK(no_decay_name("layers.0.linear1.bias", vector));
  CHECK(no_decay_name("layers.0.self_attn.in_proj_bias", vector));
  CHECK(no_decay_name("layers.0.self_attn.out_proj.bias", vector));
  CHECK(no_decay_name("layers.0.norm1.weight", vector));
  CHECK(no_decay_name("layers.0.norm2.bias", vector));
  CHECK(no_decay_name("layers.1.norm1.weight", vector));
  CHECK(no_decay_name("norm.weight", vector));
  CHECK(no_decay_name("embedding.weight", matrix));
  CHECK(no_decay_name("pos_embedding.weight", matrix));
  CHECK(no_decay_name("layers.0.resweight", one));
  CHECK(no_decay_name("layers.0.norm1.alpha", one));
  CHECK(no_decay_name("anything.scalar", Tensor::zeros({})));

  CHECK_FALSE(no_decay_name("layers.0.self_attn.in_proj_weight", matrix));
  CHECK_FALSE(no_decay_name("layers.0.self_attn.out_proj.weight", matrix));
  CHECK_FALSE(no_decay_name("layers.0.linear1.weight", matrix));
  CHECK_FALSE(no_decay_name("layers.0.linear2.weight", matrix));
  CHECK_FALSE(no_decay_name("head.weight", matrix));
  // Names that merely contain "norm" or "bias" somewhere else are not caught.
  CHECK_FALSE(no_decay_name("layers.0.abnormal.weight", matrix));
  CHECK_FALSE(no_decay_name("biased.weight", matrix));
}

TEST_CASE("optim weight decay skips no-decay parameters unless decay_all") {
  for (bool decay_all : {false, true}) {
    CAPTURE(decay_all);
    Tensor weight = param({2, 2}, {1.0f, 1.0f, 1.0f, 1.0f});
    Tensor bias = param({2}, {1.0f, 1.0f});
    OptimizerOptions o = make_options("adamw", 0.5f);
    o.decay_all = decay_all;
    Optimizer opt(o, {{"linear.weight", weight}, {"linear.bias", bias}});
    // Zero gradients: Adam's step is 0/(0+eps) = 0, only the decoupled decay moves the weights.
    weight.grad_data();
    bias.grad_data();
    opt.step(normlab::shortest(0.1f));
    CHECK(weight.data()[0] == doctest::Approx(0.95).epsilon(1e-7));
    CHECK(bias.data()[0] == doctest::Approx(decay_all ? 0.95 : 1.0).epsilon(1e-7));
  }
}

TEST_CASE("optim parameters without a gradient are left alone") {
  Tensor a = param({2}, {1.0f, 2.0f});
  Tensor b = param({2}, {3.0f, 4.0f});
  Optimizer opt(make_options("adam", 0.0f), {{"a", a}, {"b", b}});
  set_grad(a, {1.0f, 1.0f});
  opt.step(normlab::shortest(0.1f));
  CHECK(a.data()[0] != 1.0f);
  CHECK(b.data()[0] == 3.0f);
  CHECK(b.data()[1] == 4.0f);
  NamedTensors st = opt.state();
  REQUIRE(st.size() == 4);
  CHECK(st[1].first == "optim.exp_avg.b");
  CHECK(st[1].second.data()[0] == 0.0f);

  // lr = 0 (the end of a cosine schedule with min ratio 0) is allowed and moves nothing.
  opt.step(0.0);
  CHECK(opt.step_count() == 2);
}

TEST_CASE("optim clip_grad_norm returns the pre-clip norm and scales like PyTorch") {
  Tensor a = param({2}, {0.0f, 0.0f});
  Tensor b = param({2, 1}, {0.0f, 0.0f});
  Tensor no_grad = param({3}, {0.0f, 0.0f, 0.0f});
  NamedTensors params = {{"a", a}, {"b", b}, {"c", no_grad}};

  set_grad(a, {3.0f, 0.0f});
  set_grad(b, {0.0f, -4.0f});
  // Below the threshold: unchanged.
  CHECK(clip_grad_norm(params, 10.0) == doctest::Approx(5.0).epsilon(1e-12));
  CHECK(grad_vector(a) == std::vector<float>{3.0f, 0.0f});
  // max_norm <= 0 only measures.
  CHECK(clip_grad_norm(params, 0.0) == doctest::Approx(5.0).epsilon(1e-12));
  CHECK(grad_vector(b) == std::vector<float>{0.0f, -4.0f});
  CHECK_FALSE(no_grad.has_grad());

  // Above: every gradient times max_norm / (norm + 1e-6).
  double norm = clip_grad_norm(params, 1.0);
  CHECK(norm == doctest::Approx(5.0).epsilon(1e-12));
  const double coef = 1.0 / (5.0 + 1e-6);
  CHECK(grad_vector(a)[0] == doctest::Approx(3.0 * coef).epsilon(1e-7));
  CHECK(grad_vector(b)[1] == doctest::Approx(-4.0 * coef).epsilon(1e-7));
  CHECK(clip_grad_norm(params, 0.0) == doctest::Approx(1.0).epsilon(1e-6));

  // A norm that overflows float32 is still measured exactly in double.
  set_grad(a, {3e30f, 0.0f});
  set_grad(b, {0.0f, 4e30f});
  CHECK(clip_grad_norm(params, 0.0) == doctest::Approx(5e30).epsilon(1e-7));

  // Non-finite: returned, nothing scaled.
  set_grad(a, {NAN, 1.0f});
  set_grad(b, {2.0f, 2.0f});
  CHECK(std::isnan(clip_grad_norm(params, 1.0)));
  CHECK(grad_vector(b) == std::vector<float>{2.0f, 2.0f});
  set_grad(a, {INFINITY, 1.0f});
  CHECK(std::isinf(clip_grad_norm(params, 1.0)));
  CHECK(grad_vector(b) == std::vector<float>{2.0f, 2.0f});

  // Against a double loop on random gradients of several tensors.
  normlab::Rng rng(7);
  NamedTensors many;
  double sum_sq = 0.0;
  for (int k = 0; k < 4; k++) {
    Tensor t = Tensor::normal({100 + 37 * k}, rng);
    t.set_requires_grad(true);
    float* g = t.grad_data();
    for (int64_t i = 0; i < t.numel(); i++) {
      g[i] = rng.normal(0.0f, 3.0f);
      sum_sq += double(g[i]) * double(g[i]);
    }
    many.emplace_back(std::string("p").append(std::to_string(k)), t);  // GCC 12 -Wrestrict false alarm on "p" + s
  }
  CHECK(clip_grad_norm(many, 2.0) == doctest::Approx(std::sqrt(sum_sq)).epsilon(1e-12));
  CHECK(clip_grad_norm(many, 0.0) == doctest::Approx(2.0).epsilon(1e-6));
}

TEST_CASE("optim schedules at boundary steps") {
  ScheduleOptions constant;
  CHECK(lr_factor(constant, 0) == 1.0f);
  CHECK(lr_factor(constant, 1000000) == 1.0f);

  ScheduleOptions warmup{normlab::optim::ScheduleKind::warmup, 4, 100, 0.0f};
  CHECK(lr_factor(warmup, 0) == 0.25f);
  CHECK(lr_factor(warmup, 1) == 0.5f);
  CHECK(lr_factor(warmup, 3) == 1.0f);
  CHECK(lr_factor(warmup, 4) == 1.0f);
  CHECK(lr_factor(warmup, 500) == 1.0f);
  CHECK(lr_factor(ScheduleOptions{normlab::optim::ScheduleKind::warmup, 0, 1, 0.0f}, 0) == 1.0f);

  ScheduleOptions cosine{normlab::optim::ScheduleKind::warmup_cosine, 10, 110, 0.1f};
  CHECK(lr_factor(cosine, 0) == doctest::Approx(0.1));
  CHECK(lr_factor(cosine, 9) == 1.0f);
  CHECK(lr_factor(cosine, 10) == 1.0f);                                            // progress 0
  CHECK(lr_factor(cosine, 60) == doctest::Approx(0.1 + 0.9 * 0.5).epsilon(1e-6));  // progress 1/2
  const double quarter = 0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * 0.25));
  CHECK(lr_factor(cosine, 35) == doctest::Approx(quarter).epsilon(1e-6));
  CHECK(lr_factor(cosine, 110) == doctest::Approx(0.1).epsilon(1e-6));   // progress 1
  CHECK(lr_factor(cosine, 5000) == doctest::Approx(0.1).epsilon(1e-6));  // clamped
  // Monotone non-increasing after warmup.
  for (int64_t s = 10; s < 120; s++) CHECK(lr_factor(cosine, s + 1) <= lr_factor(cosine, s));

  ScheduleOptions no_warmup{normlab::optim::ScheduleKind::warmup_cosine, 0, 4, 0.0f};
  CHECK(lr_factor(no_warmup, 0) == 1.0f);
  CHECK(lr_factor(no_warmup, 2) == doctest::Approx(0.5).epsilon(1e-6));
  CHECK(lr_factor(no_warmup, 4) == doctest::Approx(0.0).epsilon(1e-6));
  // Warmup as long as the run: the cosine part has no length and sits at the floor.
  ScheduleOptions degenerate{normlab::optim::ScheduleKind::warmup_cosine, 5, 5, 0.2f};
  CHECK(lr_factor(degenerate, 4) == 1.0f);
  CHECK(lr_factor(degenerate, 5) == doctest::Approx(0.2).epsilon(1e-6));

  CHECK_THROWS_AS(lr_factor(ScheduleOptions{normlab::optim::ScheduleKind::warmup, -1, 1, 0.0f}, 0),
                  normlab::UsageError);
  CHECK_THROWS_AS(lr_factor(ScheduleOptions{normlab::optim::ScheduleKind::warmup_cosine, 0, 0, 0.0f}, 0),
                  normlab::UsageError);
  CHECK_THROWS_AS(lr_factor(ScheduleOptions{normlab::optim::ScheduleKind::warmup_cosine, 0, 10, 1.5f}, 0),
                  normlab::UsageError);
  CHECK_THROWS_AS(lr_factor(constant, -1), normlab::UsageError);
}

// Run A: 6 steps. Run B: 3 steps, export state, build a fresh optimizer on copies of the parameters,
// load, 3 more steps. Both must end bit-identical.
TEST_CASE("optim state round trip continues bit-identically") {
  for (std::string name : {"sgd", "adam", "adamw"}) {
    CAPTURE(name);
    normlab::Rng rng(42);
    Tensor init_w = Tensor::normal({8, 5}, rng);
    Tensor init_b = Tensor::normal({5}, rng);
    std::vector<std::vector<float>> grads_w, grads_b;
    for (int s = 0; s < 6; s++) {
      grads_w.push_back(Tensor::normal({8, 5}, rng).to_vector());
      grads_b.push_back(Tensor::normal({5}, rng).to_vector());
    }
    OptimizerOptions o = make_options(name, 0.01f);
    o.momentum = 0.8f;
    auto run_steps = [&](Optimizer& opt, Tensor& w, Tensor& b, int from, int to) {
      for (int s = from; s < to; s++) {
        opt.zero_grad();
        set_grad(w, grads_w[s]);
        set_grad(b, grads_b[s]);
        opt.step(normlab::shortest(0.05f * float(s + 1) / 6.0f));
      }
    };

    Tensor wa = init_w.clone().set_requires_grad(true);
    Tensor ba = init_b.clone().set_requires_grad(true);
    Optimizer a(o, {{"w", wa}, {"b", ba}});
    run_steps(a, wa, ba, 0, 6);

    Tensor wb = init_w.clone().set_requires_grad(true);
    Tensor bb = init_b.clone().set_requires_grad(true);
    Optimizer b(o, {{"w", wb}, {"b", bb}});
    run_steps(b, wb, bb, 0, 3);
    std::map<std::string, std::vector<float>> saved = {{"w", wb.to_vector()}, {"b", bb.to_vector()}};
    for (const auto& [key, t] : b.state()) saved[key] = t.to_vector();
    CHECK(saved.size() == (name == "sgd" ? 4u : 6u));

    Tensor wc = Tensor::from_data({8, 5}, saved.at("w")).set_requires_grad(true);
    Tensor bc = Tensor::from_data({5}, saved.at("b")).set_requires_grad(true);
    Optimizer c(o, {{"w", wc}, {"b", bc}});
    c.load_state(saved, b.step_count(), "run/checkpoint.safetensors");
    CHECK(c.step_count() == 3);
    run_steps(c, wc, bc, 3, 6);

    CHECK(c.step_count() == a.step_count());
    CHECK(wc.to_vector() == wa.to_vector());
    CHECK(bc.to_vector() == ba.to_vector());
    NamedTensors sa = a.state(), sc = c.state();
    REQUIRE(sa.size() == sc.size());
    for (size_t i = 0; i < sa.size(); i++) {
      CHECK(sa[i].first == sc[i].first);
      CHECK(sa[i].second.to_vector() == sc[i].second.to_vector());
    }
  }
}

TEST_CASE("optim load_state refuses bad state with the name in the message") {
  Tensor w = param({2, 3}, {1, 2, 3, 4, 5, 6});
  Optimizer opt(make_options("adamw", 0.0f), {{"layers.0.linear1.weight", w}});
  std::map<std::string, std::vector<float>> good = {
      {"optim.exp_avg.layers.0.linear1.weight", std::vector<float>(6, 1.0f)},
      {"optim.exp_avg_sq.layers.0.linear1.weight", std::vector<float>(6, 2.0f)},
      {"layers.0.linear1.weight", std::vector<float>(6, 0.0f)},  // model tensors are ignored
  };
  opt.load_state(good, 7, "ckpt");
  CHECK(opt.step_count() == 7);
  CHECK(opt.state()[1].second.data()[5] == 2.0f);

  auto expect_error = [&](std::map<std::string, std::vector<float>> tensors, int64_t steps,
                          const std::string& fragment) {
    try {
      opt.load_state(tensors, steps, "ckpt");
      FAIL("no InputError for ", fragment);
    } catch (const normlab::InputError& e) {
      std::string what = e.what();
      CHECK_MESSAGE(what.find("ckpt: optimizer state") == 0, what);
      CHECK_MESSAGE(what.find(fragment) != std::string::npos, what);
    }
    // Unchanged after a refused load.
    CHECK(opt.step_count() == 7);
    CHECK(opt.state()[0].second.data()[0] == 1.0f);
  };
  auto missing = good;
  missing.erase("optim.exp_avg_sq.layers.0.linear1.weight");
  expect_error(missing, 7, "'optim.exp_avg_sq.layers.0.linear1.weight': missing");
  auto wrong_size = good;
  wrong_size["optim.exp_avg.layers.0.linear1.weight"] = std::vector<float>(5, 0.0f);
  wrong_size["optim.exp_avg_sq.layers.0.linear1.weight"] = std::vector<float>(6, 0.0f);
  expect_error(wrong_size, 7, "'optim.exp_avg.layers.0.linear1.weight': has 5 values");
  auto extra = good;
  extra["optim.momentum_buffer.layers.0.linear1.weight"] = std::vector<float>(6, 0.0f);
  expect_error(extra, 7, "'optim.momentum_buffer.layers.0.linear1.weight': not expected");
  expect_error(good, -1, "step count");
}

TEST_CASE("optim bad options throw UsageError") {
  Tensor w = param({2}, {1.0f, 2.0f});
  auto bad = [&](auto edit) {
    OptimizerOptions o;
    edit(o);
    CHECK_THROWS_AS(Optimizer(o, {{"w", w}}), normlab::UsageError);
  };
  bad([](OptimizerOptions& o) { o.beta1 = 1.0f; });
  bad([](OptimizerOptions& o) { o.beta1 = -0.1f; });
  bad([](OptimizerOptions& o) { o.beta2 = 1.0f; });
  bad([](OptimizerOptions& o) { o.beta2 = NAN; });
  bad([](OptimizerOptions& o) { o.eps = 0.0f; });
  bad([](OptimizerOptions& o) { o.weight_decay = -0.1f; });
  bad([](OptimizerOptions& o) { o.weight_decay = INFINITY; });
  bad([](OptimizerOptions& o) { o.momentum = 1.0f; });
  bad([](OptimizerOptions& o) { o.momentum = -0.5f; });
  // Valid edge values.
  OptimizerOptions edge;
  edge.beta1 = 0.0f;
  edge.momentum = 0.0f;
  CHECK_NOTHROW(Optimizer(edge, {{"w", w}}));

  CHECK_THROWS_AS(Optimizer(OptimizerOptions{}, {{"w", w}, {"w", w}}), normlab::UsageError);
  CHECK_THROWS_AS(Optimizer(OptimizerOptions{}, {{"w", Tensor()}}), normlab::UsageError);
  Optimizer opt(OptimizerOptions{}, {{"w", w}});
  CHECK_THROWS_AS(opt.step(-0.1), normlab::UsageError);
  CHECK_THROWS_AS(opt.step(NAN), normlab::UsageError);
  CHECK(opt.step_count() == 0);
}

// Large parameters are updated by parallel loops: the result must not depend on the thread count.
TEST_CASE("optim parallel updates are identical at 1 and 2 threads") {
  const int saved_threads = normlab::num_threads();
  normlab::Rng rng(3);
  Tensor init = Tensor::normal({300, 250}, rng);  // above the parallel threshold
  Tensor grad = Tensor::normal({300, 250}, rng);
  for (std::string name : {"sgd", "adam", "adamw"}) {
    CAPTURE(name);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2}) {
      normlab::set_num_threads(threads);
      Tensor w = init.clone().set_requires_grad(true);
      OptimizerOptions o = make_options(name, 0.1f);
      o.momentum = 0.9f;
      Optimizer opt(o, {{"w", w}});
      for (int s = 0; s < 3; s++) {
        set_grad(w, grad.to_vector());
        clip_grad_norm(opt.params(), 50.0);
        opt.step(normlab::shortest(0.01f));
      }
      results.push_back(w.to_vector());
    }
    CHECK(results[0] == results[1]);
    CHECK(results[0] != init.to_vector());
  }
  normlab::set_num_threads(saved_threads);
}

// step_and_grad_norm: the norm clip_grad_norm(params, 0) gives and the update step() gives, bit for
// bit, for each optimizer, at 1 and 2 threads (the threads take whole tensors), over three steps;
// a parameter without a gradient is left alone and counts zero.
TEST_CASE("optim step_and_grad_norm equals clip_grad_norm then step, bit for bit") {
  const int saved_threads = normlab::num_threads();
  for (std::string name : {"adam", "adamw", "sgd"}) {
    for (int threads : {1, 2}) {
      INFO(name << ", " << threads << " threads");
      normlab::set_num_threads(threads);
      auto make_params = [] {
        normlab::Rng rng(11);
        NamedTensors params;
        for (int64_t n : {int64_t(40000), int64_t(7), int64_t(0), int64_t(16), int64_t(12288), int64_t(33)}) {
          Tensor t = Tensor::normal({n}, rng);
          t.set_requires_grad(true);
          params.emplace_back(std::string("layer.").append(std::to_string(params.size())).append(".weight"), t);
        }
        return params;
      };
      NamedTensors two_passes = make_params(), one_pass = make_params();
      OptimizerOptions o = make_options(name, 0.01f);
      o.momentum = 0.9f;
      Optimizer a(o, two_passes), b(o, one_pass);
      for (int step = 0; step < 3; step++) {
        normlab::Rng rng(uint64_t(20 + step));
        for (size_t k = 0; k < two_passes.size(); k++) {
          two_passes[k].second.zero_grad();
          one_pass[k].second.zero_grad();
          if (k == 3 && step == 1) continue;  // no gradient this step
          std::vector<float> g(size_t(two_passes[k].second.numel()));
          for (auto& x : g) x = rng.normal(0.0f, 0.5f);
          set_grad(two_passes[k].second, g);
          set_grad(one_pass[k].second, g);
        }
        const double expected = clip_grad_norm(two_passes, 0.0);
        a.step(1e-3);
        const double norm = b.step_and_grad_norm(1e-3);
        CHECK(std::memcmp(&norm, &expected, sizeof(double)) == 0);
        CHECK(norm > 0.0);
      }
      CHECK(b.step_count() == 3);
      for (size_t k = 0; k < two_passes.size(); k++) {
        const Tensor& x = two_passes[k].second;
        const Tensor& y = one_pass[k].second;
        CHECK(normlab::test::same_bytes(x.data(), y.data(), sizeof(float) * size_t(x.numel())));
      }
      const NamedTensors state_a = a.state(), state_b = b.state();
      REQUIRE(state_a.size() == state_b.size());
      for (size_t k = 0; k < state_a.size(); k++)
        CHECK(normlab::test::same_bytes(state_a[k].second.data(), state_b[k].second.data(),
                                        sizeof(float) * size_t(state_a[k].second.numel())));
    }
  }
  normlab::set_num_threads(saved_threads);
}
