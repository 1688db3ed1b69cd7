// CLI paths that had no test: --version, compare with --jobs above 1, bench gemm --variant.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;

namespace {

struct CliResult {
  int code;
  std::string out, err;
};

CliResult normlab_cli(const TempDir& dir, const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string tag = std::to_string(counter++);
  const std::string out = dir.sub("out" + tag + ".txt"), err = dir.sub("err" + tag + ".txt");
  const int code = run_normlab(args, out, err);
  return {code, read_text(out), read_text(err)};
}

// runs.csv rows without the wall_time_s column (the last), keyed by run name.
std::map<std::string, std::string> rows_without_time(const std::string& csv_path) {
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

}  // namespace

TEST_CASE("cli: --version prints the project version and exits 0") {
  TempDir dir;
  const CliResult r = normlab_cli(dir, {"--version"});
  CHECK(r.code == 0);
  // Line 1 the version, line 2 the kernel path that runs (docs/building.md).
  CHECK(r.out.rfind(std::string("normlab ") + NORMLAB_VERSION + "\nkernels: ", 0) == 0);
  CHECK(r.out.back() == '\n');
  CHECK(r.err.empty());
}

TEST_CASE("cli: compare --jobs 2 runs the grid concurrently and gives the same table as --jobs 1") {
  TempDir dir("normlab_test_jobs");
  dir.write("base.json", R"({
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 32, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 12, "batch_size": 8, "eval_every": 6, "log_every": 6, "diagnostics_every": 6,
            "checkpoint_every": 6, "threads": 1}
})");
  const std::string config = dir.write("compare.json", R"({
  "base": "base.json",
  "grid": {"variants": ["post-ln", "pre-ln"], "lr": [0.01], "seeds": [0, 1]}
})");
  const CliResult one = normlab_cli(dir, {"compare", "--config", config, "--out", dir.sub("one"), "--jobs", "1"});
  INFO(one.err);
  REQUIRE(one.code == 0);
  const CliResult two = normlab_cli(dir, {"compare", "--config", config, "--out", dir.sub("two"), "--jobs", "2"});
  INFO(two.err);
  REQUIRE(two.code == 0);
  int finished = 0;
  for (const auto& entry : fs::directory_iterator(dir.sub("two") + "/runs"))
    finished += fs::exists(entry.path() / "summary.json");
  CHECK(finished == 4);
  // Every run is single-threaded and seeded: running two at a time changes nothing but wall time.
  const auto a = rows_without_time(dir.sub("one") + "/runs.csv"), b = rows_without_time(dir.sub("two") + "/runs.csv");
  CHECK(a.size() == 4);
  CHECK(a == b);
  const CliResult bad = normlab_cli(dir, {"compare", "--config", config, "--out", dir.sub("bad"), "--jobs", "-3"});
  CHECK(bad.code == 2);
}

TEST_CASE("cli: bench gemm --variant nn, nt, tn report their variant and shape - an unknown one exits 2") {
  TempDir dir;
  for (const char* variant : {"nn", "nt", "tn"}) {
    CAPTURE(variant);
    const CliResult r = normlab_cli(dir, {"bench", "gemm", "--shape", "9,17,5", "--variant", variant, "--repeats", "2",
                                          "--threads", "1", "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const json out = json::parse(r.out);
    CHECK(out["benchmark"] == "gemm");
    CHECK(out["variant"] == variant);
    CHECK(out["shape"] == json::array({9, 17, 5}));
    CHECK(out["repeats"] == 2);
    CHECK(out["flops"].get<double>() == 2.0 * 9 * 17 * 5);
  }
  const CliResult text = normlab_cli(dir, {"bench", "gemm", "--shape", "4,4,4", "--variant", "tn", "--repeats", "1"});
  CHECK(text.code == 0);
  CHECK(text.out.rfind("gemm tn M=4 K=4 N=4", 0) == 0);
  const CliResult bad = normlab_cli(dir, {"bench", "gemm", "--shape", "4,4,4", "--variant", "tt"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--variant") != std::string::npos);
  CHECK(bad.err.find("internal error") == std::string::npos);
}
