// Data-parallel training under a real mpirun (docs/scaling.md): N ranks against one process,
// local vs sync BatchNorm, repeatability, stop + resume, a dead rank. Each run is a tiny model for
// a few dozen steps, so a whole launch takes about a second. Skipped, saying so, in a build without
// MPI or without mpirun.
#include <doctest/doctest.h>

#ifndef NORMLAB_MPIRUN

TEST_CASE("dist mpi: SKIPPED (built without MPI or no mpirun found - see docs/scaling.md)") {
  MESSAGE("data-parallel tests skipped: this build has no MPI or no mpirun");
}

#else

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using normlab::test::read_text;
using normlab::test::TempDir;

namespace {

// `mpirun -np N PROGRAM ARGS...` with the environment OpenMPI needs in a container run as root.
class MpiJob {
 public:
  MpiJob(int ranks, const std::string& program, const std::vector<std::string>& args, const std::string& log,
         const std::vector<std::string>& mpirun_options = {}, const std::vector<std::string>& env = {}) {
    std::vector<std::string> all{NORMLAB_MPIRUN, "--oversubscribe", "--bind-to", "none"};
    all.insert(all.end(), mpirun_options.begin(), mpirun_options.end());
    for (const std::string& a : {std::string("-np"), std::to_string(ranks), program}) all.push_back(a);
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
      ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
      ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
      for (const std::string& e : env) ::setenv(e.substr(0, e.find('=')).c_str(), e.substr(e.find('=') + 1).c_str(), 1);
      // Under the sanitizer suite: OpenMPI's own start-up allocations are never freed, and its
      // components are unloaded before LeakSanitizer runs, so they cannot be suppressed by name.
      // The ranks keep every other AddressSanitizer check; leak checking covers normlab elsewhere.
      if (const char* asan = std::getenv("ASAN_OPTIONS")) {
        ::setenv("ASAN_OPTIONS", (std::string(asan) + ":detect_leaks=0").c_str(), 1);
      }
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~MpiJob() {
    if (pid_ > 0 && !reaped_) wait(std::chrono::seconds(0));  // SIGTERM, then SIGKILL (see wait)
  }
  pid_t pid() const { return pid_; }
  int wait(std::chrono::seconds timeout = std::chrono::seconds(120)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    bool terminated = false;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      const auto now = std::chrono::steady_clock::now();
      // Timed out: SIGTERM first, so that mpirun takes its ranks down (SIGKILL would orphan them,
      // still blocked in a collective); SIGKILL if it has not ended 10 s later.
      if (now > deadline && !terminated) {
        ::kill(pid_, SIGTERM);
        terminated = true;
      }
      if (now > deadline + std::chrono::seconds(10)) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        reaped_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    reaped_ = true;
    if (terminated) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

int mpirun(int ranks, const std::string& program, const std::vector<std::string>& args, const std::string& log) {
  MpiJob job(ranks, program, args, log);
  return job.wait();
}

// The pid of the process launched as `rank` by the mpirun `launcher` (a child of it whose
// environment says OMPI_COMM_WORLD_RANK=rank), or -1. Other jobs' ranks (ctest runs tests in
// parallel) are not children of this mpirun.
pid_t rank_pid(pid_t launcher, int rank) {
  const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const std::string stat = read_text(entry.path().string() + "/stat");  // pid (comm) state ppid ...
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    int parent = 0;
    if (std::sscanf(stat.c_str() + paren + 1, " %*c %d", &parent) != 1 || parent != launcher) continue;
    const std::string environ = read_text(entry.path().string() + "/environ");
    size_t at = 0;
    while (at < environ.size()) {
      const size_t end = environ.find('\0', at);
      if (environ.compare(at, (end == std::string::npos ? environ.size() : end) - at, wanted) == 0)
        return static_cast<pid_t>(std::stoi(name));
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  return -1;
}

// Waits (up to 60 s) until `path` has at least `lines` lines.
void wait_for_lines(const std::string& path, long lines) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = read_text(path);
    if (std::count(text.begin(), text.end(), '\n') >= lines) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Waits (up to 60 s) until the file at `path` contains `text`.
void wait_for_text(const std::string& path, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_text(path).find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// True while `pid` is a live (not zombie) process.
bool alive(pid_t pid) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

std::string tiny_config(const std::string& norm, const std::string& stats, int steps, int checkpoint_every = 0,
                        double dropout = 0.0) {
  return json{{"model",
               {{"d_model", 16},
                {"heads", 2},
                {"layers", 1},
                {"ffn", 32},
                {"max_len", 16},
                {"norm", norm},
                {"batchnorm_stats", stats},
                {"dropout", dropout}}},
              {"task",
               {{"name", "reverse"},
                {"min_len", 1},
                {"max_len", 12},
                {"eval_max_len", 12},
                {"eval_examples", 16},
                {"bucket_width", 4}}},
              {"optim", {{"lr", 0.003}, {"warmup_steps", 5}, {"schedule", "warmup"}, {"clip_grad_norm", 0.0}}},
              {"train",
               {{"steps", steps},
                {"batch_size", 8},
                {"eval_every", 0},
                {"log_every", 10},
                {"diagnostics_every", 0},
                {"checkpoint_every", checkpoint_every},
                {"threads", 1}}}}
      .dump();
}

// max over the tensor's entries of |a - b|, and max |a|.
std::pair<double, double> max_abs_diff(const json& a, const json& b) {
  double diff = 0.0, scale = 0.0;
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i].get<double>() - b[i].get<double>()));
    scale = std::max(scale, std::abs(a[i].get<double>()));
  }
  return {diff, scale};
}

// The tensor bytes of a safetensors file and its metadata without wall-clock time.
std::string checkpoint_identity(const std::string& path) {
  const std::string bytes = read_text(path);
  REQUIRE(bytes.size() > 8);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint8_t(bytes[size_t(i)]);
  json header = json::parse(bytes.substr(8, header_size));
  json trainer = json::parse(header["__metadata__"]["trainer"].get<std::string>());
  trainer.erase("wall_time_s");
  trainer.erase("timing");
  trainer["last_record"].erase("tokens_per_s");
  header["__metadata__"]["trainer"] = trainer.dump();
  return header.dump() + bytes.substr(8 + header_size);
}

}  // namespace

TEST_CASE(
    "dist mpi: 2 and 3 ranks match one process, with dropout too - local BatchNorm equals per-share normalization - "
    "not sync") {
  TempDir dir("normlab_dist");
  // ln_tiny: 2 sequences per batch, so on 3 ranks one rank's share is empty every step.
  // ln_drop: dropout 0.1, whose masks are keyed on each sequence's index in the global batch.
  const std::vector<std::string> norms = {"ln_tiny", "ln", "ln_drop", "rms", "bn_sync", "bn_local"};
  std::vector<std::string> runs;
  for (const std::string& name : norms) {
    const std::string norm = name.rfind("ln", 0) == 0 ? "layernorm" : name == "rms" ? "rmsnorm" : "batchnorm";
    const std::string stats = name == "bn_local" ? "local" : "sync";
    json config = json::parse(tiny_config(norm, stats, 30, 0, name == "ln_drop" ? 0.1 : 0.0));
    if (name == "ln_tiny") config["train"]["batch_size"] = 2;
    runs.push_back(name + "=" + dir.write(name + ".json", config.dump()));
  }
  std::vector<std::string> one_args{dir.sub("one.json"), "30"};
  one_args.insert(one_args.end(), runs.begin(), runs.end() - 1);
  auto run_probe = [&](int ranks, std::vector<std::string> args, const std::string& log) {
    if (ranks == 0) {  // one plain process, no mpirun
      std::vector<std::string> all{NORMLAB_DIST_PROBE};
      all.insert(all.end(), args.begin(), args.end());
      std::string command;
      for (const std::string& a : all) command += "'" + a + "' ";
      return std::system((command + ">" + log + " 2>&1").c_str());
    }
    return mpirun(ranks, NORMLAB_DIST_PROBE, args, log);
  };
  REQUIRE(run_probe(0, one_args, dir.sub("one.log")) == 0);
  REQUIRE(run_probe(0, {dir.sub("emulated.json"), "1", runs.back(), "--emulate-local", "2"}, dir.sub("emulated.log")) ==
          0);
  std::vector<std::string> two_args{dir.sub("two.json"), "30"};
  two_args.insert(two_args.end(), runs.begin(), runs.end());
  INFO("two.log: ", read_text(dir.sub("two.log")));
  REQUIRE(run_probe(2, two_args, dir.sub("two.log")) == 0);
  std::vector<std::string> three_args{dir.sub("three.json"), "30"};
  three_args.insert(three_args.end(), runs.begin(), runs.end() - 1);
  INFO("three.log: ", read_text(dir.sub("three.log")));
  REQUIRE(run_probe(3, three_args, dir.sub("three.log")) == 0);

  const json one = json::parse(read_text(dir.sub("one.json")));
  for (const char* file : {"two.json", "three.json"}) {
    const json many = json::parse(read_text(dir.sub(file)));
    for (const std::string name : {"ln_tiny", "ln", "ln_drop", "rms", "bn_sync"}) {
      INFO(file << " " << name);
      CHECK(many[name]["world_size"].get<int>() == (std::string(file) == "two.json" ? 2 : 3));
      // A bias followed by BatchNorm has a gradient that is zero in exact arithmetic (the
      // normalization removes any constant shift): its float value is rounding noise, so such a
      // tensor (its largest entry below 1e-6 of the model's largest gradient) is held to the
      // model's largest gradient instead of its own.
      double model_scale = 0.0;
      for (const auto& [param, grad] : one[name]["grads"].items())
        model_scale = std::max(model_scale, max_abs_diff(grad, grad).second);
      for (const auto& [param, grad] : one[name]["grads"].items()) {
        INFO(param);
        auto [diff, scale] = max_abs_diff(grad, many[name]["grads"][param]);
        CHECK(diff <= 1e-5 * (scale < 1e-6 * model_scale ? model_scale : scale));
      }
      // residual_rms over the global batch, as one process computes it (not rank 0's share).
      auto [rms_diff, rms_scale] = max_abs_diff(one[name]["residual_rms"], many[name]["residual_rms"]);
      CHECK(rms_scale > 0.0);
      CHECK(rms_diff <= 1e-5 * rms_scale);
      // The other diagnostics too: sums over every rank's tokens, maxima over every rank's. The
      // update ratio follows Adam's first step, lr * g / (|g| + eps), which moves where |g| ~ eps.
      for (const char* key :
           {"attention_max_logit", "attention_entropy_mean", "attention_entropy_min", "log_z", "update_ratio"}) {
        INFO(key);
        auto [diff, scale] = max_abs_diff(one[name][key], many[name][key]);
        CHECK(scale > 0.0);
        CHECK(diff <= (std::string(key) == "update_ratio" ? 1e-3 : 1e-5) * scale);
      }
      const double loss_one = one[name]["losses"].back().get<double>();
      const double loss_many = many[name]["losses"].back().get<double>();
      CHECK(std::abs(loss_many - loss_one) <= 1e-4 * std::abs(loss_one));
    }
  }
  // Local BatchNorm on 2 ranks = one process normalizing each of the 2 shares on its own ...
  const json two = json::parse(read_text(dir.sub("two.json")));
  const json emulated = json::parse(read_text(dir.sub("emulated.json")));
  double local_vs_sync = 0.0;
  for (const auto& [param, grad] : emulated["bn_local"]["grads"].items()) {
    INFO(param);
    auto [diff, scale] = max_abs_diff(grad, two["bn_local"]["grads"][param]);
    CHECK(diff <= 1e-5 * scale);
    auto [sync_diff, sync_scale] = max_abs_diff(grad, two["bn_sync"]["grads"][param]);
    if (sync_scale > 0) local_vs_sync = std::max(local_vs_sync, sync_diff / sync_scale);
  }
  // ... and not the global-statistics model.
  CHECK(local_vs_sync > 1e-3);
}

TEST_CASE("dist mpi: with gradient clipping active, 2 ranks match one process (the global norm is clipped)") {
  TempDir dir("normlab_dist_clip");
  json config = json::parse(tiny_config("layernorm", "sync", 12));
  config["optim"]["clip_grad_norm"] = 0.05;
  const std::string run = "clip=" + dir.write("clip.json", config.dump());
  const std::string probe = std::string("'") + NORMLAB_DIST_PROBE + "' ";
  REQUIRE(std::system(
              (probe + "'" + dir.sub("one.json") + "' 12 '" + run + "' >" + dir.sub("one.log") + " 2>&1").c_str()) ==
          0);
  INFO(read_text(dir.sub("two.log")));
  REQUIRE(mpirun(2, NORMLAB_DIST_PROBE, {dir.sub("two.json"), "12", run}, dir.sub("two.log")) == 0);
  const json one = json::parse(read_text(dir.sub("one.json")))["clip"];
  const json two = json::parse(read_text(dir.sub("two.json")))["clip"];
  // Clipping is active at every step: the norm before clipping is far above the threshold.
  for (const json& norm : one["grad_norms"]) CHECK(norm.get<double>() > 4 * 0.05);
  for (size_t step = 0; step < one["grad_norms"].size(); ++step) {
    INFO("step " << step + 1);
    const double a = one["grad_norms"][step].get<double>(), b = two["grad_norms"][step].get<double>();
    CHECK(std::abs(a - b) <= 1e-4 * a);
    const double la = one["losses"][step].get<double>(), lb = two["losses"][step].get<double>();
    CHECK(std::abs(la - lb) <= 1e-4 * std::abs(la));
  }
  // Step 1's clipped gradient, the one every rank applies.
  for (const auto& [param, grad] : one["grads"].items()) {
    INFO(param);
    auto [diff, scale] = max_abs_diff(grad, two["grads"][param]);
    CHECK(diff <= 1e-5 * scale + 1e-12);
  }
}

// A tagging config on files "train.jsonl" and "valid.jsonl" beside it (relative paths: resolved
// against the config's folder).
std::string file_config(int steps) {
  return json{{"model", {{"d_model", 16}, {"heads", 2}, {"layers", 1}, {"ffn", 32}, {"max_len", 16}}},
              {"task",
               {{"name", "token_classification"},
                {"train_file", "train.jsonl"},
                {"valid_file", "valid.jsonl"},
                {"max_len", 8},
                {"eval_max_len", 8},
                {"eval_examples", 8},
                {"bucket_width", 4}}},
              {"optim", {{"lr", 0.01}, {"warmup_steps", 2}}},
              {"train",
               {{"steps", steps}, {"batch_size", 4}, {"eval_every", 0}, {"checkpoint_every", 2}, {"threads", 1}}}}
      .dump();
}

// Lines of "a b c" tagged by a rule; `flip` tags every word the other way (same words, same lines).
std::string tagged_lines(bool flip) {
  std::string text;
  for (int i = 0; i < 24; ++i) {
    std::string tokens, tags;
    for (int t = 0; t < 2 + i % 5; ++t) {
      const int word = (i + 2 * t) % 3;
      tokens += std::string(t ? " " : "") + "abc"[word];
      tags += std::string(t ? " " : "") + (((word == 1) != flip) ? "X" : "Y");
    }
    text += "{\"tokens\": \"" + tokens + "\", \"targets\": \"" + tags + "\"}\n";
  }
  return text;
}

TEST_CASE("dist mpi: a resume under np=2 on a changed training file is refused in one line, nothing changed") {
  TempDir dir("normlab_dist_data");
  dir.write("train.jsonl", tagged_lines(false));
  dir.write("valid.jsonl", tagged_lines(false));
  const std::string config = dir.write("c.json", file_config(4));
  REQUIRE(mpirun(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("run")}, dir.sub("first.log")) == 0);
  dir.write("train.jsonl", tagged_lines(true));
  const std::string checkpoint = read_text(dir.sub("run/checkpoint.safetensors"));
  const std::string metrics = read_text(dir.sub("run/metrics.jsonl"));
  const int code =
      mpirun(2, NORMLAB_BINARY, {"train", "--resume", dir.sub("run"), "--set", "train.steps=6"}, dir.sub("resume.log"));
  const std::string log = read_text(dir.sub("resume.log"));
  INFO(log);
  CHECK(code == 2);
  CHECK(count_of(log, "(task.train_file): its content changed") == 1);
  CHECK(log.find("data-parallel rank 1") == std::string::npos);  // rank 0's line: every rank agreed
  CHECK(read_text(dir.sub("run/checkpoint.safetensors")) == checkpoint);
  CHECK(read_text(dir.sub("run/metrics.jsonl")) == metrics);
}

