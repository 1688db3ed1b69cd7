// The residual sum fused into the Linear before it, ops::linear_add (residual + x W^T + b): its
// gradients against finite differences, the bits of ops::add(residual, ops::linear(...)) forward and
// backward on every kernel path and thread count, and an encoder whose plain residual sums take it
// computing what the unfused block computed, bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "isa_support.hpp"
#include "same_bytes.hpp"
#include "leaf.hpp"
#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/gradcheck.hpp"
#include "normlab/kernels/add.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/ops.hpp"
#include "normlab/parallel.hpp"
#include "normlab/rng.hpp"

using namespace normlab;

namespace {

using test::leaf;

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && test::same_bytes(a.data(), b.data(), a.size() * sizeof(float));
}

// Every kernel path this CPU runs, the reference loops included.
std::vector<kernels::Isa> every_path() {
  std::vector<kernels::Isa> paths{kernels::Isa::reference};
  for (kernels::Isa isa : test::available_isas()) paths.push_back(isa);
  return paths;
}

// Runs `body` on every path at 1 and 2 threads, then restores both.
void on_every_path(const std::function<void()>& body) {
  const int saved_threads = num_threads();
  for (kernels::Isa isa : every_path()) {
    test::ScopedIsa scoped(isa);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      INFO("path " << kernels::isa_name(isa) << ", " << threads << " threads");
      body();
    }
  }
  set_num_threads(saved_threads);
}

struct Sizes {
  int64_t N, C, OC;
};

}  // namespace

TEST_CASE("gradcheck: linear_add, with and without bias, and with the residual also the Linear's input") {
  GradcheckOptions options;
  options.step = 5e-3;
  auto check = [&](const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs) {
    const GradcheckResult r = gradcheck(f, std::move(inputs), options);
    INFO(r.worst);
    CHECK(r.checked > 0);
    CHECK(r.ok);
  };
  check([](const std::vector<Tensor>& in) { return ops::linear_add(in[0], in[1], in[2], in[3]); },
        {leaf({2, 3, 5}, 1), leaf({4, 5}, 2), leaf({4}, 3), leaf({2, 3, 4}, 4)});
  check([](const std::vector<Tensor>& in) { return ops::linear_add(in[0], in[1], Tensor(), in[2]); },
        {leaf({7, 5}, 5), leaf({6, 5}, 6), leaf({7, 6}, 7)});
  // x + linear(x): the residual's gradient and the Linear's input gradient both reach x.
  check([](const std::vector<Tensor>& in) { return ops::linear_add(in[0], in[1], in[2], in[0]); },
        {leaf({5, 4}, 8), leaf({4, 4}, 9, 0.5f), leaf({4}, 10)});
  // No input features: every row is residual + bias.
  const Tensor none = ops::linear_add(Tensor::zeros({3, 0}), Tensor::zeros({2, 0}), Tensor::from_data({2}, {1, 2}),
                                      Tensor::from_data({3, 2}, {10, 20, 30, 40, 50, 60}));
  CHECK(none.to_vector() == std::vector<float>{11, 22, 31, 42, 51, 62});
  CHECK_THROWS_WITH_AS(ops::linear_add(leaf({3, 5}, 11), leaf({4, 5}, 12), leaf({4}, 13), leaf({3, 5}, 14)),
                       "linear_add: residual [3, 5] does not match the output [3, 4]", UsageError);
}

