// The bag-of-words baseline (train/baseline.hpp) against hand computations, and `normlab baseline`.
#include <doctest/doctest.h>

#include <cmath>

#include "normlab/data/dataset.hpp"
#include "normlab/data/task.hpp"
#include "normlab/train/baseline.hpp"
#include "support.hpp"

using namespace normlab;

namespace {
// Tokens a b c get ids 2 3 4 ([PAD] 0, [UNK] 1); labels neg pos get 0 1.
data::Dataset two_examples() {
  data::Task task = data::make_data_task(data::TaskKind::sequence_classification, {"a", "b", "c"}, {"neg", "pos"});
  return data::Dataset(task, {{{2, 3}, {0}}, {{3, 4}, {1}}});
}
}  // namespace

TEST_CASE("baseline: features are unigram and training-bigram counts scaled to unit L2 norm") {
  const data::Dataset training = two_examples();
  const train::BagOfWords bag(5, training.examples());
  CHECK(bag.num_bigrams() == 2);  // (a b) -> feature 5, (b c) -> feature 6
  CHECK(bag.num_features() == 7);
  // "a b a": a twice, b once, bigram (a b) once; (b a) was never seen in training and is dropped.
  const auto x = bag.features({2, 3, 2});
  REQUIRE(x.size() == 3);
  CHECK(x[0].first == 2);
  CHECK(x[0].second == doctest::Approx(2 / std::sqrt(6.0)).epsilon(1e-15));
  CHECK(x[1].first == 3);
  CHECK(x[1].second == doctest::Approx(1 / std::sqrt(6.0)).epsilon(1e-15));
  CHECK(x[2].first == 5);
  CHECK(x[2].second == doctest::Approx(1 / std::sqrt(6.0)).epsilon(1e-15));
}

TEST_CASE("baseline: the first gradient step and the objective match a hand computation") {
  // At W = 0 both classes have p = 1/2: objective ln 2. The gradient of class 0's row is
  // (1/2) [(1/2 - 1) x1 + (1/2) x2] = (x2 - x1) / 4, x1 = (a, b, ab) / sqrt 3, x2 = (b, c, bc) / sqrt 3;
  // with l2 = 0 the step is 1, so W0 = (x1 - x2) / 4 and W1 = -W0. Then each example's logit margin
  // is 2 * (2 / 3) / 4 = 1/3 for its own class: objective ln(1 + e^(-1/3)).
  std::vector<double> objective;
  const train::BaselineModel model =
      train::fit_baseline(two_examples(), 5, 2, {.iterations = 1, .l2 = 0.0}, &objective);
  REQUIRE(objective.size() == 2);
  CHECK(objective[0] == doctest::Approx(std::log(2.0)).epsilon(1e-15));
  CHECK(objective[1] == doctest::Approx(std::log1p(std::exp(-1.0 / 3))).epsilon(1e-14));
  const double q = 0.25 / std::sqrt(3.0);
  const std::vector<double> w0 = {0, 0, q, 0, -q, q, -q, 0};  // features 0..6, then the bias
  for (size_t f = 0; f < w0.size(); ++f) {
    CHECK(model.weights[f] == doctest::Approx(w0[f]).epsilon(1e-15));
    CHECK(model.weights[w0.size() + f] == doctest::Approx(-w0[f]).epsilon(1e-15));
  }
  CHECK(model.predict({2, 3}) == 0);
  CHECK(model.predict({3, 4}) == 1);
  CHECK(model.predict({3}) == 0);  // a tie goes to the lowest class id
  // More iterations lower the objective monotonically here (a convex problem, step 1/L).
  std::vector<double> longer;
  train::fit_baseline(two_examples(), 5, 2, {.iterations = 50, .l2 = 1e-3}, &longer);
  CHECK(longer.back() < longer[1]);
}

TEST_CASE("baseline: Wilson intervals of known proportions") {
  auto [low, high] = train::wilson_interval(8, 10);
  CHECK(low == doctest::Approx(0.4901624715366418).epsilon(1e-12));
  CHECK(high == doctest::Approx(0.9433178485456248).epsilon(1e-12));
  std::tie(low, high) = train::wilson_interval(0, 5);
  CHECK(low == 0.0);
  CHECK(high == doctest::Approx(0.43448246478317476).epsilon(1e-12));
}

TEST_CASE("baseline: the command fits the sentiment example and refuses a task it cannot fit") {
  test::TempDir dir;
  test::Cli fit =
      test::run_normlab(dir, std::string("baseline --config ") + NORMLAB_SOURCE_DIR "/configs/sentiment.json");
  REQUIRE(fit.code == 0);
  CHECK(fit.out.find("training: 2000 examples (used all 2000 lines), 30 unigrams + 780 bigrams\n") !=
        std::string::npos);
  CHECK(fit.out.find("held-out: 500 examples (used all 500 lines): accuracy 0.9720 [0.9536, 0.9832]") !=
        std::string::npos);
  test::Cli json =
      test::run_normlab(dir, std::string("baseline --json --config ") + NORMLAB_SOURCE_DIR "/configs/sentiment.json");
  REQUIRE(json.code == 0);
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  CHECK(parsed["valid_examples"] == 500);
  CHECK(parsed["accuracy"].get<double>() == doctest::Approx(0.972).epsilon(1e-12));
  CHECK(parsed["classes"].size() == 3);
  test::Cli reverse =
      test::run_normlab(dir, std::string("baseline --config ") + NORMLAB_SOURCE_DIR "/configs/reverse.json");
  CHECK(reverse.code == 2);
  CHECK(reverse.err.find("task.name: the baseline is a bag-of-words sequence classifier") != std::string::npos);
  test::Cli bad = test::run_normlab(dir, std::string("baseline --iterations 0 --config ") + NORMLAB_SOURCE_DIR
                                             "/configs/sentiment.json");
  CHECK(bad.code == 2);
  CHECK(bad.err == "normlab: error: --iterations: must be between 1 and 100000 (got 0)\n");
}