TEST_CASE("dist mpi: a rank that reads other content than rank 0 stops every rank before anything is written") {
  // One job, two working directories: each rank resolves the same relative config to its own files.
  TempDir dir("normlab_dist_data");
  for (const std::string side : {"a", "b"}) {
    fs::create_directories(dir.sub(side));
    dir.write(side + "/train.jsonl", tagged_lines(side == "b"));
    dir.write(side + "/valid.jsonl", tagged_lines(false));
    dir.write(side + "/c.json", file_config(4));
  }
  const std::vector<std::string> args{"train", "--config", "c.json", "--out", dir.sub("run")};
  std::vector<std::string> first_app{"-np", "1", "-wdir", dir.sub("a"), NORMLAB_BINARY};
  first_app.insert(first_app.end(), args.begin(), args.end());
  first_app.insert(first_app.end(), {":", "-wdir", dir.sub("b")});
  MpiJob job(1, NORMLAB_BINARY, args, dir.sub("run.log"), first_app);
  const int code = job.wait(std::chrono::seconds(60));
  const std::string log = read_text(dir.sub("run.log"));
  INFO(log);
  CHECK(code == 2);
  CHECK(count_of(log, "data-parallel rank 1's task.train_file has other content than rank 0's " + dir.sub("a") +
                          "/train.jsonl") == 1);
  CHECK(!fs::exists(dir.sub("run")));
}

