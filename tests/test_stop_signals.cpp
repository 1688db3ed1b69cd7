// The process's stop signals (io/stop.hpp), as the commands install them: a signal is recorded in
// the stop flag and counted instead of ending the process; SIGUSR1 is recorded as SIGTERM.
#include <doctest/doctest.h>
#include <signal.h>

#include "normlab/io/stop.hpp"

using namespace normlab;

TEST_CASE("stop signals: recorded in the flag and counted, SIGUSR1 as SIGTERM") {
  io::install_stop_signals({.sigusr1 = true, .second_stops_at_once = false, .announcement = nullptr});
  const int before = io::stop_signals_received();
  REQUIRE(::raise(SIGINT) == 0);
  CHECK(io::stop_signal(io::stop_flag()) == SIGINT);
  CHECK(io::stop_signals_received() == before + 1);
  CHECK_THROWS_AS(io::throw_if_stopped(io::stop_flag()), io::StopRequested);
  // Not reset by the first: a second signal is recorded too (the compare scheduler counts them).
  REQUIRE(::raise(SIGUSR1) == 0);
  CHECK(io::stop_signal(io::stop_flag()) == SIGTERM);
  CHECK(io::stopped_by_sigusr1());
  CHECK(io::stop_signals_received() == before + 2);
}
