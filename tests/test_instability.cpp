// The failure words from a run's diagnostics (study/instability.hpp), just inside and just outside
// each threshold.
#include <doctest/doctest.h>

#include "normlab/study/instability.hpp"

using namespace normlab;

namespace {

train::StepRecord diagnostics(int64_t step, std::vector<double> entropy, std::vector<double> max_logit,
                              double log_z_max_abs = 3.0) {
  train::StepRecord record;
  record.step = step;
  record.attention_entropy_mean = std::move(entropy);
  record.attention_max_logit = std::move(max_logit);
  record.log_z_max_abs = log_z_max_abs;
  return record;
}

train::StepRecord plain(int64_t step) {
  train::StepRecord record;
  record.step = step;
  return record;
}

}  // namespace

TEST_CASE("attention entropy collapse: below 0.2x its step-1 entropy with max logit grown 5x, not learned") {
  // Layer 1 starts at entropy 2.0 and max logit 3.0. Just inside: 0.39 < 0.2 * 2 and 15 >= 5 * 3.
  const std::vector<train::StepRecord> inside = {diagnostics(1, {2.0, 2.0}, {3.0, 3.0}), plain(2),
                                                 diagnostics(50, {1.9, 1.0}, {4.0, 9.0}),
                                                 diagnostics(100, {1.9, 0.39}, {4.0, 15.0})};
  const auto collapse = study::attention_entropy_collapse(inside, false);
  REQUIRE(collapse);
  CHECK(collapse->step == 100);
  CHECK(collapse->layer == 1);
  CHECK(collapse->entropy == 0.39);
  CHECK(collapse->initial_entropy == 2.0);
  CHECK(collapse->max_logit == 15.0);
  CHECK(collapse->initial_max_logit == 3.0);
  CHECK(collapse->evidence() ==
        "layer 1's attention entropy 0.39 nats at step 100, 20% of 2 at step 1; its max |logit| 15, 5.0x its 3 at step 1");
  // A run that learned is not a failure, whatever its attention did.
  CHECK_FALSE(study::attention_entropy_collapse(inside, true));
  // Just outside, one condition at a time: entropy at 0.4 (= 0.2 x 2, not below); logit at 14.9.
  CHECK_FALSE(study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.4}, {15.0})}, false));
  CHECK_FALSE(study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.39}, {14.9})}, false));
  // No step-1 diagnostics (a run from before them): no initial value, no verdict.
  CHECK_FALSE(study::attention_entropy_collapse({diagnostics(50, {2.0}, {3.0}), diagnostics(100, {0.1}, {30.0})}, false));
  // Non-finite figures are no evidence.
  CHECK_FALSE(study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.1}, {NAN})}, false));
  // Stated thresholds can be moved.
  study::InstabilityThresholds loose;
  loose.entropy_fraction = 0.5;
  loose.logit_growth = 2.0;
  CHECK(study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.9}, {6.0})}, false, loose));
}

TEST_CASE("logit divergence: the output's |log Z| beyond 30") {
  const auto just_outside = study::logit_divergence({diagnostics(1, {2.0}, {3.0}, 3.5), diagnostics(50, {2.0}, {3.0}, 30.0)});
  CHECK_FALSE(just_outside);
  const auto inside = study::logit_divergence(
      {diagnostics(1, {2.0}, {3.0}, 3.5), plain(2), diagnostics(50, {2.0}, {3.0}, 30.01), diagnostics(100, {2.0}, {3.0}, 80.0)});
  REQUIRE(inside);
  CHECK(inside->step == 50);
  CHECK(inside->log_z_max_abs == 30.01);
  CHECK(inside->evidence() == "the output's |log Z| reached 30.01 at step 50 (bound 30)");
  CHECK_FALSE(study::logit_divergence({diagnostics(1, {2.0}, {3.0}, NAN)}));  // NaN: "diverged", not this
  CHECK_FALSE(study::logit_divergence({plain(1), plain(2)}));                  // no diagnostics at all
}
