// Memory is estimated before it is used: the estimate (train/memory.hpp) against the measured peak
// RSS of real `normlab train` processes, refusals before allocation, and a resume that compares the
// checkpoint with the config before it builds a model.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/memory.hpp"
#include "normlab/train/trainer.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

// Runs `normlab ARGS...` and returns its peak resident set in bytes (-1 if it failed).
double peak_rss_bytes(std::vector<std::string> args, const std::string& log) {
  args.insert(args.begin(), NORMLAB_BINARY);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  if (::wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return double(usage.ru_maxrss) * 1024.0;  // Linux reports kilobytes
}

}  // namespace

TEST_CASE("memory: the estimate is within 1.5x of the measured peak RSS (logits, validation set, activations)") {
  TempDir dir("normlab_test_memory");
  struct Case {
    const char* name;
    const char* config;
  };
  const Case cases[] = {
      // Logits dominate: 8192 classes.
      {"logits", R"({"model": {"d_model": 64, "layers": 2, "ffn": 256, "max_len": 64, "num_classes": 8192},
         "task": {"max_len": 32, "eval_max_len": 64, "eval_examples": 64},
         "train": {"steps": 2, "batch_size": 32, "eval_every": 0, "checkpoint_every": 0, "threads": 1}})"},
      // The validation set dominates: 200 000 generated examples, a model too small to matter.
      {"validation", R"({"model": {"d_model": 2, "heads": 1, "layers": 1, "ffn": 2, "max_len": 64},
         "task": {"max_len": 4, "eval_max_len": 64, "eval_examples": 120000},
         "train": {"steps": 1, "batch_size": 512, "eval_every": 0, "checkpoint_every": 0, "threads": 1}})"},
      // File data: the King James Bible lines of configs/kjv-mlm.json (lengths from the file).
      {"kjv", R"({"model": {"d_model": 64, "layers": 2, "ffn": 256, "activation": "gelu", "max_len": 128},
         "task": {"name": "mlm_text", "train_file": ")" NORMLAB_SOURCE_DIR R"(/data/kjv/train.jsonl",
                  "valid_file": ")" NORMLAB_SOURCE_DIR R"(/data/kjv/valid.jsonl", "max_len": 96, "eval_max_len": 128,
                  "eval_examples": 390},
         "train": {"steps": 2, "batch_size": 32, "eval_every": 0, "checkpoint_every": 0, "threads": 1}})"},
      // Activations (attention over 512 tokens) dominate.
      {"activations", R"({"model": {"d_model": 128, "heads": 8, "layers": 1, "ffn": 512, "max_len": 512},
         "task": {"max_len": 512, "eval_max_len": 512, "eval_examples": 16},
         "train": {"steps": 1, "batch_size": 16, "eval_every": 0, "checkpoint_every": 0, "threads": 1}})"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string config = dir.write(std::string(c.name) + ".json", c.config);
    const double estimate = train::estimate_memory(train::load_config(config)).total();
    const double measured =
        peak_rss_bytes({"train", "--config", config, "--out", dir.sub(std::string("run_") + c.name)},
                       dir.sub("log.txt"));
    INFO(read_text(dir.sub("log.txt")));
    REQUIRE(measured > 0);
    INFO("estimate " << estimate / 1e6 << " MB, measured peak RSS " << measured / 1e6 << " MB");
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer's shadow memory and quarantine are not normlab's: the Release suite checks
    // the ratio; here the run must only succeed.
    MESSAGE("sanitizer build: peak RSS " << measured / 1e6 << " MB not compared with the estimate");
#else
    CHECK(estimate <= 1.5 * measured);
    CHECK(estimate >= measured / 1.5);
#endif
  }
}

TEST_CASE("memory: a run that would not fit is refused before allocation with the estimate and the limit") {
  TempDir dir;
  const std::string config = dir.write("x.json", "{}");
  const std::vector<std::string> huge{"model.num_classes=65536", "task.eval_examples=1000000", "task.eval_max_len=128",
                                      "train.batch_size=4096"};
  const train::RunConfig config_ok = train::load_config(config, huge);  // a valid config: the size is the run's
  std::string message;
  try {
    train::Trainer trainer(config_ok);
  } catch (const InputError& e) {
    message = e.what();
  }
  CHECK(message.rfind("model: this run would need about ", 0) == 0);
  CHECK(message.find("more than the limit of") != std::string::npos);
  CHECK(message.find("data ") != std::string::npos);
  // The command line names the config file in front, exit 2.
  std::vector<std::string> args{"train", "--config", config, "--out", dir.sub("run")};
  for (const std::string& set : huge) args.insert(args.end(), {"--set", set});
  CHECK(run_normlab(args, dir.sub("out.txt"), dir.sub("err.txt")) == 2);
  CHECK(read_text(dir.sub("err.txt")).find("normlab: error: " + config + " with --set model.num_classes=65536") == 0);
  CHECK(read_text(dir.sub("err.txt")).find(": model: this run would need about ") != std::string::npos);
  // The validation set alone: 1e6 examples of up to 4096 tokens (the issue's case: 0.08 GiB was estimated,
  // std::bad_alloc came after 3.9 GB).
  const train::RunConfig big_valid = [&] {
    train::RunConfig c;
    c.model.max_len = 4096;
    c.task.eval_max_len = 4096;
    c.task.eval_examples = 1000000;
    return c;
  }();
  CHECK(train::estimate_memory(big_valid).data > 30e9);
}

TEST_CASE("memory: compare refuses a grid cell that would not fit when it plans, before any run starts") {
  TempDir dir;
  dir.write("base.json", R"({"model": {"num_classes": 65536}, "task": {"eval_examples": 1000000, "eval_max_len": 128},
                            "train": {"batch_size": 4096}})");
  const std::string compare = dir.write("compare.json", R"({"base": "base.json", "grid": {"seeds": [0]}})");
  std::string message;
  try {
    (void)study::load_compare_plan(compare);
  } catch (const InputError& e) {
    message = e.what();
  }
  CHECK(message.rfind(compare + ": run ", 0) == 0);
  CHECK(message.find(": model: this run would need about ") != std::string::npos);
}

TEST_CASE("memory: --resume with a config.json edited to a bigger model is refused before the model is built") {
  TempDir dir("normlab_test_memory_resume");
  const std::string config = dir.write("c.json", R"({"model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 16},
    "task": {"max_len": 8, "eval_max_len": 8, "eval_examples": 8}, "train": {"steps": 4, "batch_size": 4}})");
  const std::string run = dir.sub("run");
  REQUIRE(run_normlab({"train", "--config", config, "--out", run, "--set", "train.steps=2"}, dir.sub("o"),
                      dir.sub("e")) == 0);
  std::string text = read_text(run + "/config.json");
  text.replace(text.find("\"d_model\": 16"), 13, "\"d_model\": 4096");
  text.replace(text.find("\"ffn\": 16"), 9, "\"ffn\": 16384");
  std::ofstream(run + "/config.json") << text;
  const double rss = peak_rss_bytes({"train", "--resume", run, "--set", "train.steps=4"}, dir.sub("log.txt"));
  CHECK(rss < 0);  // refused
  const std::string message = read_text(dir.sub("log.txt"));
  CHECK(message.find("normlab: error: " + run + "/checkpoint.safetensors: model.d_model: cannot change on resume") ==
        0);
}