TEST_CASE("dist mpi: two np=2 runs write identical checkpoints - world_size is recorded - another N cannot resume") {
  TempDir dir("normlab_dist");
  const std::string config = dir.write("c.json", tiny_config("layernorm", "local", 12, 0, /*dropout=*/0.1));
  for (const char* run : {"a", "b"}) {
    INFO(read_text(dir.sub(std::string(run) + ".log")));
    REQUIRE(mpirun(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub(run)},
                   dir.sub(std::string(run) + ".log")) == 0);
  }
  CHECK(checkpoint_identity(dir.sub("a/checkpoint.safetensors")) ==
        checkpoint_identity(dir.sub("b/checkpoint.safetensors")));
  const json config_json = json::parse(read_text(dir.sub("a/config.json")));
  CHECK(config_json["train"]["world_size"] == 2);
  const json summary = json::parse(read_text(dir.sub("a/summary.json")));
  CHECK(summary["world_size"] == 2);
  // Rank 0 alone wrote metrics.jsonl: one line per step plus the final evaluation.
  const std::string metrics = read_text(dir.sub("a/metrics.jsonl"));
  CHECK(std::count(metrics.begin(), metrics.end(), '\n') == 13);

  // A different number of processes is refused with exit 2, naming the key.
  const int code = normlab::test::run_normlab({"train", "--resume", dir.sub("a"), "--set", "train.steps=20"},
                                              dir.sub("r.out"), dir.sub("r.err"));
  CHECK(code == 2);
  CHECK(read_text(dir.sub("r.err")).find("train.world_size") != std::string::npos);
}

