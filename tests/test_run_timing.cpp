// Where a run's and a compare's time goes: summary.json's "timing" (train/run_clock.hpp) holds
// every part, a resumed run counts its sessions; a compare whose run crashes (killed by SIGABRT)
// records it in the run's log, trains the others, draws the report and sums the finished runs'
// timing into its last line.
#include <doctest/doctest.h>
#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support.hpp"

namespace fs = std::filesystem;
using normlab::test::Child;
using normlab::test::PausePoint;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

const char* kBase = R"({
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 8, "eval_examples": 16},
  "train": {"steps": 6, "batch_size": 4, "eval_every": 3, "diagnostics_every": 3, "checkpoint_every": 0, "threads": 1}
})";

const std::vector<std::string> kParts = {"setup",       "steps", "diagnostics", "evaluation",
                                         "checkpoints", "logs",  "finish"};

nlohmann::json summary_timing(const std::string& run_dir) {
  return nlohmann::json::parse(read_text(run_dir + "/summary.json")).at("timing");
}

}  // namespace

TEST_CASE("run timing: summary.json names every part in wall and CPU seconds - a resumed run counts its sessions") {
  TempDir dir("normlab_test_run_timing");
  const std::string config = dir.write("base.json", kBase);
  const std::string run = dir.sub("run");
  const normlab::test::Cli first =
      run_normlab(dir, "train --config \"" + config + "\" --out \"" + run + "\" --set train.steps=3");
  INFO(first.err);
  REQUIRE(first.code == 0);
  const nlohmann::json one = summary_timing(run);
  CHECK(one.at("sessions") == 1);
  CHECK(!one.contains("last_session"));
  for (const char* clock : {"wall_s", "cpu_s"}) {
    CAPTURE(clock);
    REQUIRE(one.at(clock).size() == kParts.size());
    for (const std::string& part : kParts) CHECK(one.at(clock).at(part).get<double>() >= 0.0);
    // Three steps, an evaluation, a diagnostics step (step 1) and a checkpoint took some time each.
    for (const char* part : {"steps", "evaluation", "diagnostics", "checkpoints"}) CHECK(one.at(clock).at(part) > 0.0);
  }

  // Three more steps in a second session: the sum over both, and the second session's own parts.
  const normlab::test::Cli second = run_normlab(dir, "train --resume \"" + run + "\" --set train.steps=6");
  INFO(second.err);
  REQUIRE(second.code == 0);
  const nlohmann::json two = summary_timing(run);
  CHECK(two.at("sessions") == 2);
  REQUIRE(two.contains("last_session"));
  const double total_steps = two.at("wall_s").at("steps"), last_steps = two.at("last_session").at("wall_s").at("steps");
  CHECK(last_steps > 0.0);
  CHECK(total_steps > last_steps);  // the first session's steps are in the sum
  CHECK(two.at("wall_s").at("setup").get<double>() > two.at("last_session").at("wall_s").at("setup").get<double>());
}

TEST_CASE("compare: a run that crashes (SIGABRT) is recorded and the compare goes on - report, timing line, exit 1") {
  TempDir dir("normlab_test_compare_crash");
  dir.write("base.json", kBase);
  const std::string config = dir.write("compare.json", R"({"base": "base.json", "grid": {"seeds": [0, 1]}})");
  const std::string out = dir.sub("out");
  const std::string err = dir.sub("compare.err");
  pid_t crashed = 0;
  {
    // One run at a time: the first holds after step 1 and is killed; the second holds there too
    // and is let go.
    PausePoint pause(dir, "step 1");
    Child compare({"compare", "--config", config, "--out", out, "--jobs", "1"}, dir.sub("compare.out"), err, {},
                  {pause.env()});
    REQUIRE(compare.started());
    const std::vector<pid_t> first = pause.wait(1);
    REQUIRE(first.size() == 1);
    crashed = first[0];
    REQUIRE(::kill(crashed, SIGABRT) == 0);
    const std::vector<pid_t> both = pause.wait(2);
    REQUIRE(both.size() == 2);
    for (pid_t pid : both)
      if (pid != crashed) pause.resume(pid);
    CHECK(compare.wait() == 1);  // a run failed: said in the exit code, after the report
  }
  const std::string said = read_text(err);
  INFO(said);
  CHECK(said.find("crashed (killed by SIGABRT)") != std::string::npos);
  CHECK(said.find("the other runs go on") != std::string::npos);
  CHECK(said.find("went to training steps") != std::string::npos);
  CHECK(fs::exists(out + "/report.html"));
  int finished = 0, logged = 0;
  for (const auto& entry : fs::directory_iterator(out + "/runs")) {
    const std::string name = entry.path().filename().string();
    if (fs::exists(entry.path() / "summary.json")) {
      ++finished;
      CHECK(summary_timing(entry.path().string()).at("wall_s").at("steps") > 0.0);
    }
    if (read_text(out + "/logs/" + name + ".log").find("compare: this run crashed (killed by SIGABRT)") !=
        std::string::npos)
      ++logged;
  }
  CHECK(finished == 1);
  CHECK(logged == 1);
}
