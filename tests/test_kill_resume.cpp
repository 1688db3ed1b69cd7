// Nothing is lost: real `normlab train` processes killed with SIGKILL at a random step, stopped
// with SIGTERM / SIGINT, or denied their disk, then resumed, must end exactly where an uninterrupted
// run ends (docs/RELIABILITY.md).
#include <doctest/doctest.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using normlab::test::Child;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

// Big enough that a run lasts a few hundred steps' worth of milliseconds (time to aim a signal at
// a step), small enough for a unit test. Dropout is on so the restored step must give back the masks too; the
// checkpoint interval is odd so most kills land between checkpoints. The schedule does not depend
// on train.steps and step 20 is an evaluation step, so a run trained to 20 steps (which evaluates at
// its end) and extended to 120 follows the 120-step run.
const char* kConfig = R"({
  "model": {"d_model": 32, "heads": 2, "layers": 2, "ffn": 64, "max_len": 24, "dropout": 0.1},
  "task": {"name": "reverse", "min_len": 1, "max_len": 20, "eval_max_len": 24, "eval_examples": 64, "bucket_width": 4},
  "optim": {"lr": 0.003, "warmup_steps": 10, "schedule": "warmup"},
  "train": {"steps": 120, "batch_size": 32, "eval_every": 10, "log_every": 10, "diagnostics_every": 10,
            "checkpoint_every": 7, "threads": 1}
})";

// The fields that may differ between an interrupted and an uninterrupted run: wall-clock ones.
void drop_timing(json& j) {
  if (j.is_object()) {
    j.erase("tokens_per_s");
    j.erase("wall_time_s");
    j.erase("timing");  // summary.json and the checkpoint: where the time went (run_clock.hpp)
    for (auto& [key, value] : j.items()) drop_timing(value);
  } else if (j.is_array()) {
    for (json& value : j) drop_timing(value);
  }
}

// metrics.jsonl as one canonical string per line (doubles printed round-trip exact), timing dropped.
std::vector<std::string> metrics_lines(const std::string& run_dir) {
  std::vector<std::string> lines;
  std::string text = read_text(run_dir + "/metrics.jsonl");
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    REQUIRE_MESSAGE(end != std::string::npos, run_dir << "/metrics.jsonl ends with a torn line");
    json record = json::parse(text.substr(start, end - start));
    drop_timing(record);
    lines.push_back(record.dump());
    start = end + 1;
  }
  return lines;
}

std::string summary_text(const std::string& run_dir) {
  json summary = json::parse(read_text(run_dir + "/summary.json"));
  drop_timing(summary);
  return summary.dump();
}

