// A search's rounds are pipelined: as soon as a run slot is free and nothing is queued, compare
// reads the plan again, so a variant whose runs are done starts its next round while another
// variant's run still trains, and the runs skipped there (still training, no summary yet) are
// neither queued twice nor removed. The plan it ends with is the one a sequential search chooses.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "normlab/io/dir_lock.hpp"
#include "normlab/study/plan.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace normlab;
using normlab::test::Child;
using normlab::test::read_text;
using normlab::test::TempDir;

namespace {

// The run (its directory's name) whose process holds the run directory's lock with this pid, or "".
std::string run_of(const std::string& out, pid_t pid) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(out) / "runs", ec)) {
    std::ifstream in(entry.path() / io::kDirLockFile);
    long holder = 0;
    if (in >> holder && holder == long(pid)) return entry.path().filename().string();
  }
  return "";
}

// A search of 4-step runs of a tiny model, two variants, one seed: search.json (returned) and its
// base.json in `tmp`. Two rates and room on both sides: the gate extends every variant's range by
// one rate (its best rate is always at an edge of two), whatever the runs learn.
std::string write_search(const TempDir& tmp) {
  tmp.write("base.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
    "task": {"name": "reverse", "min_len": 1, "max_len": 3, "eval_max_len": 4, "eval_examples": 16, "bucket_width": 2},
    "optim": {"lr": 0.01, "warmup_steps": 0},
    "train": {"steps": 4, "batch_size": 8, "eval_every": 4, "log_every": 4, "diagnostics_every": 4,
              "checkpoint_every": 4, "threads": 1}})");
  return tmp.write("search.json", R"({"base": "base.json",
    "grid": {"variants": ["none", "pre-ln"], "seeds": [0]},
    "search": {"lr": {"from": 0.003, "to": 0.03, "points": 2, "rounds": 0, "min": 0.0003, "max": 0.3}}})");
}

// Until done(): waits for the next run to pause, names it (`seen`: pid -> run) and resumes it unless
// keep(pid, name) says to hold it. Fails when the bound passes with no new run paused.
template <class Keep, class Done>
void collect_paused(normlab::test::PausePoint& pause, const std::string& out, std::map<pid_t, std::string>& seen,
                    Keep keep, Done done) {
  while (!done()) {
    const std::vector<pid_t> paused = pause.wait(seen.size() + 1);
    REQUIRE(paused.size() > seen.size());  // empty after the bound: no new run paused
    for (pid_t pid : paused) {
      if (seen.count(pid)) continue;
      const std::string name = run_of(out, pid);
      REQUIRE(!name.empty());
      seen[pid] = name;
      if (!keep(pid, name)) pause.resume(pid);
    }
  }
}

}  // namespace