TEST_CASE("linear_add kernel: the bits of linear_forward then add_forward on every path and thread count") {
  // One K block and several (C = 300: the residual goes with the last block's store), micro-tile
  // edges on every path (135 = 16 x 8 + 7 rows; OC = 17), the demo's out_proj and linear2 shapes,
  // a product large enough for two threads, and C = 0 (out = residual + bias).
  const std::vector<Sizes> shapes{{1, 1, 1},    {135, 64, 64},   {135, 256, 64}, {13, 300, 17},
                                  {45, 40, 72}, {1040, 64, 256}, {6, 0, 5}};
  on_every_path([&] {
    for (const Sizes& s : shapes) {
      for (bool with_bias : {true, false}) {
        INFO("N " << s.N << " C " << s.C << " OC " << s.OC << (with_bias ? " with bias" : " no bias"));
        const Tensor inp = leaf({s.N, s.C}, uint64_t(s.N + s.C)), weight = leaf({s.OC, s.C}, 21, 0.2f);
        const Tensor bias = leaf({s.OC}, 22), residual = leaf({s.N, s.OC}, 23);
        const float* b = with_bias ? bias.data() : nullptr;
        std::vector<float> f(size_t(s.N * s.OC)), want(f.size()), got(f.size(), std::nanf(""));
        kernels::linear_forward(f.data(), inp.data(), weight.data(), b, s.N, s.C, s.OC);
        kernels::add_forward(want.data(), residual.data(), f.data(), s.N * s.OC);
        kernels::linear_add_forward(got.data(), inp.data(), weight.data(), b, residual.data(), s.N, s.C, s.OC);
        CHECK(same(want, got));
      }
    }
  });
}

TEST_CASE("linear_add op: output and every gradient are the bits of add(residual, linear(...)), on every path") {
  // The residual's gradient first reaching it (handed the output's gradient) and adding to one
  // it already has.
  const int64_t N = 135, C = 256, OC = 64;
  on_every_path([&] {
    for (bool residual_has_grad : {false, true}) {
      INFO("residual_has_grad " << residual_has_grad);
      struct Run {
        std::vector<float> out, dx, dw, db, dr;
      };
      auto run = [&](bool fused) {
        Tensor x = leaf({N, C}, 31), w = leaf({OC, C}, 32, 0.1f), b = leaf({OC}, 33), r = leaf({N, OC}, 34);
        if (residual_has_grad) {
          Rng rng(35);
          std::vector<float> earlier = Tensor::normal({N, OC}, rng).to_vector();
          std::copy(earlier.begin(), earlier.end(), r.grad_data());
        }
        Tensor out = fused ? ops::linear_add(x, w, b, r) : ops::add(r, ops::linear(x, w, b));
        Rng rng(36);
        out.backward(Tensor::normal({N, OC}, rng));
        return Run{out.to_vector(), x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector(),
                   r.grad().to_vector()};
      };
      const Run want = run(false), got = run(true);
      CHECK(same(want.out, got.out));
      CHECK(same(want.dx, got.dx));
      CHECK(same(want.dw, got.dw));
      CHECK(same(want.db, got.db));
      CHECK(same(want.dr, got.dr));
    }
  });
}

namespace {

// The encoder as it was written before the fusion: each sublayer's output a tensor of its own
// (out_proj and linear2 by ops::linear), added to the stream by ops::add. Plain residual, ReLU,
// no dropout; placement and norm as in `encoder`.
Tensor unfused_forward(const nn::TransformerEncoder& encoder, const Tensor& x, const std::vector<int64_t>& offsets) {
  Tensor h = x;
  for (const auto& layer : encoder.layers) {
    auto attn = [&](const Tensor& t) { return layer->self_attn.forward(t, offsets); };
    auto ffn = [&](const Tensor& t) {
      const Tensor hidden = ops::linear_relu(t, layer->linear1.weight, layer->linear1.bias);
      return ops::linear(hidden, layer->linear2.weight, layer->linear2.bias);
    };
    if (!layer->norm1) {
      h = ops::add(h, attn(h));
      h = ops::add(h, ffn(h));
    } else if (encoder.options.placement == nn::Placement::post) {
      h = layer->norm1->forward(ops::add(h, attn(h)));
      h = layer->norm2->forward(ops::add(h, ffn(h)));
    } else {
      h = ops::add(h, attn(layer->norm1->forward(h)));
      h = ops::add(h, ffn(layer->norm2->forward(h)));
    }
  }
  return encoder.norm ? encoder.norm->forward(h) : h;
}

}  // namespace

