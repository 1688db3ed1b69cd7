#pragma once
// Learning-rate schedules as a multiplier of the base lr, as a pure function of the step.
#include <cstdint>
#include <string>
#include <utility>

namespace normlab::optim {

// optim.schedule: constant, warmup (linear warmup then constant), warmup_cosine.
enum class ScheduleKind { constant, warmup, warmup_cosine };
inline constexpr std::pair<ScheduleKind, const char*> kScheduleNames[] = {{ScheduleKind::constant, "constant"},
                                                                          {ScheduleKind::warmup, "warmup"},
                                                                          {ScheduleKind::warmup_cosine,
                                                                           "warmup_cosine"}};
std::string to_string(ScheduleKind kind);

struct ScheduleOptions {
  ScheduleKind name = ScheduleKind::constant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;  // warmup_cosine reaches min_lr_ratio here
  float min_lr_ratio = 0.0f;
  // warmup_cosine after a change of total_steps (a resumed run trained longer or shorter): from
  // restart_step on, the cosine runs from restart_factor (the multiplier the old schedule had
  // reached there) down to min_lr_ratio at total_steps, so the lr does not jump. -1: none.
  int64_t restart_step = -1;
  float restart_factor = 1.0f;
};

// Throws UsageError unless: warmup_steps >= 0, total_steps >= 1,
// 0 <= min_lr_ratio <= 1.
void check_schedule_options(const ScheduleOptions& s);

// lr multiplier at 0-based step (>= 0):
//   constant:      1
//   warmup:        (step+1)/warmup_steps for step < warmup_steps, then 1
//   warmup_cosine: the same warmup, then min_ratio + (1-min_ratio) * 0.5*(1+cos(pi * progress)),
//                  progress = (step-warmup)/(total-warmup) clamped to [0,1] (1 if total <= warmup);
//                  from restart_step on: min_ratio + (restart_factor-min_ratio) * 0.5*(1+cos(pi * p)),
//                  p = (step-restart)/(total-restart) clamped to [0,1].
float lr_factor(const ScheduleOptions& s, int64_t step);

// The learning rate of the update at 0-based `step`: base_lr (optim.lr) times lr_factor(), the
// product taken in float32, as the double its shortest decimal form names (shortest.hpp): the value
// a user would write, which the optimizer's double scalars (lr / (1 - beta1^t)) start from and the
// step's record prints. The one place the lr changes type; it is a double from the config on.
double scheduled_lr(const ScheduleOptions& s, double base_lr, int64_t step);

// The schedule `before` continued at `step` under a new total_steps: warmup_cosine past its warmup
// gets a restart at `step` with the multiplier `before` has there; every other schedule (and a step
// still in warmup) does not depend on total_steps and only takes the new total.
ScheduleOptions extend_schedule(const ScheduleOptions& before, int64_t step, int64_t new_total_steps);

}  // namespace normlab::optim
