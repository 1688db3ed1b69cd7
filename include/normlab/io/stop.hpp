#pragma once
// Stop requests (SIGINT / SIGTERM, or a caller's own flag) reach every long loop: data loading,
// example generation, batching, evaluation and training. A signal handler stores the signal number
// in a lock-free std::atomic<int>; the loops poll it. The training loop stops at a step boundary
// and checkpoints; everything else throws StopRequested, which unwinds to the CLI (exit 128 +
// signal) without writing anything half-done.
#include <atomic>
#include <exception>

namespace normlab::io {

using StopFlag = const std::atomic<int>*;  // nullptr: never stop

class StopRequested : public std::exception {
 public:
  explicit StopRequested(int signal_number) : signal_number_(signal_number) {}
  int signal_number() const { return signal_number_; }
  const char* what() const noexcept override { return "stopped on request"; }

 private:
  int signal_number_;
};

inline int stop_signal(StopFlag flag) { return flag != nullptr ? flag->load(std::memory_order_relaxed) : 0; }

inline void throw_if_stopped(StopFlag flag) {
  if (const int signal_number = stop_signal(flag); signal_number != 0) throw StopRequested(signal_number);
}

}  // namespace normlab::io
