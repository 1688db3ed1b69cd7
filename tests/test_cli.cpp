// Tests of the real `normlab` binary: exit codes, error lines, and the train / eval / predict /
// bench step verbs end to end on a tiny config.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "normlab/parallel.hpp"
#include "support.hpp"

using normlab::test::read_text;
using normlab::test::TempDir;

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
  int64_t err_lines() const {
    int64_t n = 0;
    for (char c : err) n += c == '\n';
    return n;
  }
};

// Runs `normlab ARGS` (in `cwd` if given, under `env VARS` if given) with stdout and stderr
// captured in files.
Result run_cli(const TempDir& dir, const std::string& args, const std::string& cwd = "", const std::string& env = "") {
  const std::string out = dir.sub("stdout.txt"), err = dir.sub("stderr.txt");
  std::string command = (env.empty() ? "" : "env " + env + " ") + std::string("\"") + NORMLAB_BINARY + "\" " + args +
                        " >\"" + out + "\" 2>\"" + err + "\"";
  if (!cwd.empty()) command = "cd \"" + cwd + "\" && " + command;
  const int status = std::system(command.c_str());
  Result result;
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_text(out);
  result.err = read_text(err);
  return result;
}

const char* kTinyConfig = R"({
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 32, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 8, "batch_size": 8, "eval_every": 4, "log_every": 2, "diagnostics_every": 4,
            "checkpoint_every": 4, "threads": 1}
})";

}  // namespace

TEST_CASE("cli: --help works for the program and each verb") {
  TempDir dir;
  Result top = run_cli(dir, "--help");
  CHECK(top.code == 0);
  CHECK(top.out.find("train") != std::string::npos);
  Result train = run_cli(dir, "train --help");
  CHECK(train.code == 0);
  CHECK(train.out.find("--config") != std::string::npos);
  CHECK(train.out.find("--resume") != std::string::npos);
  for (const char* verb : {"eval --help", "predict --help", "bench step --help"}) {
    INFO(verb);
    CHECK(run_cli(dir, verb).code == 0);
  }
}

TEST_CASE("cli: a bad config exits 2 with one line naming the file and the key") {
  TempDir dir;
  const std::string path = dir.write("bad.json", R"({"model": {"d_modle": 64}})");
  Result r = run_cli(dir, "train --config " + path + " --out " + dir.sub("run"));
  CHECK(r.code == 2);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find(path + ": model.d_modle: unknown key (did you mean 'model.d_model'?)") != std::string::npos);
  CHECK(!fs::exists(dir.sub("run")));

  Result set = run_cli(dir, "train --config " + dir.write("ok.json", kTinyConfig) + " --set optim.lr=abc --out " +
                                dir.sub("run"));
  CHECK(set.code == 2);
  CHECK(set.err_lines() == 1);
  CHECK(set.err.find("--set optim.lr=abc: optim.lr: must be a number in (0, 10], got \"abc\"") != std::string::npos);
}

TEST_CASE("cli: a missing config file exits 2") {
  TempDir dir;
  Result r = run_cli(dir, "train --config " + dir.sub("nope.json"));
  CHECK(r.code == 2);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find(dir.sub("nope.json")) != std::string::npos);
  CHECK(run_cli(dir, "train").code == 2);  // neither --config nor --resume
  CHECK(run_cli(dir, "eval --run " + dir.sub("nothing")).code == 2);
}

