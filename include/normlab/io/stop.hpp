#pragma once
// Stop requests (SIGINT / SIGTERM, or a caller's own flag) reach every long loop: data loading,
// example generation, batching, evaluation, training, a compare's queue and report drawing. A
// signal handler stores the signal number in a lock-free std::atomic<int>; the loops poll it. The
// training loop stops at a step boundary and checkpoints; everything else throws StopRequested,
// which unwinds to the CLI (exit 128 + signal) without writing anything half-done.
//
// The commands install the process's handlers once (install_stop_signals) and hand stop_flag() to
// the library; `normlab serve` instead takes the signals in one waiting thread (StopSignalWaiter).
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

// How the process's SIGINT / SIGTERM handlers behave.
struct StopSignalOptions {
  // SIGUSR1 too, recorded as SIGTERM: mpirun forwards SIGUSR1 to every rank without killing them a
  // second later (docs/scaling.md, the grace period). stopped_by_sigusr1() tells it apart.
  bool sigusr1 = false;
  // The first signal restores the default action, so that a second one stops at once.
  bool second_stops_at_once = false;
  // Written to stderr (one async-signal-safe write) when a signal arrives; nullptr: nothing.
  const char* announcement = nullptr;
};

// Installs the handlers: each arrival stores its signal number in stop_flag() and is counted.
void install_stop_signals(const StopSignalOptions& options = {});
// The flag the handlers set (0 until a signal arrives): hand it to the library's loops.
StopFlag stop_flag();
// How many stop signals have arrived: a caller that must notice a new one (compare's report after
// its runs were stopped) compares counts.
int stop_signals_received();
bool stopped_by_sigusr1();
// Silences (nullptr) or changes the announcement, e.g. on data-parallel ranks other than 0.
void set_stop_announcement(const char* announcement);

// SIGINT / SIGTERM taken by one thread that waits for them, for a process whose other threads must
// never run a handler (a server's workers). Construct it before starting any other thread: it blocks
// the signals in the calling thread, and threads started after inherit the mask.
class StopSignalWaiter {
 public:
  StopSignalWaiter();
  // Blocks until SIGINT or SIGTERM arrives; returns its number.
  int wait();
  // Ends a wait() in another thread (sends this process SIGTERM).
  void wake();
};

}  // namespace normlab::io
