#include "normlab/optim/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "normlab/error.hpp"
#include "normlab/names.hpp"
#include "normlab/shortest.hpp"

namespace normlab::optim {

std::string to_string(ScheduleKind kind) { return name_in(kScheduleNames, kind); }

void check_schedule_options(const ScheduleOptions& s) {
  if (s.warmup_steps < 0) throw UsageError(fmt::format("schedule: warmup_steps must be >= 0 (got {})", s.warmup_steps));
  if (s.total_steps < 1) throw UsageError(fmt::format("schedule: total_steps must be >= 1 (got {})", s.total_steps));
  if (!(s.min_lr_ratio >= 0.0f && s.min_lr_ratio <= 1.0f))
    throw UsageError(fmt::format("schedule: min_lr_ratio must be in [0, 1] (got {})", s.min_lr_ratio));
}

float lr_factor(const ScheduleOptions& s, int64_t step) {
  check_schedule_options(s);
  if (step < 0) throw UsageError(fmt::format("schedule: step must be >= 0 (got {})", step));
  if (s.name == ScheduleKind::constant) return 1.0f;
  // Step 0 already gets 1/warmup of the lr, and step warmup-1 the full lr, like the usual
  // LambdaLR(lambda step: (step + 1) / warmup).
  if (step < s.warmup_steps)
    return static_cast<float>(static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps));
  if (s.name == ScheduleKind::warmup) return 1.0f;
  const double min_ratio = s.min_lr_ratio;
  if (s.restart_step >= 0 && step >= s.restart_step) {
    const int64_t span = s.total_steps - s.restart_step;
    const double p = span > 0 ? std::clamp(double(step - s.restart_step) / double(span), 0.0, 1.0) : 1.0;
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    return static_cast<float>(min_ratio + (double(s.restart_factor) - min_ratio) * cosine);
  }

  const int64_t decay_steps = s.total_steps - s.warmup_steps;
  double progress = 1.0;
  if (decay_steps > 0) progress = static_cast<double>(step - s.warmup_steps) / static_cast<double>(decay_steps);
  progress = std::clamp(progress, 0.0, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(min_ratio + (1.0 - min_ratio) * cosine);
}

double scheduled_lr(const ScheduleOptions& s, double base_lr, int64_t step) {
  return shortest(static_cast<float>(base_lr) * lr_factor(s, step));
}

ScheduleOptions extend_schedule(const ScheduleOptions& before, int64_t step, int64_t new_total_steps) {
  ScheduleOptions after = before;
  after.total_steps = new_total_steps;
  if (new_total_steps == before.total_steps) return after;
  if (before.name == ScheduleKind::warmup_cosine && step >= before.warmup_steps) {
    after.restart_step = step;
    after.restart_factor = lr_factor(before, step);
  }
  check_schedule_options(after);
  return after;
}

}  // namespace normlab::optim
