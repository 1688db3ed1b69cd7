#pragma once
// Two failure words named from a run's own diagnostics (train.diagnostics_every; the step records'
// attention_entropy_mean, attention_max_logit and log_z_max_abs, docs/run-directory.md), after
// Wortsman et al. 2023 and Zhai et al. 2023. Pure functions of the records: the outcome rules
// (study/outcome.hpp) decide where in their order the words come.
//
//   attention entropy collapse  some layer's attention entropy (the mean over its heads) fell below
//                               kEntropyCollapseFraction of its value at step 1 (the initial
//                               weights), while its max |attention logit| grew to at least
//                               kLogitGrowthFactor times its step-1 value, and the run did not learn
//                               (held-out accuracy short of "learned": the caller's judgement)
//   logit divergence            the output's largest |log Z| went beyond kLogZBound (a finite value:
//                               a NaN is "diverged", not this)
//
// Each reports the first diagnostics record where it holds, with its evidence.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "normlab/train/records.hpp"

namespace normlab::study {

inline constexpr double kEntropyCollapseFraction = 0.2;  // entropy < 0.2 x its step-1 value
inline constexpr double kLogitGrowthFactor = 5.0;        // max |logit| >= 5 x its step-1 value
inline constexpr double kLogZBound = 30.0;               // |log Z| > 30 (a uniform guess over K classes is ln K)

struct InstabilityThresholds {
  double entropy_fraction = kEntropyCollapseFraction;
  double logit_growth = kLogitGrowthFactor;
  double log_z_bound = kLogZBound;
};

struct EntropyCollapse {
  int64_t step = 0;   // the first diagnostics record where it holds
  int64_t layer = 0;  // the lowest such layer, 0-based (layers.N)
  double entropy = 0, initial_entropy = 0;      // the layer's attention_entropy_mean then and at step 1
  double max_logit = 0, initial_max_logit = 0;  // its attention_max_logit then and at step 1
  std::string evidence() const;  // "layer 2's attention entropy 0.12 nats at step 400, 6% of 1.98 at step 1; max |logit| 41.3, 8.1x ..."
};

struct LogitDivergence {
  int64_t step = 0;
  double log_z_max_abs = 0;
  double bound = kLogZBound;     // the bound it went beyond
  std::string evidence() const;  // "|log Z| reached 45.2 at step 300 (bound 30)"
};

// `records`: the run's step records in step order (those without diagnostics are skipped). None
// when the first diagnostics record is not step 1 (no initial value to compare with: a run from
// before step-1 diagnostics), when the run learned, or when no record meets both conditions.
std::optional<EntropyCollapse> attention_entropy_collapse(const std::vector<train::StepRecord>& records, bool learned,
                                                          const InstabilityThresholds& thresholds = {});
std::optional<LogitDivergence> logit_divergence(const std::vector<train::StepRecord>& records,
                                                const InstabilityThresholds& thresholds = {});

}  // namespace normlab::study
