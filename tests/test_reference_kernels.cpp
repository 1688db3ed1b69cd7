// The reference kernels (kernels/reference/): the fast kernels agree with them, NORMLAB_KERNELS
// switches every op and the optimizer to them, a short training run ends where the fast kernels'
// does, and they are compiled so a debugger can step through them. (LayerNorm, RMSNorm and
// BatchNorm are compared in test_layer_norm_kernels.cpp and test_norm_kernels.cpp.)
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/kernels/activations.hpp"
#include "normlab/kernels/attention.hpp"
#include "normlab/kernels/cross_entropy.hpp"
#include "normlab/kernels/embedding.hpp"
#include "normlab/kernels/dropout.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/kernels/matmul.hpp"
#include "normlab/kernels/reference/activations.hpp"
#include "normlab/kernels/reference/adam.hpp"
#include "normlab/kernels/reference/attention.hpp"
#include "normlab/kernels/reference/cross_entropy.hpp"
#include "normlab/kernels/reference/embedding.hpp"
#include "normlab/kernels/reference/dropout.hpp"
#include "normlab/kernels/reference/layer_norm.hpp"
#include "normlab/kernels/reference/matmul.hpp"
#include "normlab/kernels/reference/mode.hpp"
#include "normlab/kernels/reference/softmax.hpp"
#include "normlab/kernels/softmax.hpp"
#include "normlab/nn/module.hpp"
#include "normlab/ops.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/rng.hpp"
#include "isa_support.hpp"
#include "support.hpp"

namespace nk = normlab::kernels;
namespace ref = normlab::kernels::reference;
using normlab::Tensor;

using normlab::test::relative_max_error;

namespace {

std::vector<float> normals(uint64_t seed, size_t n, float stddev = 1.0f) {
  normlab::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal(0.0f, stddev);
  return v;
}

// Sets an environment variable for one scope and restores what was there.
struct ScopedEnv {
  const char* name;
  std::optional<std::string> saved;
  ScopedEnv(const char* variable, const char* value) : name(variable) {
    if (const char* old = std::getenv(name)) saved = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved) ::setenv(name, saved->c_str(), 1);
    else ::unsetenv(name);
  }
};

// Runs "reference" or "fast" (the best fast path) kernels until the end of scope.
struct KernelsEnv : normlab::test::ScopedIsa {
  explicit KernelsEnv(const char* kernels)
      : ScopedIsa(std::string(kernels) == "reference" ? normlab::kernels::Isa::reference
                                                      : normlab::kernels::best_isa()) {}
};

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets(lengths.size() + 1, 0);
  for (size_t b = 0; b < lengths.size(); b++) offsets[b + 1] = offsets[b] + lengths[b];
  return offsets;
}

}  // namespace

TEST_CASE("reference kernels: one entry of the dispatch, chosen by NORMLAB_ISA or NORMLAB_KERNELS") {
  using normlab::kernels::Isa;
  using normlab::kernels::isa_from_environment;
  {
    ScopedEnv isa("NORMLAB_ISA", nullptr), kernels("NORMLAB_KERNELS", nullptr);
    CHECK(isa_from_environment() == normlab::kernels::best_isa());
  }
  {
    ScopedEnv isa("NORMLAB_ISA", nullptr), kernels("NORMLAB_KERNELS", "fast");
    CHECK(isa_from_environment() == normlab::kernels::best_isa());
  }
  {
    ScopedEnv isa("NORMLAB_ISA", "reference"), kernels("NORMLAB_KERNELS", nullptr);
    CHECK(isa_from_environment() == Isa::reference);
  }
  {
    ScopedEnv isa("NORMLAB_ISA", nullptr), kernels("NORMLAB_KERNELS", "reference");
    CHECK(isa_from_environment() == Isa::reference);
  }
  {
    ScopedEnv isa("NORMLAB_ISA", "generic"), kernels("NORMLAB_KERNELS", "reference");
    CHECK_THROWS_WITH_AS(isa_from_environment(), doctest::Contains("two different kernel paths"), normlab::InputError);
  }
  {
    ScopedEnv isa("NORMLAB_ISA", nullptr), kernels("NORMLAB_KERNELS", "refrence");
    try {
      isa_from_environment();
      FAIL("no error for NORMLAB_KERNELS=refrence");
    } catch (const normlab::InputError& e) {
      CHECK(std::string(e.what()).find("NORMLAB_KERNELS") != std::string::npos);
      CHECK(std::string(e.what()).find("refrence") != std::string::npos);
    }
  }
  // Set in a test, the reference path is what every public kernel runs: the same numbers as
  // calling the reference build by name.
  const Isa before = normlab::kernels::active_isa();
  normlab::kernels::set_active_isa(Isa::reference);
  std::vector<float> x = {1.0f, 2.0f, 4.0f, -3.0f}, y_public(4), y_ref(4);
  nk::layer_norm_forward(y_public.data(), nullptr, nullptr, x.data(), nullptr, nullptr, 1, 4, 1e-5f);
  ref::layer_norm_forward(y_ref.data(), nullptr, nullptr, x.data(), nullptr, nullptr, 1, 4, 1e-5f);
  normlab::kernels::set_active_isa(before);
  CHECK(y_public == y_ref);
}