TEST_CASE(
    "dist mpi: SIGTERM to the ranks checkpoints and exits 143 - --resume under np=2 ends where an uninterrupted run "
    "ends") {
  TempDir dir("normlab_dist");
  const std::string config = dir.write("c.json", tiny_config("batchnorm", "sync", 120, 0));
  REQUIRE(mpirun(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("full")}, dir.sub("full.log")) == 0);
  {
    // Both ranks hold after step 5 (NORMLAB_TEST_PAUSE_AT) and are signalled there.
    normlab::test::PausePoint pause(dir, "step 5");
    MpiJob job(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("cut")}, dir.sub("cut.log"), {},
               {pause.env()});
    REQUIRE(pause.wait(2).size() == 2);
    // As a terminal's Ctrl-C (the whole process group) or Slurm's scancel --signal do: every rank.
    // (mpirun itself, signalled, kills the ranks after odls_base_sigkill_timeout: docs/scaling.md.)
    const pid_t rank0 = rank_pid(job.pid(), 0), rank1 = rank_pid(job.pid(), 1);
    REQUIRE(rank0 > 0);
    REQUIRE(rank1 > 0);
    ::kill(rank0, SIGTERM);
    ::kill(rank1, SIGTERM);
    CHECK(job.wait(std::chrono::seconds(60)) == 143);
  }
  INFO(read_text(dir.sub("cut.log")));
  REQUIRE(fs::exists(dir.sub("cut/checkpoint.safetensors")));
  CHECK(!fs::exists(dir.sub("cut/summary.json")));
  CHECK(read_text(dir.sub("cut.log")).find("terminated (SIGTERM)") != std::string::npos);
  // With --config as well: the file says nothing of world_size, the checkpoint says 2, the launch 2.
  REQUIRE(mpirun(2, NORMLAB_BINARY, {"train", "--config", config, "--resume", dir.sub("cut")}, dir.sub("resume.log")) ==
          0);
  CHECK(checkpoint_identity(dir.sub("cut/checkpoint.safetensors")) ==
        checkpoint_identity(dir.sub("full/checkpoint.safetensors")));
}