TEST_CASE("cli: train, eval and predict on a tiny config") {
  TempDir dir;
  const std::string config = dir.write("tiny.json", kTinyConfig);
  const std::string run = dir.sub("run");
  Result train = run_cli(dir, "train --config " + config + " --out " + run);
  INFO(train.err);
  REQUIRE(train.code == 0);
  for (const char* file : {"config.json", "metrics.jsonl", "checkpoint.safetensors", "summary.json"}) {
    INFO(file);
    CHECK(fs::is_regular_file(fs::path(run) / file));
  }
  CHECK(train.out.find("trained 8 steps") != std::string::npos);
  json summary = json::parse(read_text(run + "/summary.json"));
  CHECK(summary["steps"] == 8);
  CHECK(summary["diverged"] == false);
  // Not a terminal: plain progress lines every log_every steps.
  CHECK(train.err.find("step 2/8") != std::string::npos);
  CHECK(train.err.find("step 3/8") == std::string::npos);

  Result eval = run_cli(dir, "eval --run " + run);
  CHECK(eval.code == 0);
  CHECK(eval.out.find("lengths") != std::string::npos);
  CHECK(eval.out.find("9-12*") != std::string::npos);  // beyond the training maximum of 8
  CHECK(eval.out.find("all") != std::string::npos);
  Result eval_json = run_cli(dir, "eval --run " + run + " --json");
  CHECK(eval_json.code == 0);
  json metrics = json::parse(eval_json.out);
  CHECK(metrics["sequences"] == 32);
  CHECK(metrics["loss"].get<double>() == doctest::Approx(summary["final_valid"]["loss"].get<double>()));

  const std::string data = dir.write("data.jsonl", "{\"tokens\":[\"1\",\"2\"],\"targets\":[\"2\",\"1\"]}\n");
  Result eval_data = run_cli(dir, "eval --run " + run + " --data " + data + " --json");
  CHECK(eval_data.code == 0);
  CHECK(json::parse(eval_data.out)["sequences"] == 1);
  const std::string too_long =
      dir.write("long.jsonl", "{\"tokens\":[\"1\"],\"targets\":[\"1\"]}\n{\"tokens\":" +
                                  json(std::vector<std::string>(20, "1")).dump() +
                                  ",\"targets\":" + json(std::vector<std::string>(20, "1")).dump() + "}\n");
  // Longer than model.max_len: skipped and counted, as training and validation do.
  Result eval_long = run_cli(dir, "eval --run " + run + " --data " + too_long);
  CHECK(eval_long.code == 0);
  CHECK(eval_long.out.find("used 1 of 2 lines: 1 longer than model.max_len") != std::string::npos);

  Result predict = run_cli(dir, "predict --run " + run + " --input '1 2 3'");
  CHECK(predict.code == 0);
  CHECK(predict.out.find("input:     1 2 3") != std::string::npos);
  CHECK(predict.out.find("predicted: ") != std::string::npos);
  CHECK(predict.out.find("expected:  3 2 1") != std::string::npos);
  Result unknown = run_cli(dir, "predict --run " + run + " --input '1 2 x'");
  CHECK(unknown.code == 2);
  CHECK(unknown.err_lines() == 1);
  CHECK(unknown.err.find("unknown symbol") != std::string::npos);

  // An existing run is not overwritten; it can be resumed, but only to train longer or report differently.
  Result again = run_cli(dir, "train --config " + config + " --out " + run);
  CHECK(again.code == 2);
  CHECK(again.err.find("already holds a run") != std::string::npos);
  Result changed = run_cli(dir, "train --resume " + run + " --set optim.lr=0.5");
  CHECK(changed.code == 2);
  CHECK(changed.err.find("optim.lr: cannot change on resume") != std::string::npos);
  Result resumed = run_cli(dir, "train --resume --out " + run + " --set train.steps=12");
  CHECK(resumed.code == 0);
  CHECK(json::parse(read_text(run + "/summary.json"))["steps"] == 12);
  CHECK(json::parse(read_text(run + "/config.json"))["train"]["steps"] == 12);

  // Without --out the run goes to runs/<config name> under the working directory.
  Result default_out = run_cli(dir, "train --config tiny.json --set train.steps=2", dir.path.string());
  CHECK(default_out.code == 0);
  CHECK(fs::is_regular_file(dir.path / "runs" / "tiny" / "summary.json"));
}

TEST_CASE("cli: a diverging run exits 3") {
  TempDir dir;
  const std::string config = dir.write("tiny.json", kTinyConfig);
  Result r =
      run_cli(dir, "train --config " + config + " --out " + dir.sub("run") +
                       " --set model.norm=none --set optim.name=sgd --set optim.lr=10 --set optim.schedule=constant"
                       " --set optim.clip_grad_norm=0 --set train.steps=300 --set model.layers=2");
  CHECK(r.code == 3);
  CHECK(r.err.find("diverged at step") != std::string::npos);
  CHECK(json::parse(read_text(dir.sub("run") + "/summary.json"))["diverged"] == true);
}