TEST_CASE("reference kernels: fast softmax, gelu, relu and cross-entropy agree with them") {
  const int64_t rows = 7, cols = 13;
  const size_t n = size_t(rows * cols);
  std::vector<float> x = normals(1, n, 3.0f), dout = normals(2, n);
  x[0] = 80.0f;  // large values: both must stay finite
  auto run = [&](auto forward, auto backward, bool needs_y) {
    std::vector<float> y(n), dx(n, 0.5f);
    forward(y.data(), x.data(), int64_t(n));
    backward(dx.data(), dout.data(), needs_y ? y.data() : x.data(), int64_t(n));
    return std::make_pair(y, dx);
  };
  SUBCASE("softmax") {
    std::vector<float> y_fast(n), y_ref(n), dx_fast(n, 0.5f), dx_ref(n, 0.5f);
    nk::softmax_forward(y_fast.data(), x.data(), rows, cols);
    ref::softmax_forward(y_ref.data(), x.data(), rows, cols);
    nk::softmax_backward(dx_fast.data(), dout.data(), y_fast.data(), rows, cols);
    ref::softmax_backward(dx_ref.data(), dout.data(), y_ref.data(), rows, cols);
    CHECK(relative_max_error(y_fast, y_ref) <= 1e-6);
    CHECK(relative_max_error(dx_fast, dx_ref) <= 1e-5);
  }
  SUBCASE("gelu and relu") {
    auto [y_fast, dx_fast] = run(nk::gelu_forward, nk::gelu_backward, false);
    auto [y_ref, dx_ref] = run(ref::gelu_forward, ref::gelu_backward, false);
    CHECK(relative_max_error(y_fast, y_ref) <= 1e-6);
    CHECK(relative_max_error(dx_fast, dx_ref) <= 1e-5);
    auto [r_fast, dr_fast] = run(nk::relu_forward, nk::relu_backward, false);
    auto [r_ref, dr_ref] = run(ref::relu_forward, ref::relu_backward, false);
    CHECK(r_fast == r_ref);
    CHECK(dr_fast == dr_ref);
  }
  SUBCASE("cross-entropy with an ignored row") {
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; r++) targets[size_t(r)] = int32_t((r * 5) % cols);
    targets[2] = -1;
    std::vector<float> losses_fast(static_cast<size_t>(rows)), losses_ref(static_cast<size_t>(rows));
    std::vector<float> probs_fast(n), probs_ref(n);
    const float loss_fast =
        nk::cross_entropy_forward(losses_fast.data(), probs_fast.data(), x.data(), targets.data(), rows, cols);
    const float loss_ref =
        ref::cross_entropy_forward(losses_ref.data(), probs_ref.data(), x.data(), targets.data(), rows, cols);
    CHECK(loss_fast == doctest::Approx(loss_ref).epsilon(1e-6));
    CHECK(relative_max_error(losses_fast, losses_ref) <= 1e-5);
    CHECK(relative_max_error(probs_fast, probs_ref) <= 1e-6);
    std::vector<float> dz_fast(n, 0.25f), dz_ref(n, 0.25f);
    nk::cross_entropy_backward(dz_fast.data(), probs_fast.data(), targets.data(), rows, cols, 1.5f);
    ref::cross_entropy_backward(dz_ref.data(), probs_ref.data(), targets.data(), rows, cols, 1.5f);
    CHECK(relative_max_error(dz_fast, dz_ref) <= 1e-6);
    targets[0] = int32_t(cols);
    CHECK_THROWS_AS(ref::cross_entropy_forward(losses_ref.data(), probs_ref.data(), x.data(), targets.data(), rows,
                                               cols),
                    normlab::UsageError);
  }
}

