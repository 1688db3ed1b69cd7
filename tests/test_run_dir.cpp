// One owner per run directory, resume that drops only what it can prove stale, and no writes
// through symbolic links (docs/RELIABILITY.md, "What survives a kill").
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "normlab/error.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/io/paths.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/run_dir.hpp"
#include "normlab/train/trainer.hpp"
#include "input_error.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace normlab;
using normlab::test::Child;
using normlab::test::error_of;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

// A run the test holds at a step (NORMLAB_TEST_PAUSE_AT) while a second process tries its directory.
const char* kSlowConfig = R"({
  "model": {"d_model": 32, "heads": 2, "layers": 2, "ffn": 64, "max_len": 24},
  "task": {"name": "reverse", "min_len": 1, "max_len": 20, "eval_max_len": 24, "eval_examples": 64},
  "train": {"steps": 100000, "batch_size": 32, "eval_every": 0, "log_every": 100, "checkpoint_every": 20, "threads": 1}
})";

const char* kQuickConfig = R"({
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 8, "eval_examples": 16},
  "train": {"steps": 12, "batch_size": 8, "eval_every": 4, "log_every": 4, "checkpoint_every": 4, "threads": 1}
})";

int64_t count_lines(const std::string& path) {
  int64_t n = 0;
  for (char c : read_text(path)) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("dir lock: a second owner is refused with the directory and the holder's pid - release frees it") {
  TempDir dir;
  io::DirLock first = io::DirLock::acquire(dir.path.string(), "run directory");
  CHECK(first.held());
  // flock locks belong to an open file description: a second open in this process conflicts too.
  const std::string message = error_of([&] { io::DirLock::acquire(dir.path.string(), "run directory"); });
  CHECK(message.find(dir.path.string() + ": the run directory is in use by another normlab process (pid " +
                     std::to_string(::getpid()) + ")") == 0);
  first.release();
  CHECK_NOTHROW(io::DirLock::acquire(dir.path.string(), "run directory"));
}

TEST_CASE("dir lock: the lock file is never followed through a symbolic link") {
  TempDir dir;
  const std::string victim = dir.write("victim.txt", "precious");
  fs::create_directories(dir.path / "run");
  fs::create_symlink(victim, dir.path / "run" / io::kDirLockFile);
  CHECK(error_of([&] { io::DirLock::acquire(dir.sub("run"), "run directory"); }).find("cannot lock") !=
        std::string::npos);
  CHECK(read_text(victim) == "precious");
}

TEST_CASE(
    "two train processes on one --out: the second exits 2 naming the directory and the holder - a killed run "
    "resumes") {
  TempDir dir("normlab_test_lock");
  const std::string config = dir.write("config.json", kSlowConfig);
  const std::string run = dir.sub("run");
  // The first holds after step 25 (past the first checkpoint) for as long as the test needs.
  normlab::test::PausePoint pause(dir, "step 25");
  Child first({"train", "--config", config, "--out", run}, dir.sub("out1.txt"), dir.sub("err1.txt"), {}, {pause.env()});
  REQUIRE(first.started());
  REQUIRE(pause.wait(1).size() == 1);
  REQUIRE(fs::exists(run + "/checkpoint.safetensors"));

  const std::string config_before = read_text(run + "/config.json");
  const int second = run_normlab({"train", "--config", config, "--out", run, "--set", "train.seed=7"},
                                 dir.sub("out2.txt"), dir.sub("err2.txt"));
  const std::string message = read_text(dir.sub("err2.txt"));
  INFO(message);
  CHECK(second == 2);
  CHECK(message.find("normlab: error: " + run + ": the run directory is in use by another normlab process (pid " +
                     std::to_string(first.pid()) + ")") == 0);
  // A --resume is refused the same way, and neither touched the run's files.
  CHECK(run_normlab({"train", "--resume", run}, dir.sub("out3.txt"), dir.sub("err3.txt")) == 2);
  CHECK(read_text(dir.sub("err3.txt")).find("(pid " + std::to_string(first.pid()) + ")") != std::string::npos);
  CHECK(read_text(run + "/config.json") == config_before);

  // kill -9: the kernel releases the lock, so the run resumes (a few steps past where it was).
  first.signal(SIGKILL);
  first.wait();
  const std::string steps = "train.steps=" + std::to_string(count_lines(run + "/metrics.jsonl") + 5);
  const int resumed = run_normlab({"train", "--resume", run, "--set", steps}, dir.sub("out4.txt"), dir.sub("err4.txt"));
  INFO(read_text(dir.sub("err4.txt")));
  CHECK(resumed == 0);
}

TEST_CASE("compare: a compare that would train a run another compare holds is refused, naming the run") {
  TempDir dir("normlab_test_compare_lock");
  const std::string out = dir.sub("out");
  fs::create_directories(out + "/.locks");
  dir.write("base.json", kQuickConfig);
  const std::string plan_path = dir.write("plan.json", R"({"base": "base.json", "grid": {"seeds": [0, 1]}})");
  const study::ComparePlan plan = study::load_compare_plan(plan_path);
  REQUIRE(plan.runs.size() == 2);
  // Another compare (or shard) owns the second run of the grid.
  const std::string second = out + "/runs/" + plan.runs[1].name;
  io::DirLock holder = io::DirLock::acquire_file(out + "/.locks/" + plan.runs[1].name + ".lock", second, "compare run");
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{{}, {"--shard", "1/2"}}) {
    std::vector<std::string> args{"compare", "--config", plan_path, "--out", out};
    args.insert(args.end(), extra.begin(), extra.end());
    const int code = run_normlab(args, dir.sub("out.txt"), dir.sub("err.txt"));
    const std::string message = read_text(dir.sub("err.txt"));
    INFO(message);
    CHECK(code == 2);
    CHECK(message.find(second + ": the compare run is in use by another normlab process (pid " +
                       std::to_string(::getpid()) + ")") != std::string::npos);
    CHECK((!fs::exists(out + "/runs") || fs::is_empty(out + "/runs")));
  }
}

