// `normlab compare` as a user runs it: interrupted with Ctrl-C (SIGINT) halfway through its grid,
// then run again: finished runs are skipped, stopped ones resume from their checkpoints, and the
// result is the same table as an uninterrupted compare's.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"

namespace fs = std::filesystem;
using normlab::test::Child;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

const char* kBase = R"({
  "model": {"d_model": 32, "heads": 2, "layers": 2, "ffn": 64, "max_len": 24},
  "task": {"name": "reverse", "min_len": 1, "max_len": 16, "eval_max_len": 24, "eval_examples": 32, "bucket_width": 8},
  "optim": {"lr": 0.003, "warmup_steps": 10},
  "train": {"steps": 150, "batch_size": 32, "eval_every": 50, "log_every": 50, "diagnostics_every": 25,
            "checkpoint_every": 10, "threads": 1}
})";

const char* kCompare = R"({
  "base": "base.json",
  "grid": {"variants": ["post-ln", "pre-ln"], "lr": [0.003], "seeds": [0, 1]}
})";

// runs.csv without its wall_time_s column, keyed by run name.
std::map<std::string, std::string> runs_without_time(const std::string& csv_path) {
  std::istringstream in(read_text(csv_path));
  std::string header, line;
  std::getline(in, header);
  REQUIRE(header.substr(header.rfind(',') + 1) == "wall_time_s");
  std::map<std::string, std::string> rows;
  while (std::getline(in, line)) {
    const std::string row = line.substr(0, line.rfind(','));
    rows[row.substr(0, row.find(','))] = row;
  }
  return rows;
}

int count_with(const std::string& runs_dir, const std::string& file) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(runs_dir)) n += fs::exists(entry.path() / file);
  return n;
}

}  // namespace

TEST_CASE(
    "compare: SIGINT midway stops every run with a checkpoint (exit 130) - rerunning skips and resumes to the same "
    "table") {
  TempDir dir("normlab_test_compare");
  dir.write("base.json", kBase);
  const std::string config = dir.write("compare.json", kCompare);

  const std::string clean = dir.sub("clean");
  REQUIRE(run_normlab({"compare", "--config", config, "--out", clean, "--jobs", "1"}, dir.sub("out.txt"),
                      dir.sub("err.txt")) == 0);
  REQUIRE(count_with(clean + "/runs", "summary.json") == 4);

  const std::string out = dir.sub("interrupted");
  const std::string err = dir.sub("interrupted_err.txt");
  {
    // Every run holds after step 20 (two checkpoints written) until let go: the first is let go and
    // finishes, the second is interrupted while it holds, however fast the machine trains.
    normlab::test::PausePoint pause(dir, "step 20");
    Child child({"compare", "--config", config, "--out", out, "--jobs", "1"}, dir.sub("out.txt"), err, {},
                {pause.env()});
    REQUIRE(child.started());
    const std::vector<pid_t> first = pause.wait(1);
    REQUIRE(first.size() == 1);
    pause.resume(first[0]);
    REQUIRE(pause.wait(2).size() == 2);  // the first run finished, the second holds at step 20
    child.signal(SIGINT);
    const int code = child.wait();
    INFO(read_text(err));
    REQUIRE(code == 130);
  }
  CHECK(read_text(err).find("compare: interrupted; run the same command again to resume") != std::string::npos);
  const int finished = count_with(out + "/runs", "summary.json");
  const int checkpointed = count_with(out + "/runs", "checkpoint.safetensors");
  CHECK(finished == 1);
  CHECK(checkpointed == 2);  // the run in flight stopped with a checkpoint
  for (const auto& entry : fs::directory_iterator(out + "/runs")) {
    if (fs::exists(entry.path() / "summary.json") || !fs::exists(entry.path() / "checkpoint.safetensors")) continue;
    const std::string name = entry.path().filename().string();
    CHECK_MESSAGE(read_text(out + "/logs/" + name + ".log").find("checkpoint written to") != std::string::npos, name);
  }

  const std::string again_err = dir.sub("again_err.txt");
  REQUIRE(run_normlab({"compare", "--config", config, "--out", out, "--jobs", "1"}, dir.sub("out.txt"), again_err) ==
          0);
  CHECK(read_text(again_err).find(std::to_string(finished) + " skipped as finished") != std::string::npos);
  CHECK(count_with(out + "/runs", "summary.json") == 4);
  CHECK(runs_without_time(out + "/runs.csv") == runs_without_time(clean + "/runs.csv"));
}