TEST_CASE("reference kernels: fast dropout, embedding and DyT agree with them") {
  SUBCASE("dropout: the same mask bit for bit (it is a function of the coordinates), forward and backward") {
    const std::vector<int64_t> offsets = offsets_of({3, 7, 1});
    const int64_t B = 3, C = 9, n = offsets[B] * C;
    const std::vector<float> x = normals(30, size_t(n)), dout = normals(31, size_t(n));
    for (float p : {0.0f, 0.3f, 1.0f}) {
      INFO("p = " << p);
      const size_t size = size_t(n);
      std::vector<float> y_fast(size), m_fast(size), y_ref(size), m_ref(size);
      nk::dropout_forward(y_fast.data(), m_fast.data(), x.data(), offsets.data(), B, C, p, 77, 5);
      ref::dropout_forward(y_ref.data(), m_ref.data(), x.data(), offsets.data(), B, C, p, 77, 5);
      CHECK(m_fast == m_ref);
      CHECK(y_fast == y_ref);
      std::vector<float> dx_fast(size, 0.25f), dx_ref(size, 0.25f);
      nk::dropout_backward(dx_fast.data(), dout.data(), m_fast.data(), n);
      ref::dropout_backward(dx_ref.data(), dout.data(), m_ref.data(), n);
      CHECK(dx_fast == dx_ref);
    }
    std::vector<float> y(static_cast<size_t>(n)), m(static_cast<size_t>(n));
    CHECK_THROWS_AS(ref::dropout_forward(y.data(), m.data(), x.data(), offsets.data(), B, C, 1.5f, 77, 5),
                    normlab::UsageError);
  }
  SUBCASE("embedding: rows copied and gradients summed in token order; a bad id is refused") {
    const int64_t V = 6, C = 5, N = 8;
    const std::vector<int32_t> ids = {0, 5, 2, 2, 4, 0, 2, 1};
    const std::vector<float> w = normals(32, size_t(V * C)), dout = normals(33, size_t(N * C));
    std::vector<float> y_fast(size_t(N * C)), y_ref(size_t(N * C));
    nk::embedding_forward(y_fast.data(), ids.data(), w.data(), N, V, C);
    ref::embedding_forward(y_ref.data(), ids.data(), w.data(), N, V, C);
    CHECK(y_fast == y_ref);
    std::vector<float> dw_fast(size_t(V * C), 0.5f), dw_ref(size_t(V * C), 0.5f);
    nk::embedding_backward(dw_fast.data(), dout.data(), ids.data(), N, V, C);
    ref::embedding_backward(dw_ref.data(), dout.data(), ids.data(), N, V, C);
    CHECK(dw_fast == dw_ref);
    const std::vector<int32_t> bad = {0, 6};
    CHECK_THROWS_WITH_AS(ref::embedding_forward(y_ref.data(), bad.data(), w.data(), 2, V, C),
                         doctest::Contains("token id 6 at position 1 is outside the vocabulary [0, 6)"),
                         normlab::UsageError);
  }
  SUBCASE("DyT: forward, input and parameter gradients within float rounding") {
    const int64_t N = 11, C = 13;
    const std::vector<float> x = normals(34, size_t(N * C), 2.0f), dout = normals(35, size_t(N * C));
    const std::vector<float> gamma = normals(36, size_t(C)), beta = normals(37, size_t(C));
    const float alpha = 0.7f;
    std::vector<float> y_fast(size_t(N * C)), y_ref(size_t(N * C));
    nk::dyt_forward(y_fast.data(), x.data(), &alpha, gamma.data(), beta.data(), N, C);
    ref::dyt_forward(y_ref.data(), x.data(), &alpha, gamma.data(), beta.data(), N, C);
    CHECK(relative_max_error(y_fast, y_ref) <= 1e-6);
    std::vector<float> dx_fast(size_t(N * C), 0.0f), dx_ref(size_t(N * C), 0.0f);
    std::vector<float> dg_fast(size_t(C), 0.0f), dg_ref(size_t(C), 0.0f), db_fast(size_t(C), 0.0f),
        db_ref(size_t(C), 0.0f), da_fast(1, 0.0f), da_ref(1, 0.0f);
    nk::dyt_backward(dx_fast.data(), da_fast.data(), dg_fast.data(), db_fast.data(), dout.data(), x.data(), &alpha,
                     gamma.data(), N, C);
    ref::dyt_backward(dx_ref.data(), da_ref.data(), dg_ref.data(), db_ref.data(), dout.data(), x.data(), &alpha,
                      gamma.data(), N, C);
    CHECK(relative_max_error(dx_fast, dx_ref) <= 1e-5);
    CHECK(relative_max_error(dg_fast, dg_ref) <= 1e-5);
    CHECK(relative_max_error(db_fast, db_ref) <= 1e-5);
    CHECK(relative_max_error(da_fast, da_ref) <= 1e-5);
  }
}

