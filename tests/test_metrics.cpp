// train/metrics: accuracy and per-row loss, the metrics the trainer and evaluation report.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "normlab/tensor.hpp"
#include "normlab/provenance.hpp"
#include "normlab/train/metrics.hpp"
#include "normlab/train/records.hpp"

using namespace normlab;

TEST_CASE("metrics: count_correct counts argmax hits over non-ignored rows, first index among ties") {
  Tensor logits = Tensor::from_data({4, 4}, {
                                                0.1f, 0.9f, 0.2f, 0.0f,   // argmax 1
                                                2.0f, 2.0f, 1.0f, 0.0f,   // tie: first index wins, 0
                                                -1.f, -2.f, -3.f, -0.5f,  // argmax 3
                                                5.0f, 0.0f, 0.0f, 0.0f,   // argmax 0, but ignored
                                            });
  CHECK(train::count_correct(logits, {1, 0, 3, -1}) == 3);
  CHECK(train::count_correct(logits, {1, 1, 2, 0}) == 2);
  CHECK(train::count_correct(logits, {-1, -1, -1, -1}) == 0);
  CHECK_THROWS(train::count_correct(logits, {1, 0}));
}

TEST_CASE("metrics: row_cross_entropy is -log softmax of the target, stable for large logits") {
  const std::vector<float> row = {1.0f, 2.0f, 3.0f};
  const double denominator = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(train::row_cross_entropy(row.data(), 3, 2) ==
        doctest::Approx(-std::log(std::exp(3.0) / denominator)).epsilon(1e-12));
  const std::vector<float> large = {1000.0f, 1000.0f};
  CHECK(train::row_cross_entropy(large.data(), 2, 0) == doctest::Approx(std::log(2.0)).epsilon(1e-12));
}

TEST_CASE("records: summary.json says what produced it - version, CPU, kernels, threads, world size") {
  train::TrainSummary summary;
  summary.threads = 2;
  const nlohmann::json j = train::to_json(summary);
  CHECK(j.at("normlab_version") == NORMLAB_VERSION);
  CHECK(j.at("cpu") == normlab::cpu_model());
  CHECK(j.at("cpu") != "");
  CHECK(j.at("kernels") == normlab::kernels_in_use());
  CHECK((j.at("kernels") == "generic" || j.at("kernels") == "avx2" || j.at("kernels") == "avx512"));
  CHECK(j.at("threads") == 2);
  CHECK(j.at("world_size") == 1);
}