TEST_CASE("compare search: a variant's next round starts while another variant's round-0 run still trains") {
  TempDir tmp;
  const std::string config = write_search(tmp);
  const std::string out = tmp.sub("out");
  const study::ComparePlan round0 = study::load_compare_plan(config, "");
  REQUIRE(round0.runs.size() == 4);
  std::set<std::string> first_round;
  for (const study::RunSpec& r : round0.runs) first_round.insert(r.name);
  const std::string held = round0.runs.back().name;  // pre-ln at the higher rate: the last of round 0
  REQUIRE(held.rfind("pre-ln_", 0) == 0);

  // Every run holds after step 1; the test lets each go on but `held`, until a run of none's next
  // round has started (it pauses too) while `held` still trains.
  normlab::test::PausePoint pause(tmp, "step 1");
  Child compare({"compare", "--config", config, "--out", out, "--jobs", "2"}, tmp.sub("stdout"), tmp.sub("stderr"), {},
                {pause.env()});
  std::map<pid_t, std::string> seen;
  pid_t held_pid = 0;
  std::string later_run;
  // Until both have paused: `held` (it cannot finish before the test resumes it) and a later round's run.
  collect_paused(
      pause, out, seen,
      [&](pid_t pid, const std::string& name) {
        if (name == held) {
          held_pid = pid;
          return true;
        }
        if (!first_round.count(name) && later_run.empty()) later_run = name;
        return false;
      },
      [&] { return !later_run.empty() && held_pid != 0; });
  CHECK(later_run.rfind("none_", 0) == 0);
  CHECK(!fs::exists(fs::path(out) / "runs" / held / "summary.json"));
  pause.resume(held_pid);
  // The rest: every run that pauses from here goes on, until compare exits.
  while (!normlab::test::wait_until_gone(compare.pid(), std::chrono::seconds(0))) {
    for (pid_t pid : pause.paused())
      if (seen.emplace(pid, "").second) pause.resume(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  INFO(read_text(tmp.sub("stderr")));
  REQUIRE(compare.wait() == 0);
  CHECK(read_text(tmp.sub("stderr")).find("compare: search: the next round adds") != std::string::npos);

  // The same search one run at a time, without pauses: the same runs with the same numbers.
  const std::string sequential = tmp.sub("sequential");
  REQUIRE(normlab::test::run_normlab({"compare", "--config", config, "--out", sequential, "--jobs", "1"},
                                     tmp.sub("seq.out"), tmp.sub("seq.err")) == 0);
  const study::ComparePlan plan = study::load_compare_plan(config, out);
  for (const study::LrSearchSpec::Block& b : plan.search.blocks) CHECK(b.settled);
  CHECK(plan.runs.size() > round0.runs.size());
  // runs.csv without its last column, each run's wall time
  const auto without_wall_time = [](const std::string& csv) {
    std::string kept;
    std::istringstream lines(csv);
    for (std::string line; std::getline(lines, line);) kept += line.substr(0, line.rfind(',')) + "\n";
    return kept;
  };
  CHECK(without_wall_time(read_text(out + "/runs.csv")) == without_wall_time(read_text(sequential + "/runs.csv")));
}

TEST_CASE("compare search: a plan that no longer reads mid-search stops the launching, the run in training finishes, exit 2") {
  TempDir tmp;
  const std::string config = write_search(tmp);
  const std::string out = tmp.sub("out");
  const study::ComparePlan round0 = study::load_compare_plan(config, "");
  REQUIRE(round0.runs.size() == 4);
  // Round 0's last two runs are launched when the first two exit, so both train at once and the
  // plan is read again only when one of them exits, while the other (`held`) still trains.
  const std::string other = round0.runs[2].name, held = round0.runs[3].name;

  normlab::test::PausePoint pause(tmp, "step 1");
  Child compare({"compare", "--config", config, "--out", out, "--jobs", "2"}, tmp.sub("stdout"), tmp.sub("stderr"), {},
                {pause.env()});
  std::map<pid_t, std::string> seen;
  pid_t held_pid = 0, other_pid = 0;
  collect_paused(
      pause, out, seen,
      [&](pid_t pid, const std::string& name) {
        if (name == held) held_pid = pid;
        if (name == other) other_pid = pid;
        return name == held || name == other;
      },
      [&] { return held_pid != 0 && other_pid != 0; });
  tmp.write("search.json", "{\"base\": ");  // the compare's config no longer reads
  pause.resume(other_pid);
  REQUIRE(normlab::test::wait_until_gone(other_pid));
  // compare says so at once and waits for `held`, which is not stopped or lost.
  const std::string waiting = "run(s) training finish first";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_text(tmp.sub("stderr")).find(waiting) == std::string::npos) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(!fs::exists(fs::path(out) / "runs" / held / "summary.json"));
  pause.resume(held_pid);
  const std::string err = [&] {
    const int code = compare.wait();
    CHECK(code == 2);
    return read_text(tmp.sub("stderr"));
  }();
  INFO(err);
  CHECK(fs::exists(fs::path(out) / "runs" / held / "summary.json"));
  CHECK(err.find("search.json") != std::string::npos);
  CHECK(err.find("internal error") == std::string::npos);
}