int64_t count_lines(const std::string& path) {
  const std::string text = read_text(path);
  int64_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// kConfig trained uninterrupted, once per test process; the directory goes at exit.
const std::string& reference_run() {
  static TempDir owner("normlab_test_reference");
  static const std::string dir = [] {
    const std::string config = owner.write("config.json", kConfig);
    const std::string run = owner.sub("run");
    const int code =
        run_normlab({"train", "--config", config, "--out", run}, owner.sub("out.txt"), owner.sub("err.txt"));
    REQUIRE_MESSAGE(code == 0, read_text(owner.sub("err.txt")));
    return run;
  }();
  return dir;
}

// Waits until `path` has at least `lines` lines (or the child has been running for 60 s).
void wait_for_lines(const std::string& path, int64_t lines) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (count_lines(path) < lines && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

void check_same_as_reference(const std::string& run_dir, const std::string& reference) {
  const std::vector<std::string> ours = metrics_lines(run_dir), theirs = metrics_lines(reference);
  CHECK(ours.size() == theirs.size());
  for (size_t i = 0; i < std::min(ours.size(), theirs.size()); ++i) {
    INFO("metrics.jsonl line " << i + 1);
    REQUIRE(ours[i] == theirs[i]);
  }
  CHECK(summary_text(run_dir) == summary_text(reference));
}

}  // namespace

TEST_CASE("kill -9 at a random step, then --resume: metrics and summary equal an uninterrupted run's bit for bit") {
  TempDir dir("normlab_test_kill");
  const std::string reference = reference_run();
  const std::string config = dir.write("config.json", kConfig);
  std::random_device entropy;
  std::mt19937 pick(entropy());
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t kill_after_lines = std::uniform_int_distribution<int64_t>(1, 110)(pick);
    const std::string run = dir.sub("run" + std::to_string(trial));
    {
      Child child({"train", "--config", config, "--out", run}, dir.sub("out.txt"), dir.sub("err.txt"));
      REQUIRE(child.started());
      wait_for_lines(run + "/metrics.jsonl", kill_after_lines);
      child.signal(SIGKILL);
      const int code = child.wait();
      const int64_t lines_at_kill = count_lines(run + "/metrics.jsonl");
      INFO("trial " << trial << ": SIGKILL after " << lines_at_kill << " metrics lines (aimed at " << kill_after_lines
                    << "), exit " << code);
      if (code == 0) {
        MESSAGE("the run finished before the kill landed; nothing to resume in this trial");
        continue;
      }
      CHECK(code == 128 + SIGKILL);
      CHECK(!fs::exists(run + "/summary.json"));
    }
    // A kill before the first checkpoint leaves nothing to resume: the run is started afresh, as
    // docs/run-directory.md says; otherwise --resume continues from the last checkpoint.
    std::vector<std::string> args{"train", "--config", config, "--out", run};
    if (fs::exists(run + "/checkpoint.safetensors")) args.push_back("--resume");
    const int code = run_normlab(args, dir.sub("out.txt"), dir.sub("err.txt"));
    REQUIRE_MESSAGE(code == 0, read_text(dir.sub("err.txt")));
    check_same_as_reference(run, reference);
    for (const auto& entry : fs::directory_iterator(run)) {
      CHECK_MESSAGE(entry.path().string().find(".tmp.") == std::string::npos, "leftover temp file " << entry.path());
    }
  }
}

TEST_CASE(
    "SIGTERM and SIGINT: the step in flight finishes, a checkpoint is written, exit 143 / 130, --resume continues") {
  TempDir dir("normlab_test_term");
  const std::string reference = reference_run();
  const std::string config = dir.write("config.json", kConfig);
  for (int signal_number : {SIGTERM, SIGINT}) {
    const std::string run = dir.sub(signal_number == SIGTERM ? "term" : "int");
    const std::string err = dir.sub(signal_number == SIGTERM ? "term.txt" : "int.txt");
    {
      // Held after step 30 (past several checkpoints, far from the end) and signalled there.
      normlab::test::PausePoint pause(dir, "step 30");
      Child child({"train", "--config", config, "--out", run}, dir.sub("out.txt"), err, {}, {pause.env()});
      REQUIRE(child.started());
      REQUIRE(pause.wait(1).size() == 1);
      child.signal(signal_number);
      const int code = child.wait();
      INFO(read_text(err));
      CHECK(code == (signal_number == SIGTERM ? 143 : 130));
    }
    CHECK(!fs::exists(run + "/summary.json"));  // not finished: compare would resume it
    REQUIRE(fs::exists(run + "/checkpoint.safetensors"));
    CHECK(read_text(err).find("continue with: normlab train --resume " + run) != std::string::npos);
    // The checkpoint holds the state after the last step in metrics.jsonl: the resume keeps every
    // line (it would cut back to an older checkpoint otherwise).
    const std::vector<std::string> before = metrics_lines(run);
    const int code = run_normlab({"train", "--resume", run}, dir.sub("out.txt"), dir.sub("err.txt"));
    REQUIRE_MESSAGE(code == 0, read_text(dir.sub("err.txt")));
    const std::vector<std::string> after = metrics_lines(run);
    REQUIRE(after.size() >= before.size());
    CHECK(std::equal(before.begin(), before.end(), after.begin()));
    check_same_as_reference(run, reference);
  }
}