TEST_CASE("dist mpi: a dead rank stops the others within seconds - --resume under np=2 then ends bit-identically") {
  TempDir dir("normlab_dist");
  // Dropout on: the resumed run must draw the masks the uninterrupted one draws.
  const std::string config = dir.write("c.json", tiny_config("layernorm", "local", 60, 4, /*dropout=*/0.1));
  REQUIRE(mpirun(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("full")}, dir.sub("full.log")) == 0);

  // Both ranks hold after step 5 (NORMLAB_TEST_PAUSE_AT); rank 1 is killed there, then rank 0 goes
  // on and meets the dead rank in the next step's reduction.
  normlab::test::PausePoint pause(dir, "step 5");
  MpiJob job(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("run")}, dir.sub("run.log"), {},
             {pause.env()});
  REQUIRE(pause.wait(2).size() == 2);
  const pid_t victim = rank_pid(job.pid(), 1), survivor = rank_pid(job.pid(), 0);
  REQUIRE(victim > 0);
  REQUIRE(survivor > 0);
  ::kill(victim, SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  pause.resume(survivor);
  const int code = job.wait(std::chrono::seconds(30));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const std::string log = read_text(dir.sub("run.log"));
  INFO(log);
  CHECK(code != 0);
  CHECK(code != -1);  // it ended by itself
  CHECK(seconds < 10.0);
  CHECK(log.find("rank 1") != std::string::npos);
  // The survivor is gone too, within the same seconds (mpirun may return while it still exits:
  // under a sanitizer its exit-time checks take a moment).
  while (alive(survivor) && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(!alive(survivor));

  REQUIRE(fs::exists(dir.sub("run/checkpoint.safetensors")));
  REQUIRE(mpirun(2, NORMLAB_BINARY, {"train", "--resume", dir.sub("run")}, dir.sub("resume.log")) == 0);
  CHECK(checkpoint_identity(dir.sub("run/checkpoint.safetensors")) ==
        checkpoint_identity(dir.sub("full/checkpoint.safetensors")));
}

// A refusal found by one rank before the first step (here rank 0's run-directory lock) is agreed
// by every rank: the job ends at once, exit 2, with the one line.
TEST_CASE("dist mpi: a second np=2 job on a run directory in use exits 2 within seconds with the lock message") {
  TempDir dir("normlab_dist");
  const std::string config = dir.write("c.json", tiny_config("layernorm", "local", 1000000, 0));
  MpiJob first(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("run")}, dir.sub("first.log"));
  wait_for_lines(dir.sub("run/metrics.jsonl"), 2);
  REQUIRE(fs::exists(dir.sub("run/metrics.jsonl")));

  MpiJob second(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("run")}, dir.sub("second.log"));
  // From the refusal on (MPI's start-up time aside), the whole job ends within seconds.
  wait_for_text(dir.sub("second.log"), "the run directory is in use by another normlab process (pid ");
  const auto refused = std::chrono::steady_clock::now();
  const int code = second.wait(std::chrono::seconds(15));  // a hang fails here, not at ctest's timeout
  const double seconds = seconds_since(refused);
  const std::string log = read_text(dir.sub("second.log"));
  INFO(log);
  CHECK(code == 2);
  CHECK(seconds < 10.0);
  CHECK(count_of(log, "the run directory is in use by another normlab process (pid ") == 1);

  // The same for a resume of it (every rank loads the checkpoint, rank 0 also takes the lock).
  ::kill(first.pid(), SIGUSR1);  // ends the first job (the grace-period recipe, tested below)
  CHECK(first.wait(std::chrono::seconds(60)) == 143);
}

