// The failure words from a run's attention and output diagnostics (study/instability.hpp), just
// inside and just outside each threshold, judged at the last diagnostics record.
#include <doctest/doctest.h>

#include <cmath>

#include "normlab/study/instability.hpp"

using namespace normlab;

namespace {

study::Diagnostics diagnostics(int64_t step, std::vector<double> entropy, std::vector<double> max_logit,
                               double log_z_max_abs = 3.0) {
  study::Diagnostics record;
  record.step = step;
  record.attention_entropy_mean = std::move(entropy);
  record.attention_max_logit = std::move(max_logit);
  record.log_z_max_abs = log_z_max_abs;
  return record;
}

}  // namespace

TEST_CASE("attention entropy collapse: below 0.2x its step-1 entropy with max logit grown 5x at the end, not learned") {
  // Layer 1 starts at entropy 2.0 and max logit 3.0. Just inside: 0.39 < 0.2 * 2 and 15 >= 5 * 3.
  const std::vector<study::Diagnostics> inside = {diagnostics(1, {2.0, 2.0}, {3.0, 3.0}),
                                                  diagnostics(50, {1.9, 1.0}, {4.0, 9.0}),
                                                  diagnostics(100, {1.9, 0.39}, {4.0, 15.0}),
                                                  diagnostics(150, {1.9, 0.1}, {4.0, 30.0})};
  const auto collapse = study::attention_entropy_collapse(inside, false);
  REQUIRE(collapse);
  CHECK(collapse->step == 150);
  CHECK(collapse->onset == 100);
  CHECK(collapse->layer == 1);
  CHECK(collapse->entropy == 0.1);
  CHECK(collapse->initial_entropy == 2.0);
  CHECK(collapse->max_logit == 30.0);
  CHECK(collapse->initial_max_logit == 3.0);
  CHECK(collapse->evidence() ==
        "the attention entropy of layer 1 fell from 2 to 0.1 nats by step 100 while its max |logit| grew 10.0x (3 to "
        "30)");
  // A run that learned is not a failure, whatever its attention did.
  CHECK_FALSE(study::attention_entropy_collapse(inside, true));
  // Just outside, one condition at a time: entropy at 0.4 (= 0.2 x 2, not below); logit at 14.9.
  CHECK_FALSE(
      study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.4}, {15.0})}, false));
  CHECK_FALSE(
      study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.39}, {14.9})}, false));
  CHECK(study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.39}, {15.0})}, false));
  // Judged at the end: a collapse the run recovered from is not how it ended.
  CHECK_FALSE(study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.1}, {30.0}),
                                                 diagnostics(200, {1.5}, {30.0})},
                                                false));
  // Dated from the last time it set in: collapsed at 100, recovered at 200, collapsed from 300 on.
  const auto again =
      study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.1}, {30.0}),
                                         diagnostics(200, {1.5}, {30.0}), diagnostics(300, {0.1}, {30.0}),
                                         diagnostics(400, {0.1}, {30.0})},
                                        false);
  REQUIRE(again);
  CHECK(again->onset == 300);
  // Several layers: the one whose entropy fell furthest relative to its start is named.
  const auto deepest = study::attention_entropy_collapse({diagnostics(1, {2.0, 1.0, 2.0}, {3.0, 3.0, 3.0}),
                                                          diagnostics(100, {0.3, 0.15, 0.2}, {20.0, 20.0, 20.0})},
                                                         false);
  REQUIRE(deepest);
  CHECK(deepest->layer == 2);  // 0.2 / 2.0 = 10% beats layer 1's 15% and layer 0's 15%
  // No step-1 diagnostics (a run from before them): no initial value, no verdict.
  CHECK_FALSE(
      study::attention_entropy_collapse({diagnostics(50, {2.0}, {3.0}), diagnostics(100, {0.1}, {30.0})}, false));
  // Non-finite figures are no evidence.
  CHECK_FALSE(study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.1}, {NAN})}, false));
  CHECK_FALSE(
      study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {NAN}, {30.0})}, false));
  // Records without the attention figures (logged before them) say nothing.
  CHECK_FALSE(study::attention_entropy_collapse({diagnostics(1, {}, {}), diagnostics(100, {}, {})}, false));
  // Stated thresholds can be moved.
  study::InstabilityThresholds loose;
  loose.entropy_fraction = 0.5;
  loose.logit_growth = 2.0;
  CHECK(
      study::attention_entropy_collapse({diagnostics(1, {2.0}, {3.0}), diagnostics(100, {0.9}, {6.0})}, false, loose));
}

TEST_CASE("logit divergence: the output's |log Z| beyond 30 at the end") {
  const auto just_outside =
      study::logit_divergence({diagnostics(1, {2.0}, {3.0}, 3.5), diagnostics(50, {2.0}, {3.0}, 30.0)});
  CHECK_FALSE(just_outside);
  const auto inside = study::logit_divergence(
      {diagnostics(1, {2.0}, {3.0}, 3.5), diagnostics(50, {2.0}, {3.0}, 40.0), diagnostics(100, {2.0}, {3.0}, 12.0),
       diagnostics(150, {2.0}, {3.0}, 30.01), diagnostics(200, {2.0}, {3.0}, 80.0)});
  REQUIRE(inside);
  CHECK(inside->step == 200);
  CHECK(inside->onset == 150);  // beyond the bound from step 150 to the end (step 50's excursion came back)
  CHECK(inside->log_z_max_abs == 80.0);
  CHECK(inside->initial_log_z_max_abs == 3.5);
  CHECK(inside->evidence() == "the output's |log Z| reached 80 by step 150 (bound 30; 3.5 at step 1)");
  // Came back within the bound by the end: not how the run ended.
  CHECK_FALSE(study::logit_divergence(
      {diagnostics(1, {2.0}, {3.0}, 3.5), diagnostics(50, {2.0}, {3.0}, 45.0), diagnostics(100, {2.0}, {3.0}, 29.9)}));
  CHECK_FALSE(study::logit_divergence({diagnostics(1, {2.0}, {3.0}, NAN)}));  // NaN: "diverged", not this
  study::Diagnostics plain;
  plain.step = 1;
  CHECK_FALSE(study::logit_divergence({plain}));  // not logged
  CHECK_FALSE(study::logit_divergence({}));
  // No step-1 record: the evidence gives no starting value.
  const auto late = study::logit_divergence({diagnostics(50, {2.0}, {3.0}, 31.0)});
  REQUIRE(late);
  CHECK(late->evidence() == "the output's |log Z| reached 31 by step 50 (bound 30)");
}
