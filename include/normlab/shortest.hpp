#pragma once
// A float as the double its shortest decimal form names: 0.001f -> 0.001, not
// 0.0010000000474974513. Records print the learning rate and loss a user would write, and the
// optimizers do their double scalar math (1 - beta1, lr / bias_correction) on the value the config
// file meant, as PyTorch does on Python doubles such as 0.9 (on 0.899999976 it would differ by ~2e-7
// relative before any state is touched). A pure function of the float, so the bits reproduce.
// std::to_chars, not fmt: both give the shortest digits, but from 2^25 up, where the fixed form is
// the shorter, to_chars writes a float's exact integer (33742552, fmt "33742550"); the records'
// large losses keep their values that way, and every optimizer input (at most 10) is unaffected.
#include <charconv>
#include <cmath>

namespace normlab {

inline double shortest(float value) {
  if (!std::isfinite(value)) return double(value);
  char text[32];  // the longest float form, "-1.17549435e-38", is 15 characters
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  (void)error;
  double result = double(value);
  std::from_chars(text, end, result);  // the nearest double to the decimal, as strtod gives it
  return result;
}

}  // namespace normlab