TEST_CASE("reference kernels: the fast GEMM layouts and Linear agree with them") {
  const int64_t M = 37, K = 300, N = 45;  // K beyond one 256 block of the fast GEMM
  const std::vector<float> A = normals(3, size_t(M * K)), B = normals(4, size_t(K * N));
  const std::vector<float> C0 = normals(5, size_t(M * N));
  for (bool accumulate : {false, true}) {
    INFO("accumulate " << accumulate);
    std::vector<float> c_fast = C0, c_ref = C0;
    nk::matmul_nn(c_fast.data(), A.data(), B.data(), M, K, N, accumulate);
    ref::matmul_nn(c_ref.data(), A.data(), B.data(), M, K, N, accumulate, false);
    CHECK(relative_max_error(c_fast, c_ref) <= 1e-5);
    // The same buffers read as B^T (N,K) and A^T (K,M).
    c_fast = C0, c_ref = C0;
    nk::matmul_nt(c_fast.data(), A.data(), B.data(), M, K, N, accumulate);
    ref::matmul_nt(c_ref.data(), A.data(), B.data(), M, K, N, accumulate, false);
    CHECK(relative_max_error(c_fast, c_ref) <= 1e-5);
    c_fast = C0, c_ref = C0;
    nk::matmul_tn(c_fast.data(), A.data(), B.data(), M, K, N, accumulate);
    ref::matmul_tn(c_ref.data(), A.data(), B.data(), M, K, N, accumulate, false);
    CHECK(relative_max_error(c_fast, c_ref) <= 1e-5);
  }

  const int64_t tokens = 29, C = 40, OC = 24;
  const std::vector<float> inp = normals(6, size_t(tokens * C)), weight = normals(7, size_t(OC * C));
  const std::vector<float> bias = normals(8, size_t(OC)), dout = normals(9, size_t(tokens * OC));
  std::vector<float> out_fast(size_t(tokens * OC)), out_ref(size_t(tokens * OC));
  nk::linear_forward(out_fast.data(), inp.data(), weight.data(), bias.data(), tokens, C, OC);
  ref::linear_forward(out_ref.data(), inp.data(), weight.data(), bias.data(), tokens, C, OC);
  CHECK(relative_max_error(out_fast, out_ref) <= 1e-5);
  std::vector<float> dinp_fast(inp.size(), 1.0f), dinp_ref(inp.size(), 1.0f);
  std::vector<float> dw_fast(weight.size(), -1.0f), dw_ref(weight.size(), -1.0f);
  std::vector<float> db_fast(bias.size(), 2.0f), db_ref(bias.size(), 2.0f);
  nk::linear_backward(dinp_fast.data(), dw_fast.data(), db_fast.data(), dout.data(), inp.data(), weight.data(), tokens,
                      C, OC);
  ref::linear_backward(dinp_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), inp.data(), weight.data(), tokens, C,
                       OC);
  CHECK(relative_max_error(dinp_fast, dinp_ref) <= 1e-5);
  CHECK(relative_max_error(dw_fast, dw_ref) <= 1e-5);
  CHECK(relative_max_error(db_fast, db_ref) <= 1e-5);
}

