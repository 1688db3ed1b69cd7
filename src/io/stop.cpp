#include "normlab/io/stop.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace normlab::io {

namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_signals_received{0};
std::atomic<bool> g_usr1{false};
std::atomic<const char*> g_announcement{nullptr};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");
static_assert(std::atomic<const char*>::is_always_lock_free, "the signal handler needs a lock-free pointer");

extern "C" void on_stop_signal(int signal_number) {
  if (signal_number == SIGUSR1) g_usr1.store(true);
  g_stop_signal.store(signal_number == SIGUSR1 ? SIGTERM : signal_number);
  g_signals_received.fetch_add(1);
  if (const char* text = g_announcement.load(); text != nullptr) {
    ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));  // async-signal-safe
    (void)ignored;
  }
}

// Replaces an inherited SIG_IGN too (a shell's background job ignores SIGINT), under which the
// signal would be discarded.
extern "C" void on_waited_signal(int) {}  // never runs: the signals are blocked and taken by sigwait

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void install_stop_signals(const StopSignalOptions& options) {
  g_announcement.store(options.announcement);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = options.second_stops_at_once ? SA_RESETHAND : SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  if (options.sigusr1) sigaction(SIGUSR1, &action, nullptr);
}

StopFlag stop_flag() { return &g_stop_signal; }
int stop_signals_received() { return g_signals_received.load(); }
bool stopped_by_sigusr1() { return g_usr1.load(); }
void set_stop_announcement(const char* announcement) { g_announcement.store(announcement); }

StopSignalWaiter::StopSignalWaiter() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  struct sigaction action {};
  action.sa_handler = on_waited_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int StopSignalWaiter::wait() {
  const sigset_t set = stop_signal_set();
  int signal_number = 0;
  sigwait(&set, &signal_number);
  return signal_number;
}

void StopSignalWaiter::wake() { ::kill(::getpid(), SIGTERM); }

}  // namespace normlab::io
