#pragma once
// A test hook: a process held at a known point until the test lets it go, so that a test signals
// or kills a process at an event the process announced, never after a sleep that a fast or a busy
// machine can outrun (docs/TESTING.md, "Synchronising with a process"). Off unless the environment
// names a point:
//
//   NORMLAB_TEST_PAUSE_AT="POINT:DIR"   POINT is "data" (before the validation data is loaded or
//                                        generated), "step N" (after step N is recorded, evaluated
//                                        and checkpointed), "eval" (an evaluation, before its second
//                                        batch)
//
// The first time the process reaches POINT it writes DIR/PID.paused (renamed into place, so it is
// never read half-written; its one line names the point) and waits until DIR/PID.resume exists or
// a stop is requested through `stop`, looking every 2 ms. A process pauses at most once. With the
// variable unset this costs one branch.
#include <cstdint>
#include <string_view>

#include "normlab/io/stop.hpp"

namespace normlab::io {

// `number`: the step for "step N" (ignored by the other points).
void test_pause(std::string_view point, int64_t number, StopFlag stop);

}  // namespace normlab::io
