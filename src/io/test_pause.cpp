#include "normlab/io/test_pause.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace normlab::io {

namespace {

struct PauseAt {
  std::string point;  // "data", "step 20", "eval"; empty: the hook is off
  std::string dir;
};

// NORMLAB_TEST_PAUSE_AT read once; "POINT:DIR" split at the first colon.
const PauseAt& pause_at() {
  static const PauseAt at = [] {
    PauseAt out;
    const char* value = std::getenv("NORMLAB_TEST_PAUSE_AT");
    if (value == nullptr) return out;
    const std::string text(value);
    const size_t colon = text.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return out;
    out.point = text.substr(0, colon);
    out.dir = text.substr(colon + 1);
    return out;
  }();
  return at;
}

std::atomic<bool> g_paused{false};

}  // namespace

void test_pause(std::string_view point, int64_t number, StopFlag stop) {
  const PauseAt& at = pause_at();
  if (at.point.empty()) return;
  const std::string here = point == "step" ? "step " + std::to_string(number) : std::string(point);
  if (here != at.point || g_paused.exchange(true)) return;
  const std::string base = at.dir + "/" + std::to_string(::getpid());
  if (FILE* f = std::fopen((base + ".paused.tmp").c_str(), "w")) {
    std::fprintf(f, "%s\n", here.c_str());
    std::fclose(f);
    std::rename((base + ".paused.tmp").c_str(), (base + ".paused").c_str());
  }
  const std::string resume = base + ".resume";
  while (stop_signal(stop) == 0 && ::access(resume.c_str(), F_OK) != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

}  // namespace normlab::io
