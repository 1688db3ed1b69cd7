#pragma once
// Learning-rate schedules as a multiplier of the base lr, as a pure function of the step.
#include <cstdint>
#include <string>

namespace normlab::optim {

struct ScheduleOptions {
  std::string name = "constant";  // "constant", "warmup" (linear warmup then constant), "warmup_cosine"
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;  // warmup_cosine reaches min_lr_ratio here
  float min_lr_ratio = 0.0f;
};

// Throws UsageError unless: name is known, warmup_steps >= 0, total_steps >= 1,
// 0 <= min_lr_ratio <= 1.
void check_schedule_options(const ScheduleOptions& s);

// lr multiplier at 0-based step (>= 0):
//   constant:      1
//   warmup:        (step+1)/warmup_steps for step < warmup_steps, then 1
//   warmup_cosine: the same warmup, then min_ratio + (1-min_ratio) * 0.5*(1+cos(pi * progress)),
//                  progress = (step-warmup)/(total-warmup) clamped to [0,1] (1 if total <= warmup).
float lr_factor(const ScheduleOptions& s, int64_t step);

}  // namespace normlab::optim