// A failure one rank meets during training (rank 0 cannot write the checkpoint: its path became a
// directory) cannot be agreed: that rank ends the whole job (MPI_Abort) with its line.
TEST_CASE("dist mpi: an error on rank 0 during training ends every rank within seconds, with its line") {
  TempDir dir("normlab_dist");
  const std::string config = dir.write("c.json", tiny_config("layernorm", "local", 1000000, 20));
  // Both ranks hold after step 20, its checkpoint written (NORMLAB_TEST_PAUSE_AT), while the
  // checkpoint's path is made a directory; then they go on.
  normlab::test::PausePoint pause(dir, "step 20");
  MpiJob job(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("run")}, dir.sub("run.log"), {},
             {pause.env()});
  const std::string checkpoint = dir.sub("run/checkpoint.safetensors");
  const std::vector<pid_t> ranks = pause.wait(2);
  REQUIRE(ranks.size() == 2);
  REQUIRE(fs::exists(checkpoint));
  const pid_t rank1 = rank_pid(job.pid(), 1);
  REQUIRE(rank1 > 0);
  fs::remove(checkpoint);
  fs::create_directories(checkpoint + "/occupied");
  for (pid_t rank : ranks) pause.resume(rank);
  // The next checkpoint (20 steps on) fails on rank 0; from its line on, the job ends within seconds.
  wait_for_text(dir.sub("run.log"), "normlab: error: data-parallel rank 0: ");
  const auto failed = std::chrono::steady_clock::now();
  const int code = job.wait(std::chrono::seconds(15));
  const double seconds = seconds_since(failed);
  const std::string log = read_text(dir.sub("run.log"));
  INFO(log);
  CHECK(code == 2);
  CHECK(seconds < 10.0);
  CHECK(count_of(log, "normlab: error: data-parallel rank 0: " + checkpoint) == 1);
  // Rank 1 is gone within the same seconds; mpirun may return while it still exits (MPI_Abort's
  // SIGTERM reaches it a moment later on a loaded machine).
  while (alive(rank1) && seconds_since(failed) < 10.0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(!alive(rank1));
}