TEST_CASE("encoder: the plain residual sums fused into out_proj and linear2 give the unfused block's bits") {
  // Two layers on a packed batch of lengths 5, 1, 9; output, input gradient and every parameter's
  // gradient, pre and post placement and no norm layer, on every path and thread count. The fused
  // graph has two nodes fewer per layer (each sum is the Linear's own node).
  const std::vector<int64_t> offsets{0, 5, 6, 15};
  struct Case {
    nn::Placement placement;
    const char* norm;
  };
  for (const Case& c : {Case{nn::Placement::pre, "layernorm"}, Case{nn::Placement::post, "layernorm"},
                        Case{nn::Placement::pre, "none"}}) {
    INFO(nn::to_string(c.placement) << " " << c.norm);
    nn::EncoderOptions opts;
    opts.d_model = 32;
    opts.num_heads = 4;
    opts.num_layers = 2;
    opts.dim_feedforward = 64;
    opts.placement = c.placement;
    opts.norm = nn::NormKind(c.norm);
    nn::TransformerEncoder encoder(opts, 7);
    encoder.train();
    on_every_path([&] {
      struct Run {
        std::vector<float> out, dx;
        std::vector<std::vector<float>> grads;
        int64_t nodes;
      };
      auto run = [&](bool fused) {
        Tensor x = leaf({offsets.back(), opts.d_model}, 41);
        for (auto& [name, p] : encoder.named_parameters()) p.zero_grad();
        Tensor out = fused ? encoder.forward(x, offsets) : unfused_forward(encoder, x, offsets);
        Run r{out.to_vector(), {}, {}, graph_size(out)};
        Rng rng(42);
        out.backward(Tensor::normal(out.shape(), rng));
        r.dx = x.grad().to_vector();
        for (auto& [name, p] : encoder.named_parameters()) r.grads.push_back(p.grad().to_vector());
        return r;
      };
      const Run want = run(false), got = run(true);
      CHECK(got.nodes == want.nodes - 2 * opts.num_layers);
      CHECK(same(want.out, got.out));
      CHECK(same(want.dx, got.dx));
      REQUIRE(want.grads.size() == got.grads.size());
      for (size_t i = 0; i < want.grads.size(); ++i) {
        INFO("parameter " << encoder.named_parameters()[i].first);
        CHECK(same(want.grads[i], got.grads[i]));
      }
    });
  }
}

TEST_CASE("encoder: a scaled residual sum (ReZero) and dropout in training keep the unfused graph") {
  // ReZero multiplies f by alpha before the sum: its layers keep out_proj's and linear2's own nodes
  // and the sum's. Plain with dropout: the mask stands between the Linear and the sum, also unfused;
  // in eval mode the dropout is the identity and the sums fuse again.
  const std::vector<int64_t> offsets{0, 4, 11};
  auto nodes = [&](const nn::EncoderOptions& opts, bool train) {
    nn::TransformerEncoder encoder(opts, 3);
    if (train) encoder.train();
    else encoder.eval();
    const Tensor x = leaf({offsets.back(), opts.d_model}, 51);
    return graph_size(encoder.forward(x, offsets));
  };
  nn::EncoderOptions plain;
  plain.d_model = 16;
  plain.num_heads = 2;
  plain.num_layers = 1;
  plain.dim_feedforward = 32;
  nn::EncoderOptions rezero = plain;
  rezero.residual = nn::ResidualKind("rezero");
  nn::EncoderOptions dropout = plain;
  dropout.dropout = 0.1f;
  // ReZero: + 2 mul nodes (alpha * f) + 2 linear nodes the plain sum folds into its own.
  CHECK(nodes(rezero, true) == nodes(plain, true) + 4);
  // Dropout in training: + 3 dropout nodes + 2 linear nodes; eval: the plain graph.
  CHECK(nodes(dropout, true) == nodes(plain, true) + 5);
  CHECK(nodes(dropout, false) == nodes(plain, false));
}
