#include "normlab/train/run_clock.hpp"

#include <fmt/format.h>
#include <time.h>

#include <atomic>

#include "normlab/error.hpp"

namespace normlab::train {

namespace {

constexpr std::array<const char*, kRunParts> kPartNames = {"setup",       "steps", "diagnostics", "evaluation",
                                                           "checkpoints", "logs",  "finish"};

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// The process's start as static initialization sees it, before main (or the fork that made it:
// restart_process_clock).
std::chrono::steady_clock::time_point process_start_wall = std::chrono::steady_clock::now();
double process_start_cpu = process_cpu_seconds();
std::atomic<bool> process_start_claimed{false};

nlohmann::json parts_json(const std::array<double, kRunParts>& seconds) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < kRunParts; ++i) out[kPartNames[i]] = seconds[i];
  return out;
}

void parts_from_json(const nlohmann::json& j, const char* key, std::array<double, kRunParts>& seconds,
                     const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_object())
    throw InputError(fmt::format("{}: timing: \"{}\" must be an object of seconds per part", where, key));
  const nlohmann::json& parts = j.at(key);
  for (size_t i = 0; i < kRunParts; ++i) {
    const auto it = parts.find(kPartNames[i]);
    if (it == parts.end() || !it->is_number() || !(it->get<double>() >= 0))
      throw InputError(
          fmt::format("{}: timing: \"{}\".\"{}\" must be a number of seconds >= 0", where, key, kPartNames[i]));
    seconds[i] = it->get<double>();
  }
}

}  // namespace

const char* to_string(RunPart part) { return kPartNames[size_t(part)]; }

void restart_process_clock() {
  process_start_cpu = process_cpu_seconds();
  process_start_wall = std::chrono::steady_clock::now();
  process_start_claimed.store(false);
}

double PartTimes::wall_total() const {
  double sum = 0.0;
  for (double s : wall_s) sum += s;
  return sum;
}

double PartTimes::cpu_total() const {
  double sum = 0.0;
  for (double s : cpu_s) sum += s;
  return sum;
}

PartTimes& PartTimes::operator+=(const PartTimes& other) {
  for (size_t i = 0; i < kRunParts; ++i) wall_s[i] += other.wall_s[i], cpu_s[i] += other.cpu_s[i];
  return *this;
}

nlohmann::json to_json(const PartTimes& times) {
  return {{"wall_s", parts_json(times.wall_s)}, {"cpu_s", parts_json(times.cpu_s)}};
}

PartTimes part_times_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(fmt::format("{}: timing must be a JSON object", where));
  PartTimes times;
  parts_from_json(j, "wall_s", times.wall_s, where);
  parts_from_json(j, "cpu_s", times.cpu_s, where);
  return times;
}

// CPU first: reading the process's CPU clock is a system call that updates the scheduler's account
// of this task, and a task whose time slice is used up is preempted on its way back. Read before
// the wall clock, that wait is charged to the stretch that used the slice, not to the next one (a
// loaded machine otherwise charged seconds of other processes' time to the logs after each step).
RunClock::Mark RunClock::Mark::now() {
  const double cpu = process_cpu_seconds();
  return {std::chrono::steady_clock::now(), cpu};
}

RunClock::RunClock() {
  mark_ = process_start_claimed.exchange(true) ? Mark::now() : Mark{process_start_wall, process_start_cpu};
}

void RunClock::charge(RunPart part) {
  const Mark now = Mark::now();
  session_.wall(part) += std::chrono::duration<double>(now.wall - mark_.wall).count();
  session_.cpu(part) += now.cpu_s - mark_.cpu_s;
  mark_ = now;
}

PartTimes RunClock::total() const {
  PartTimes sum = previous_;
  sum += session_;
  return sum;
}

nlohmann::json RunClock::summary_json() const {
  nlohmann::json out = to_json(total());
  out["sessions"] = sessions();
  if (sessions() > 1) out["last_session"] = to_json(session_);
  return out;
}

nlohmann::json RunClock::state_json() const {
  nlohmann::json out = to_json(total());
  out["sessions"] = sessions();
  return out;
}

void RunClock::restore(const nlohmann::json& state, const std::string& where) {
  const PartTimes times = part_times_from_json(state, where);
  const auto it = state.find("sessions");
  if (it == state.end() || !it->is_number_integer() || it->get<int64_t>() < 1)
    throw InputError(fmt::format("{}: timing: \"sessions\" must be an integer >= 1", where));
  set_previous(times, int(it->get<int64_t>()));
}

}  // namespace normlab::train
