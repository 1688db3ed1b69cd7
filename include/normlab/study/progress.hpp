#pragma once
// A study's progress as `normlab compare` prints it and `normlab serve` shows it: runs done of the
// runs to do, and when the rest should be done.
#include <cstddef>
#include <string>

namespace normlab::study {

// Seconds until the runs left are done: a finished run's mean time (busy_seconds / finished) times
// the runs left (to_run - finished), `jobs` at once. NaN before any run has finished.
double study_eta_seconds(double busy_seconds, size_t finished, size_t to_run, size_t jobs);

// "1h02m", "3m05s"; "?" for NaN or a negative time (not known yet).
std::string format_duration(double seconds);

}  // namespace normlab::study
