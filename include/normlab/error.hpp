#pragma once
// Errors. The library never prints and never calls exit(): it throws one of these, and the CLI
// turns it into one line on stderr and an exit code (InputError -> 2).
#include <stdexcept>
#include <string>

namespace normlab {

// Something the user gave us is wrong: a flag, a config key, a data line, a checkpoint, a .npy file.
// The message must name the file and the key / line / tensor, e.g.
//   "configs/x.json: model.d_model: must be divisible by model.heads (got 65 and 4)".
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A programming error or misuse of the library API (shape mismatch between ops, backward through a
// released graph, ...). Still a clean exception, never UB.
class UsageError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace normlab
