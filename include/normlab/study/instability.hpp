#pragma once
// Two failure words named from a run's own diagnostics (train.diagnostics_every; the step records'
// attention_entropy_mean, attention_max_logit and log_z_max_abs, docs/run-directory.md), after
// Wortsman et al. 2023 and Zhai et al. 2023. Pure functions of the records, judged at the last
// diagnostics record (how the run ended, as the other failure words are): the outcome rules
// (study/outcome.hpp) decide where in their order the words come. docs/compare.md gives the
// measurements the thresholds were chosen from.
//
//   attention entropy collapse  some layer's attention entropy (the mean over its heads) is below
//                               kEntropyCollapseFraction of its value at step 1 (the initial
//                               weights), while its max |attention logit| is at least
//                               kLogitGrowthFactor times its step-1 value, and the run did not learn
//                               (held-out accuracy short of "learned": the caller's judgement)
//   logit divergence            the output's largest |log Z| is beyond kLogZBound (a finite value:
//                               a NaN is "diverged", not this)
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "normlab/study/results.hpp"

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
  int64_t step = 0;   // the last diagnostics record, where it is judged
  int64_t onset = 0;  // the first diagnostics step from which it held (for this layer) to the end
  int64_t layer = 0;  // 0-based (layers.N): of the layers where it holds, the lowest entropy / step-1 entropy
  double entropy = 0, initial_entropy = 0;      // the layer's attention_entropy_mean at the end and at step 1
  double max_logit = 0, initial_max_logit = 0;  // its attention_max_logit at the end and at step 1
  // "the attention entropy of layer 2 fell from 1.98 to 0.12 nats by step 150 while its max |logit|
  // grew 8.1x (5.1 to 41.3)"
  std::string evidence() const;
};

struct LogitDivergence {
  int64_t step = 0;                                       // the last diagnostics record
  int64_t onset = 0;                                      // the first diagnostics step from which it held to the end
  double log_z_max_abs = 0, initial_log_z_max_abs = NAN;  // at the end and at step 1 (NaN: no step-1 record)
  double bound = kLogZBound;                              // the bound it is beyond
  std::string evidence() const;  // "the output's |log Z| reached 45.2 by step 300 (bound 30; 2.41 at step 1)"
};

// `records`: the run's diagnostics records in step order. None when the first record is not step 1
// (no initial value to compare with: a run from before step-1 diagnostics), when the run learned,
// or when the last record does not meet both conditions in any layer.
std::optional<EntropyCollapse> attention_entropy_collapse(const std::vector<Diagnostics>& records, bool learned,
                                                          const InstabilityThresholds& thresholds = {});
// None when the last record's |log Z| is within the bound, not finite, or not logged.
std::optional<LogitDivergence> logit_divergence(const std::vector<Diagnostics>& records,
                                                const InstabilityThresholds& thresholds = {});

}  // namespace normlab::study