TEST_CASE("reference kernels: fast packed attention agrees with them") {
  // The caches differ by design: the reference keeps every (len, len) probability matrix, the fast
  // kernel two statistics per row (it recomputes the probabilities in the backward).
  const std::vector<int64_t> offsets = offsets_of({5, 1, 0, 9, 3, 70});
  const int64_t B = 6, C = 16, NH = 4, T = offsets.back();
  const std::vector<float> qkv = normals(10, size_t(T * 3 * C)), dout = normals(11, size_t(T * C));
  std::vector<float> out_fast(size_t(T * C)), out_ref(size_t(T * C));
  std::vector<float> att_fast(size_t(nk::attention_cache_size(offsets.data(), B, NH)));
  std::vector<float> att_ref(size_t(ref::attention_cache_size(offsets.data(), B, NH)));
  CHECK(att_ref.size() == size_t(NH * (25 + 1 + 0 + 81 + 9 + 4900)));
  nk::attention_forward(out_fast.data(), att_fast.data(), qkv.data(), offsets.data(), B, C, NH);
  ref::attention_forward(out_ref.data(), att_ref.data(), qkv.data(), offsets.data(), B, C, NH);
  CHECK(relative_max_error(out_fast, out_ref) <= 1e-5);
  std::vector<float> out_no_cache(size_t(T * C));
  ref::attention_forward(out_no_cache.data(), nullptr, qkv.data(), offsets.data(), B, C, NH);
  CHECK(out_no_cache == out_ref);
  std::vector<float> dqkv_fast(qkv.size(), 0.5f), dqkv_ref(qkv.size(), 0.5f);
  nk::attention_backward(dqkv_fast.data(), dout.data(), qkv.data(), att_fast.data(), offsets.data(), B, C, NH);
  ref::attention_backward(dqkv_ref.data(), dout.data(), qkv.data(), att_ref.data(), offsets.data(), B, C, NH);
  CHECK(relative_max_error(dqkv_fast, dqkv_ref) <= 1e-5);
}

TEST_CASE("reference kernels: Adam and AdamW steps on the reference path give the fast loop's bits") {
  for (normlab::optim::OptimizerKind name :
       {normlab::optim::OptimizerKind::adam, normlab::optim::OptimizerKind::adamw}) {
    INFO(normlab::optim::to_string(name));
    normlab::optim::OptimizerOptions options;
    options.name = name;
    options.weight_decay = 0.1f;
    auto make_params = [] {
      normlab::Rng rng(12);
      return normlab::nn::NamedTensors{{"linear1.weight", Tensor::normal({6, 5}, rng)},
                                       {"linear1.bias", Tensor::normal({6}, rng)}};
    };
    auto train = [&](const char* kernels) {
      KernelsEnv env(kernels);
      normlab::nn::NamedTensors params = make_params();
      normlab::optim::Optimizer optimizer(options, params);
      for (int step = 0; step < 5; step++) {
        for (auto& [pname, p] : params) {
          const std::vector<float> g = normals(uint64_t(100 + step), size_t(p.numel()));
          std::copy(g.begin(), g.end(), p.grad_data());
        }
        optimizer.step(0.01);
      }
      std::vector<float> all;
      for (auto& [pname, p] : params) {
        const std::vector<float> v = p.to_vector();
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    };
    const std::vector<float> fast = train("fast"), reference = train("reference"), start = [&] {
      std::vector<float> all;
      for (auto& [pname, p] : make_params()) {
        const std::vector<float> v = p.to_vector();
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    }();
    CHECK(fast == reference);                       // one dispatched loop, the same float operations on every path
    CHECK(relative_max_error(fast, start) > 1e-3);  // the steps did move the parameters
  }
}

TEST_CASE("reference kernels: a short training run ends within 1e-3 of the fast kernels, and --version says so") {
  normlab::test::TempDir dir;
  const std::string config = dir.write("tiny.json", R"({
  "model": {"d_model": 16, "heads": 2, "layers": 2, "ffn": 32, "max_len": 16, "activation": "gelu"},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 8, "eval_examples": 32, "bucket_width": 4},
  "optim": {"lr": 0.003, "warmup_steps": 2},
  "train": {"steps": 20, "batch_size": 8, "eval_every": 20, "log_every": 10, "threads": 1}
})");
  auto run = [&](const std::string& env, const std::string& args) {
    const std::string out = dir.sub("stdout.txt"), err = dir.sub("stderr.txt");
    const std::string command = env + " \"" + NORMLAB_BINARY + "\" " + args + " >\"" + out + "\" 2>\"" + err + "\"";
    const int status = std::system(command.c_str());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                          normlab::test::read_text(out) + normlab::test::read_text(err));
  };
  auto final_losses = [&](const std::string& env, const std::string& run_dir) {
    auto [code, output] = run(env, "train --config " + config + " --out " + run_dir);
    INFO(output);
    REQUIRE(code == 0);
    const auto summary = nlohmann::json::parse(normlab::test::read_text(run_dir + "/summary.json"));
    return std::make_pair(summary["final_train"]["loss"].get<double>(), summary["final_valid"]["loss"].get<double>());
  };
  const auto [train_fast, valid_fast] = final_losses("NORMLAB_KERNELS=fast", dir.sub("fast"));
  const auto [train_ref, valid_ref] = final_losses("NORMLAB_KERNELS=reference", dir.sub("reference"));
  CHECK(std::fabs(train_ref - train_fast) <= 1e-3 * std::fabs(train_fast));
  CHECK(std::fabs(valid_ref - valid_fast) <= 1e-3 * std::fabs(valid_fast));

  CHECK(run("NORMLAB_KERNELS=reference", "--version").second.find("kernels: reference") != std::string::npos);
  CHECK(run("NORMLAB_ISA=reference", "--version").second.find("kernels: reference") != std::string::npos);
  CHECK(run("NORMLAB_KERNELS=fast", "--version").second.find("kernels: reference") == std::string::npos);
  auto [code, output] = run("NORMLAB_KERNELS=slow", "--version");
  CHECK(code == 2);
  CHECK(output.find("NORMLAB_KERNELS") != std::string::npos);
}

