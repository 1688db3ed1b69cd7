// A study's ETA, shared by compare's console line and serve's page so that both say the same.
#include "normlab/study/progress.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace normlab::study {

double study_eta_seconds(double busy_seconds, size_t finished, size_t to_run, size_t jobs) {
  if (finished == 0) return NAN;
  const double per_run = busy_seconds / double(finished);
  return per_run * double(to_run > finished ? to_run - finished : 0) / double(std::max<size_t>(1, jobs));
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const int s = int(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

}  // namespace normlab::study
