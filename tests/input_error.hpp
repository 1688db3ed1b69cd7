#pragma once
// The message of the InputError an action throws: for tests of what a bad input is told.
#include <functional>
#include <string>

#include "normlab/error.hpp"

namespace normlab::test {

// The InputError's message, or "" when `action` throws none.
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace normlab::test