TEST_CASE("reference kernels: compiled with debug info and little optimization in every build") {
  // A learner steps through them in gdb without reconfiguring: CMakeLists.txt gives their sources
  // -O0 -g after the build type's flags, and the compile commands show it.
  std::ifstream file(std::string(NORMLAB_BINARY_DIR) + "/compile_commands.json");
  REQUIRE(file.good());
  const auto commands = nlohmann::json::parse(file);
  int reference_sources = 0;
  for (const auto& entry : commands) {
    const std::string path = entry["file"].get<std::string>();
    if (path.find("src/kernels/reference/") == std::string::npos) continue;
    reference_sources++;
    INFO(path);
    const std::string command = entry["command"].get<std::string>();
    const size_t last_opt = command.rfind(" -O");
    REQUIRE(last_opt != std::string::npos);
    CHECK(command.substr(last_opt, 5) == " -O0 ");
    CHECK(command.find(" -g ") != std::string::npos);
  }
  CHECK(reference_sources >= 9);
}

TEST_CASE("reference kernels: the reference path routes the ops to them, bit for bit") {
  normlab::Rng rng(21);
  const Tensor x = Tensor::normal({5, 12}, rng), gamma = Tensor::normal({12}, rng), beta = Tensor::normal({12}, rng);
  const Tensor w = Tensor::normal({12, 7}, rng);
  auto run_ops = [&](const char* kernels) {
    KernelsEnv env(kernels);
    return std::vector<std::vector<float>>{normlab::ops::layer_norm(x, {12}, gamma, beta, 1e-5f).to_vector(),
                                           normlab::ops::softmax(x).to_vector(), normlab::ops::matmul(x, w).to_vector(),
                                           normlab::ops::gelu(x).to_vector()};
  };
  auto direct = [&](bool reference) {
    std::vector<std::vector<float>> out(4);
    const int64_t N = 5, C = 12;
    for (auto& v : out) v.resize(size_t(N * C));
    out[2].resize(size_t(N * 7));
    if (reference) {
      ref::layer_norm_forward(out[0].data(), nullptr, nullptr, x.data(), gamma.data(), beta.data(), N, C, 1e-5f);
      ref::softmax_forward(out[1].data(), x.data(), N, C);
      ref::matmul_nn(out[2].data(), x.data(), w.data(), N, C, 7, false, false);
      ref::gelu_forward(out[3].data(), x.data(), N * C);
    } else {
      nk::layer_norm_forward(out[0].data(), nullptr, nullptr, x.data(), gamma.data(), beta.data(), N, C, 1e-5f);
      nk::softmax_forward(out[1].data(), x.data(), N, C);
      nk::matmul_nn(out[2].data(), x.data(), w.data(), N, C, 7, false);
      nk::gelu_forward(out[3].data(), x.data(), N * C);
    }
    return out;
  };
  REQUIRE(direct(true) != direct(false));  // the two families round differently: routing shows
  CHECK(run_ops("reference") == direct(true));
  CHECK(run_ops("fast") == direct(false));
}