// mpirun --mca odls_base_sigkill_timeout 30 stops forwarding SIGTERM to the ranks (OpenMPI 4.1),
// so the grace period is SIGUSR1 to mpirun: forwarded to every rank, with no SIGKILL after it.
// Rank 1 is held stopped for 3 s: a rank slower than mpirun's 1 s SIGTERM grace still checkpoints.
TEST_CASE(
    "dist mpi: SIGUSR1 to mpirun stops every rank with a checkpoint, however long - the stop line names mpirun -np 2") {
  TempDir dir("normlab_dist");
  const std::string config = dir.write("c.json", tiny_config("layernorm", "local", 1000000, 0));
  MpiJob job(2, NORMLAB_BINARY, {"train", "--config", config, "--out", dir.sub("run")}, dir.sub("run.log"));
  wait_for_lines(dir.sub("run/metrics.jsonl"), 5);
  const pid_t rank1 = rank_pid(job.pid(), 1);
  REQUIRE(rank1 > 0);
  ::kill(rank1, SIGSTOP);
  ::kill(job.pid(), SIGUSR1);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ::kill(rank1, SIGCONT);
  const int code = job.wait(std::chrono::seconds(60));
  const std::string log = read_text(dir.sub("run.log"));
  INFO(log);
  CHECK(code == 143);
  REQUIRE(fs::exists(dir.sub("run/checkpoint.safetensors")));
  CHECK(!fs::exists(dir.sub("run/summary.json")));
  CHECK(count_of(log, "normlab: terminated (SIGUSR1) after step ") == 1);
  CHECK(count_of(log, "continue with: mpirun -np 2 normlab train --resume " + dir.sub("run") + "\n") == 1);
  // The checkpoint holds the state after the last step in metrics.jsonl.
  const std::string metrics = read_text(dir.sub("run/metrics.jsonl"));
  const size_t steps = size_t(std::count(metrics.begin(), metrics.end(), '\n'));
  CHECK(log.find(fmt::format("after step {} of", steps)) != std::string::npos);
}

