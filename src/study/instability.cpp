// The failure words from a run's attention and output diagnostics (instability.hpp).
#include "normlab/study/instability.hpp"

#include <fmt/format.h>

#include <cmath>

namespace normlab::study {

std::string EntropyCollapse::evidence() const {
  const double growth = max_logit / initial_max_logit;
  return fmt::format(
      "the attention entropy of layer {} fell from {:.3g} to {:.2g} nats by step {} while its max |logit| "
      "grew {}x ({:.3g} to {:.3g})",
      layer, initial_entropy, entropy, onset,
      growth < 100 ? fmt::format("{:.1f}", growth) : fmt::format("{:.0f}", growth), initial_max_logit, max_logit);
}

std::string LogitDivergence::evidence() const {
  return fmt::format("the output's |log Z| reached {:.4g} by step {} (bound {:g}{})", log_z_max_abs, onset, bound,
                     std::isfinite(initial_log_z_max_abs) ? fmt::format("; {:.3g} at step 1", initial_log_z_max_abs)
                                                          : "");
}

namespace {

// Layer `l` of `record` against `initial`: entropy below the fraction of its step-1 value with the
// max logit grown by the factor. Comparisons are false for NaN: a figure that is not finite is no
// evidence.
bool layer_collapsed(const Diagnostics& record, const Diagnostics& initial, size_t l, const InstabilityThresholds& t) {
  if (l >= record.attention_entropy_mean.size() || l >= record.attention_max_logit.size() ||
      l >= initial.attention_entropy_mean.size() || l >= initial.attention_max_logit.size())
    return false;
  const double entropy = record.attention_entropy_mean[l], start = initial.attention_entropy_mean[l];
  const double logit = record.attention_max_logit[l], start_logit = initial.attention_max_logit[l];
  return start > 0 && entropy < t.entropy_fraction * start && start_logit > 0 &&
         logit >= t.logit_growth * start_logit && std::isfinite(logit) && std::isfinite(start);
}

}  // namespace

std::optional<EntropyCollapse> attention_entropy_collapse(const std::vector<Diagnostics>& records, bool learned,
                                                          const InstabilityThresholds& thresholds) {
  if (learned || records.empty() || records.front().step != 1) return std::nullopt;
  const Diagnostics &initial = records.front(), &last = records.back();
  std::optional<EntropyCollapse> found;
  for (size_t l = 0; l < last.attention_entropy_mean.size(); ++l) {
    if (!layer_collapsed(last, initial, l, thresholds)) continue;
    const double share = last.attention_entropy_mean[l] / initial.attention_entropy_mean[l];
    if (found && !(share < found->entropy / found->initial_entropy)) continue;
    int64_t onset = last.step;
    for (size_t i = records.size(); i-- > 1 && layer_collapsed(records[i], initial, l, thresholds);)
      onset = records[i].step;
    found = EntropyCollapse{last.step,
                            onset,
                            int64_t(l),
                            last.attention_entropy_mean[l],
                            initial.attention_entropy_mean[l],
                            last.attention_max_logit[l],
                            initial.attention_max_logit[l]};
  }
  return found;
}

std::optional<LogitDivergence> logit_divergence(const std::vector<Diagnostics>& records,
                                                const InstabilityThresholds& thresholds) {
  auto beyond = [&](const Diagnostics& d) {
    return std::isfinite(d.log_z_max_abs) && d.log_z_max_abs > thresholds.log_z_bound;
  };
  if (records.empty() || !beyond(records.back())) return std::nullopt;
  int64_t onset = records.back().step;
  for (size_t i = records.size(); i-- > 0 && beyond(records[i]);) onset = records[i].step;
  return LogitDivergence{records.back().step, onset, records.back().log_z_max_abs,
                         records.front().step == 1 ? records.front().log_z_max_abs : NAN, thresholds.log_z_bound};
}

}  // namespace normlab::study
