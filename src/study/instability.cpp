#include "normlab/study/instability.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace normlab::study {

std::string EntropyCollapse::evidence() const {
  return fmt::format("layer {}'s attention entropy {:.3g} nats at step {}, {:.0f}% of {:.3g} at step 1; its max |logit| "
                     "{:.3g}, {:.1f}x its {:.3g} at step 1",
                     layer, entropy, step, 100.0 * entropy / initial_entropy, initial_entropy, max_logit,
                     max_logit / initial_max_logit, initial_max_logit);
}

std::string LogitDivergence::evidence() const {
  return fmt::format("the output's |log Z| reached {:.4g} at step {} (bound {:g})", log_z_max_abs, step, bound);
}

std::optional<EntropyCollapse> attention_entropy_collapse(const std::vector<train::StepRecord>& records, bool learned,
                                                          const InstabilityThresholds& thresholds) {
  if (learned) return std::nullopt;
  const train::StepRecord* initial = nullptr;
  for (const train::StepRecord& record : records) {
    if (record.attention_entropy_mean.empty() || record.attention_max_logit.empty()) continue;
    if (!initial) {
      if (record.step != 1) return std::nullopt;  // no step-1 diagnostics to compare with
      initial = &record;
      continue;
    }
    const size_t layers = std::min({record.attention_entropy_mean.size(), record.attention_max_logit.size(),
                                    initial->attention_entropy_mean.size(), initial->attention_max_logit.size()});
    for (size_t l = 0; l < layers; ++l) {
      const double entropy = record.attention_entropy_mean[l], start = initial->attention_entropy_mean[l];
      const double logit = record.attention_max_logit[l], start_logit = initial->attention_max_logit[l];
      // Comparisons false for NaN: a record whose figures are not finite is no evidence.
      if (start > 0 && entropy < thresholds.entropy_fraction * start && start_logit > 0 &&
          logit >= thresholds.logit_growth * start_logit && std::isfinite(logit))
        return EntropyCollapse{record.step, int64_t(l), entropy, start, logit, start_logit};
    }
  }
  return std::nullopt;
}

std::optional<LogitDivergence> logit_divergence(const std::vector<train::StepRecord>& records,
                                                const InstabilityThresholds& thresholds) {
  for (const train::StepRecord& record : records) {
    if (!record.log_z_max_abs) continue;
    const double value = *record.log_z_max_abs;
    if (std::isfinite(value) && value > thresholds.log_z_bound) return LogitDivergence{record.step, value, thresholds.log_z_bound};
  }
  return std::nullopt;
}

}  // namespace normlab::study
