// Shards of one comparison share one --out (docs/scaling.md): `compare --shard 0/2` and `--shard
// 1/2` started together both finish, each locking only the runs it trains, and `--report-only`
// over their output gives the runs.csv of one unsharded compare (the timing column aside).
#include <doctest/doctest.h>

#include <filesystem>
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
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 16, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 40, "batch_size": 8, "eval_every": 20, "log_every": 10, "checkpoint_every": 20, "threads": 1}
})";

// runs.csv without the columns that measure time (they differ between any two trainings).
std::string without_timing(const std::string& csv) {
  std::istringstream in(csv);
  std::string header;
  std::getline(in, header);
  std::vector<bool> keep;
  std::istringstream names(header);
  for (std::string name; std::getline(names, name, ',');)
    keep.push_back(name.find("time") == std::string::npos && name.find("per_s") == std::string::npos);
  std::string out;
  for (std::string line = header; !line.empty() || in; std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    size_t column = 0;
    for (std::string field; std::getline(fields, field, ','); ++column)
      if (column >= keep.size() || keep[column]) out += field + ",";
    out += "\n";
    line.clear();
  }
  return out;
}

}  // namespace

TEST_CASE("compare shards: two shards at once into one --out, then --report-only, give one compare's runs.csv") {
  TempDir dir("normlab_shards");
  dir.write("base.json", kBase);
  const std::string plan =
      dir.write("plan.json", R"({"base": "base.json", "grid": {"variants": ["none", "pre-ln"], "seeds": [0, 1]}})");
  const std::string shared = dir.sub("shared"), single = dir.sub("single");
  {
    Child first({"compare", "--config", plan, "--out", shared, "--shard", "0/2", "--jobs", "1"}, dir.sub("s0.out"),
                dir.sub("s0.err"));
    Child second({"compare", "--config", plan, "--out", shared, "--shard", "1/2", "--jobs", "1"}, dir.sub("s1.out"),
                 dir.sub("s1.err"));
    const int code0 = first.wait(), code1 = second.wait();
    INFO(read_text(dir.sub("s0.err")) << read_text(dir.sub("s1.err")));
    CHECK(code0 == 0);
    CHECK(code1 == 0);
  }
  // A third copy of shard 1 while nobody holds it: its runs are finished, it skips them.
  CHECK(run_normlab({"compare", "--config", plan, "--out", shared, "--shard", "1/2"}, dir.sub("again.out"),
                    dir.sub("again.err")) == 0);
  CHECK(read_text(dir.sub("again.err")).find("2 skipped as finished") != std::string::npos);
  REQUIRE(run_normlab({"compare", "--config", plan, "--out", shared, "--report-only"}, dir.sub("r.out"),
                      dir.sub("r.err")) == 0);
  REQUIRE(run_normlab({"compare", "--config", plan, "--out", single, "--jobs", "1"}, dir.sub("one.out"),
                      dir.sub("one.err")) == 0);
  const std::string sharded_csv = read_text(shared + "/runs.csv"), single_csv = read_text(single + "/runs.csv");
  INFO(sharded_csv << "\n" << single_csv);
  REQUIRE(std::count(single_csv.begin(), single_csv.end(), '\n') == 5);  // header + 4 runs
  CHECK(without_timing(sharded_csv) == without_timing(single_csv));
}

TEST_CASE(
    "compare shards: the same shard twice at once is refused by its runs' locks - --report-only waits for no one but "
    "refuses while a shard trains") {
  TempDir dir("normlab_shards");
  dir.write("base.json", kBase);
  const std::string plan = dir.write("plan.json", R"({"base": "base.json", "grid": {"seeds": [0, 1]}})");
  const std::string out = dir.sub("out");
  // Its run holds after step 1 (NORMLAB_TEST_PAUSE_AT) until the shard is stopped: training, for
  // as long as the test needs.
  normlab::test::PausePoint pause(dir, "step 1");
  Child first({"compare", "--config", plan, "--out", out, "--shard", "0/2", "--jobs", "1"}, dir.sub("s0.out"),
              dir.sub("s0.err"), {}, {pause.env()});
  REQUIRE(pause.wait(1).size() == 1);
  const int twin =
      run_normlab({"compare", "--config", plan, "--out", out, "--shard", "0/2"}, dir.sub("t.out"), dir.sub("t.err"));
  CHECK(twin == 2);
  CHECK(read_text(dir.sub("t.err")).find("the compare run is in use by another normlab process") != std::string::npos);
  const int report =
      run_normlab({"compare", "--config", plan, "--out", out, "--report-only"}, dir.sub("r.out"), dir.sub("r.err"));
  CHECK(report == 2);
  CHECK(read_text(dir.sub("r.err")).find("the compare run is in use by another normlab process") != std::string::npos);
  first.signal(SIGTERM);
  CHECK(first.wait() == 143);
}