// Only train is data-parallel: the other verbs refuse a multi-process launch in one line.
TEST_CASE(
    "dist mpi: mpirun -np 2 around eval, compare, report or bench is refused in one line (compare: use --shard)") {
  TempDir dir("normlab_dist");
  const std::string config = dir.write("c.json", tiny_config("layernorm", "local", 2, 0));
  REQUIRE(normlab::test::run_normlab({"train", "--config", config, "--out", dir.sub("run")}, dir.sub("t.out"),
                                     dir.sub("t.err")) == 0);
  const std::vector<std::vector<std::string>> commands = {{"eval", "--run", dir.sub("run")},
                                                          {"predict", "--run", dir.sub("run"), "--input", "1 2 3"},
                                                          {"compare", "--config", config, "--out", dir.sub("cmp")},
                                                          {"report", dir.sub("run"), "--out", dir.sub("rep")},
                                                          {"bench", "layernorm", "--shape", "2,4,8"}};
  for (const std::vector<std::string>& args : commands) {
    INFO(args[0]);
    const std::string log = dir.sub(args[0] + ".log");
    const auto start = std::chrono::steady_clock::now();
    CHECK(mpirun(2, NORMLAB_BINARY, args, log) == 2);
    CHECK(seconds_since(start) < 30.0);
    const std::string text = read_text(log);
    INFO(text);
    CHECK(count_of(text, "normlab: error: " + args[0] +
                             " is not data-parallel, but it was launched as one of 2 "
                             "processes (mpirun -np 2)") == 1);
    CHECK(count_of(text, "normlab: error:") == 1);
    CHECK((args[0] == "compare") == (text.find("--shard I/K") != std::string::npos));
  }
  CHECK(!fs::exists(dir.sub("cmp")));
  CHECK(!fs::exists(dir.sub("rep")));
}

#endif