TEST_CASE("cli: bench step prints step time and throughput") {
  TempDir dir;
  const std::string config = dir.write("tiny.json", kTinyConfig);
  Result r = run_cli(dir, "bench step --config " + config + " --repeats 3 --json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  json out = json::parse(r.out);
  CHECK(out["step_ms"].get<double>() > 0);
  CHECK(out["tokens_per_s"].get<double>() > 0);
  CHECK(out["repeats"] == 3);
  CHECK(out["warmup"] == 3);  // the default
  CHECK(out["openmp_wait"].is_string());  // what idle OpenMP threads did, beside the times
  // The products alone at the path's multiply-add peak: a bound below the step (null on scalar paths).
  if (!out["fma_peak_gflops_per_thread"].is_null()) {
    const double bound = out["products_at_peak_ms"].get<double>();
    CHECK(bound == out["flops_per_step"].get<double>() /
                       (out["fma_peak_gflops_per_thread"].get<double>() * 1e9 * out["threads"].get<double>()) * 1e3);
    CHECK(bound < out["step_ms"].get<double>());
  }
  Result table = run_cli(dir, "bench step --config " + config + " --repeats 2");
  CHECK(table.code == 0);
  CHECK(table.out.find("tokens/s") != std::string::npos);
  CHECK(run_cli(dir, "bench step --config " + config + " --repeats 0").code == 2);
  // --warmup: the untimed steps before the timed ones (the PyTorch script passes its own count).
  Result warm = run_cli(dir, "bench step --config " + config + " --repeats 2 --warmup 0 --json");
  REQUIRE(warm.code == 0);
  CHECK(json::parse(warm.out)["warmup"] == 0);
  const Result bad_warmup = run_cli(dir, "bench step --config " + config + " --warmup -1");
  CHECK(bad_warmup.code == 2);
  CHECK(bad_warmup.err.find("--warmup") != std::string::npos);
  // The peak RSS is this process's own (VmHWM), not the size of whatever started it.
  CHECK(out["peak_rss_mib"].get<double>() > 1.0);
  CHECK(out["peak_rss_mib"].get<double>() < 1024.0);
  CHECK(!out.contains("breakdown"));  // timed only when asked
  // What ran the timed steps: at 1 thread no region opens on the pool.
  Result one = run_cli(dir, "bench step --config " + config + " --repeats 2 --threads 1 --json");
  REQUIRE(one.code == 0);
  const json timed = json::parse(one.out);
  CHECK(timed["pool"] == json{{"by_caller", 0}, {"by_workers", 0}, {"alone_regions", 0}, {"rests", 0}});
  CHECK(timed["cpu"]["wall_ms"].get<double>() > 0);
  CHECK(timed["cpu"]["process_ms"].get<double>() >= 0);
}

TEST_CASE("cli: bench step --breakdown says which ops and phases the step's time went to") {
  TempDir dir;
  const std::string config = dir.write("tiny.json", kTinyConfig);
  Result r = run_cli(dir, "bench step --config " + config + " --repeats 3 --breakdown --json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  json out = json::parse(r.out);
  std::set<std::string> parts;
  double previous = 1e300;
  for (const json& part : out.at("breakdown")) {
    parts.insert(part.at("phase").get<std::string>() + " " + part.at("name").get<std::string>());
    CHECK(part.at("ms").get<double>() >= 0.0);
    CHECK(part.at("ms").get<double>() <= previous);  // largest first
    previous = part.at("ms").get<double>();
  }
  for (const char* expected : {"forward linear", "backward linear", "forward attention", "backward attention",
                               "forward cross_entropy", "other optimizer step", "other zero_grad"})
    CHECK(parts.count(expected) == 1);
  Result table = run_cli(dir, "bench step --config " + config + " --repeats 2 --breakdown");
  CHECK(table.code == 0);
  CHECK(table.out.find("where the step goes") != std::string::npos);
}

TEST_CASE("cli: bench headers name the OpenMP wait setting of the environment, which normlab leaves as it is") {
  TempDir dir;
  // (bench step prints the same; bench attention is the quicker command that computes)
  const std::string bench = "bench attention --shape 2,8,8,2 --threads 2 --repeats 1 --json";
  auto wait_of = [&](const std::string& env) {
    Result r = run_cli(dir, bench, "", env);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out)["openmp_wait"].get<std::string>();
  };
  CHECK(wait_of("-u GOMP_SPINCOUNT -u OMP_WAIT_POLICY") == "libgomp's default spin");
  CHECK(wait_of("-u OMP_WAIT_POLICY GOMP_SPINCOUNT=1234") == "GOMP_SPINCOUNT=1234");
  CHECK(wait_of("-u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive") == "OMP_WAIT_POLICY=passive");
}

TEST_CASE("cli: bench attention times the kernels and keeps a cache linear in the tokens") {
  TempDir dir;
  // sequences of 300 tokens: past the 256 up to which the exponentials are kept as well
  Result r = run_cli(dir, "bench attention --shape 2,300,32,4 --repeats 2 --threads 1 --json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  json out = json::parse(r.out);
  CHECK(out["forward_ms"].get<double>() > 0);
  // Only that a time was taken: how the two compare is for benchmarks on a quiet machine, and two
  // repeats on a shared one can put either first.
  CHECK(out["forward_backward_ms"].get<double>() > 0);
  CHECK(out["cache_floats"] == 2 * 2 * 300 * 4);  // two floats per token and head
  CHECK(out["head_dim"] == 8);
  for (const char* shape : {"2,100,32", "2,100,32,5", "2,0,32,4", "2,100,32,4,1", "2,x,32,4"}) {
    INFO(shape);
    Result bad = run_cli(dir, std::string("bench attention --shape ") + shape);
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--shape") != std::string::npos);
  }
}

TEST_CASE("cli: out-of-range --threads is refused with exit 2 before anything runs") {
  TempDir dir;
  const std::string config = dir.write("ok.json", kTinyConfig);
  for (const char* threads : {"-1", "-7", "1025"}) {
    INFO("--threads " << threads);
    Result r = run_cli(dir, "train --config " + config + " --out " + dir.sub("run") + " --threads=" + threads);
    CHECK(r.code == 2);
    CHECK(r.err.find("--threads") != std::string::npos);
    CHECK(!fs::exists(dir.sub("run")));
  }
  CHECK(run_cli(dir, "bench layernorm --shape 2,3,4 --threads=0").code == 2);
  CHECK(run_cli(dir, "bench gemm --shape 8,8,8 --threads=-1").code == 2);
}