TEST_CASE(
    "a full disk (file size limit) mid-run: exit 2, one line naming the checkpoint, the previous checkpoint intact") {
  TempDir dir("normlab_test_full");
  const std::string reference = reference_run();
  const std::string config = dir.write("config.json", kConfig);
  const std::string run = dir.sub("run");
  // Train 20 of the 120 steps (checkpoints at 7, 14 and, the session's end, 20).
  REQUIRE(run_normlab({"train", "--config", config, "--out", run, "--set", "train.steps=20"}, dir.sub("out.txt"),
                      dir.sub("err.txt")) == 0);
  const std::string checkpoint_before = read_text(run + "/checkpoint.safetensors");
  REQUIRE(checkpoint_before.size() > 64 * 1024);
  REQUIRE(fs::file_size(run + "/metrics.jsonl") < 32 * 1024);

  // Resume to 120 steps with files capped at 64 KiB: metrics.jsonl still fits, the next checkpoint
  // (step 21: the first multiple of 7 after 20) does not. write() then fails with EFBIG, as on a
  // full disk.
  const std::string err = dir.sub("full.txt");
  Child child({"train", "--resume", run, "--set", "train.steps=120"}, dir.sub("out.txt"), err, [] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {};
    limit.rlim_cur = limit.rlim_max = 64 * 1024;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  });
  REQUIRE(child.started());
  const int code = child.wait();
  const std::string message = read_text(err);
  INFO(message);
  CHECK(code == 2);
  CHECK(message.find("normlab: error: " + run + "/checkpoint.safetensors: cannot write: File too large\n") !=
        std::string::npos);
  CHECK(read_text(run + "/checkpoint.safetensors") == checkpoint_before);  // the old one, whole
  CHECK(!fs::exists(run + "/summary.json"));
  for (const auto& entry : fs::directory_iterator(run)) {
    CHECK_MESSAGE(entry.path().string().find(".tmp.") == std::string::npos, "leftover temp file " << entry.path());
  }

  // With room again, the resume from that checkpoint ends where the uninterrupted run ends.
  REQUIRE(run_normlab({"train", "--resume", run, "--set", "train.steps=120"}, dir.sub("out.txt"), dir.sub("err.txt")) ==
          0);
  check_same_as_reference(run, reference);
}

TEST_CASE("an unwritable run directory: exit 2 naming the file, the checkpoint untouched") {
  TempDir dir("normlab_test_readonly");
  const std::string config = dir.write("config.json", kConfig);
  const std::string run = dir.sub("run");
  REQUIRE(run_normlab({"train", "--config", config, "--out", run, "--set", "train.steps=10"}, dir.sub("out.txt"),
                      dir.sub("err.txt")) == 0);
  const std::string checkpoint_before = read_text(run + "/checkpoint.safetensors");
  const std::string metrics_before = read_text(run + "/metrics.jsonl");

  // Read-only for everyone. root ignores permission bits, so as root the child drops to the
  // `nobody` user before exec (the test tree must then be readable by others: it is, 0755).
  fs::permissions(dir.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  for (const auto& entry : fs::recursive_directory_iterator(dir.path)) {
    fs::permissions(entry.path(), entry.is_directory() ? fs::perms(0555) : fs::perms(0444));
  }
  fs::permissions(dir.path, fs::perms(0755));
  const std::string out = dir.sub("ro_out.txt"), err = dir.sub("ro_err.txt");
  uid_t drop_to = 0;
  if (::geteuid() == 0) {
    const passwd* nobody = ::getpwnam("nobody");
    REQUIRE_MESSAGE(nobody != nullptr, "no 'nobody' user to drop root privileges to");
    drop_to = nobody->pw_uid;
  }
  Child child({"train", "--resume", run, "--set", "train.steps=30"}, out, err, [drop_to] {
    if (drop_to != 0 && ::setuid(drop_to) != 0) ::_exit(126);
  });
  REQUIRE(child.started());
  const int code = child.wait();
  const std::string message = read_text(err);
  if (code == 126 || code == 127) {
    MESSAGE("cannot run normlab as 'nobody' here (binary not reachable): skipped");
  } else {
    INFO(message);
    CHECK(code == 2);
    CHECK(message.rfind("normlab: error: " + run + "/", 0) == 0);
    CHECK(message.find("\n") == message.size() - 1);  // one line
    CHECK(read_text(run + "/checkpoint.safetensors") == checkpoint_before);
    CHECK(read_text(run + "/metrics.jsonl") == metrics_before);
  }
  // Writable again, so the TempDir can clean up.
  for (const auto& entry : fs::recursive_directory_iterator(dir.path)) {
    fs::permissions(entry.path(), entry.is_directory() ? fs::perms(0755) : fs::perms(0644));
  }
}