TEST_CASE("resume: a corrupt line before the end is refused naming file:line, with nothing changed") {
  TempDir dir("normlab_test_corrupt");
  const std::string config = dir.write("config.json", kQuickConfig);
  const std::string run = dir.sub("run");
  REQUIRE(run_normlab({"train", "--config", config, "--out", run, "--set", "train.steps=8"}, dir.sub("o"),
                      dir.sub("e")) == 0);
  // Break line 3 of metrics.jsonl.
  std::string metrics = read_text(run + "/metrics.jsonl");
  const size_t line3 = metrics.find('\n', metrics.find('\n') + 1) + 1;
  REQUIRE(line3 < metrics.size());
  metrics[line3] = '#';  // (not replace(): GCC 12 warns about a memcpy it cannot prove in range)
  std::ofstream(run + "/metrics.jsonl", std::ios::binary) << metrics;
  const std::string config_before = read_text(run + "/config.json");
  const std::string summary_before = read_text(run + "/summary.json");

  const int code = run_normlab({"train", "--resume", run, "--set", "train.steps=12"}, dir.sub("o2"), dir.sub("e2"));
  const std::string message = read_text(dir.sub("e2"));
  INFO(message);
  CHECK(code == 2);
  CHECK(message.find("normlab: error: " + run + "/metrics.jsonl:3: not a metrics record") == 0);
  CHECK(read_text(run + "/metrics.jsonl") == metrics);
  CHECK(read_text(run + "/config.json") == config_before);
  CHECK(read_text(run + "/summary.json") == summary_before);
}

TEST_CASE("resume: only a torn final line and the records after the checkpoint are dropped") {
  TempDir dir;
  const std::string path = dir.write("metrics.jsonl", "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":4,\"lo");
  CHECK(train::metrics_prefix_for_resume(path, 2) == 22);
  // A corrupt line after the checkpoint's records is not provably stale either.
  dir.write("bad.jsonl", "{\"step\":1}\n{\"step\":2}\nnot json\n{\"step\":4}\n");
  CHECK(error_of([&] { train::truncate_metrics(dir.sub("bad.jsonl"), 2); }) ==
        dir.sub("bad.jsonl") +
            ":3: not a metrics record (only a torn last line is dropped on resume); the run "
            "directory was not changed: repair or remove that line");
  CHECK(read_text(dir.sub("bad.jsonl")) == "{\"step\":1}\n{\"step\":2}\nnot json\n{\"step\":4}\n");
}

TEST_CASE("run directory: run files that are symbolic links are refused and their targets untouched") {
  TempDir dir;
  const std::string victim = dir.write("victim.jsonl", "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  for (const char* name : {"metrics.jsonl", "config.json", "summary.json", "checkpoint.safetensors"}) {
    CAPTURE(name);
    const fs::path run = dir.path / (std::string("run_") + name);
    fs::create_directories(run);
    fs::create_symlink(victim, run / name);
    const std::string message = error_of([&] { train::RunDirectory(run.string(), false); });
    CHECK(message.find((run / name).string() + ": is a symbolic link") == 0);
  }
  CHECK(error_of([&] {
          train::truncate_metrics((dir.path / "run_metrics.jsonl" / "metrics.jsonl").string(), 1);
        }).find("is a symbolic link") != std::string::npos);
  CHECK(read_text(victim) == "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
}

TEST_CASE("run directory: a file where a directory should be is named (not 'Success')") {
  TempDir dir;
  dir.write("runs", "a file");
  const std::string message = error_of([&] { io::make_directories(dir.sub("runs") + "/x/y", "run directory"); });
  CHECK(message ==
        dir.sub("runs") + "/x/y: cannot create the run directory: " + dir.sub("runs") + " is a file, not a directory");
}

TEST_CASE("resume of a finished run says there is nothing to do and how to extend it") {
  TempDir dir("normlab_test_finished");
  const std::string config = dir.write("config.json", kQuickConfig);
  const std::string run = dir.sub("run");
  REQUIRE(run_normlab({"train", "--config", config, "--out", run}, dir.sub("o"), dir.sub("e")) == 0);
  const std::string metrics = read_text(run + "/metrics.jsonl");
  const std::string summary = read_text(run + "/summary.json");
  CHECK(run_normlab({"train", "--resume", run}, dir.sub("o2"), dir.sub("e2")) == 0);
  const std::string message = read_text(dir.sub("e2"));
  CHECK(message.find("already finished its 12 steps; nothing to do") != std::string::npos);
  CHECK(message.find("--set train.steps=N") != std::string::npos);
  CHECK(read_text(run + "/metrics.jsonl") == metrics);
  CHECK(read_text(run + "/summary.json") == summary);
}
