// compare's runs end with it: killed with SIGKILL (no handler runs), compare still takes its
// trainers with it (the kernel sends each SIGTERM when compare dies: they checkpoint and exit), so
// no orphan keeps training or holds a run. A rerun that meets a run another process still holds
// says which run and which pid, in compare's own output.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support.hpp"

namespace fs = std::filesystem;
using normlab::test::Child;
using normlab::test::PausePoint;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;
using normlab::test::wait_until_gone;

namespace {

const char* kBase = R"({
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 8, "eval_examples": 16},
  "train": {"steps": 6, "batch_size": 4, "eval_every": 0, "checkpoint_every": 0, "threads": 1}
})";

}  // namespace

TEST_CASE("compare: kill -9 ends its runs with a checkpoint - a rerun that meets a run in use names it and the pid") {
  TempDir dir("normlab_test_compare_children");
  dir.write("base.json", kBase);
  const std::string config = dir.write("compare.json", R"({"base": "base.json", "grid": {"seeds": [0, 1]}})");
  const std::string out = dir.sub("out");

  // Both runs hold after step 1 (NORMLAB_TEST_PAUSE_AT): alive, each in its own process group.
  std::vector<pid_t> runs;
  {
    PausePoint pause(dir, "step 1");
    Child compare({"compare", "--config", config, "--out", out, "--jobs", "2"}, dir.sub("compare.out"),
                  dir.sub("compare.err"), {}, {pause.env()});
    REQUIRE(compare.started());
    runs = pause.wait(2);
    REQUIRE(runs.size() == 2);
    compare.signal(SIGKILL);
    CHECK(compare.wait() == 128 + SIGKILL);
  }
  for (pid_t pid : runs) CHECK_MESSAGE(wait_until_gone(pid), "run pid ", pid, " outlived its compare");
  // Each run was stopped as by Ctrl-C: a checkpoint of step 1, no summary, resumable.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(out + "/runs")) names.push_back(entry.path().filename().string());
  REQUIRE(names.size() == 2);
  for (const std::string& name : names) {
    CAPTURE(name);
    CHECK(fs::exists(out + "/runs/" + name + "/checkpoint.safetensors"));
    CHECK(!fs::exists(out + "/runs/" + name + "/summary.json"));
    CHECK(read_text(out + "/logs/" + name + ".log").find("terminated (SIGTERM) after step 1 of 6") !=
          std::string::npos);
  }

  // A `normlab train --resume` of one run holds it (at step 2) while compare runs again: compare
  // names the run and the pid, exit 2, instead of launching a trainer that would be refused.
  {
    PausePoint pause(dir, "step 2");
    Child holder({"train", "--resume", out + "/runs/" + names[0]}, dir.sub("holder.out"), dir.sub("holder.err"), {},
                 {pause.env()});
    REQUIRE(pause.wait(1).size() == 1);
    const normlab::test::Cli again =
        run_normlab(dir, "compare --config \"" + config + "\" --out \"" + out + "\" --jobs 1");
    INFO(again.err);
    CHECK(again.code == 2);
    CHECK(again.err.find("normlab: error: run " + names[0] + ": ") != std::string::npos);
    CHECK(again.err.find("in use by another normlab process (pid " + std::to_string(holder.pid()) + ")") !=
          std::string::npos);
    CHECK(again.err.find("rejected its input") == std::string::npos);
    holder.signal(SIGTERM);
    CHECK(holder.wait() == 128 + SIGTERM);
  }
  // Nobody holds them now: the rerun resumes both to the end.
  const normlab::test::Cli last =
      run_normlab(dir, "compare --config \"" + config + "\" --out \"" + out + "\" --jobs 2");
  INFO(last.err);
  CHECK(last.code == 0);
  for (const std::string& name : names) CHECK(fs::exists(out + "/runs/" + name + "/summary.json"));
}

TEST_CASE("compare: its runs are forked from its launcher, not exec'ed, and are compare's own children") {
  TempDir dir("normlab_test_compare_forked");
  dir.write("base.json", kBase);
  const std::string config = dir.write("compare.json", R"({"base": "base.json", "grid": {"seeds": [0]}})");
  const std::string out = dir.sub("out");
  PausePoint pause(dir, "step 1");
  Child compare({"compare", "--config", config, "--out", out, "--jobs", "1"}, dir.sub("compare.out"),
                dir.sub("compare.err"), {}, {pause.env()});
  REQUIRE(compare.started());
  const std::vector<pid_t> runs = pause.wait(1);
  REQUIRE(runs.size() == 1);
  // The run's command line is compare's (no exec), its parent compare itself (adopted from the
  // launcher's fork): compare waits for it, reads its CPU time and signals it as any child.
  std::string cmdline = read_text("/proc/" + std::to_string(runs[0]) + "/cmdline");
  for (char& c : cmdline) c = c == '\0' ? ' ' : c;
  CHECK(cmdline.find(" compare --config ") != std::string::npos);
  const std::string status = read_text("/proc/" + std::to_string(runs[0]) + "/status");
  CHECK(status.find("\nPPid:\t" + std::to_string(compare.pid()) + "\n") != std::string::npos);
  pause.resume(runs[0]);
  CHECK(compare.wait() == 0);
  // It trained to the end as an exec'ed run would: its summary, and its output in its log.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(out + "/runs")) names.push_back(entry.path().filename().string());
  REQUIRE(names.size() == 1);
  CHECK(fs::exists(out + "/runs/" + names[0] + "/summary.json"));
  CHECK(read_text(out + "/logs/" + names[0] + ".log").find("trained 6 steps") != std::string::npos);
}
