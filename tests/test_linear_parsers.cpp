// Every parser of user input runs in time linear in its input: each gets a ~1 MB JSON array of
// small objects (the shape that was quadratic: a parse callback rescanned the parent container after
// every element, so 1 MiB took half a minute) and must answer well under a second.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "normlab/data/jsonl.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/config.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;

namespace {

// "[{},{},...,{}]" of about `bytes` bytes.
std::string array_of_objects(size_t bytes) {
  std::string text = "[";
  while (text.size() + 4 < bytes) text += "{},";
  text += "{}]";
  return text;
}

constexpr size_t kOneMegabyte = 1000 * 1000;
// "Well under a second" with room for a loaded machine; the quadratic parser needed 35 s here.
// AddressSanitizer makes every allocation several times slower, so its build allows 10x: a
// quadratic parser would still take minutes.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kLimitSeconds = 5.0;
#else
constexpr double kLimitSeconds = 0.5;
#endif

double cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec);
}

// Runs `parse` (which may throw InputError, never anything else) three times and returns the
// least CPU time one run took, in seconds: CPU time, not wall time, and the best of three, so a
// busy shared machine does not fail the test (the quadratic parsers needed tens of CPU seconds).
double seconds_for(const std::function<void()>& parse) {
  double best = 1e9;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const double start = cpu_seconds();
    try {
      parse();
    } catch (const InputError&) {
    }
    best = std::min(best, cpu_seconds() - start);
  }
  return best;
}

}  // namespace

TEST_CASE("linear parsers: the strict JSON parser builds the value and finds duplicates at any depth") {
  std::vector<std::string> duplicate;
  nlohmann::json value = io::parse_json_linear(R"({"a": [1, {"b": 2, "c": {"d": 3, "d": 4}}], "e": null})", &duplicate);
  CHECK(value["a"][1]["b"] == 2);
  CHECK(value["e"].is_null());
  CHECK(duplicate == std::vector<std::string>{"a", "c", "d"});
  CHECK(nlohmann::json::parse(value.dump()) == value);
  CHECK_THROWS_WITH_AS(io::parse_strict(R"({"model": {"lr": 1, "lr": 2}})", "f.json"),
                       "f.json: model.lr: duplicate key", InputError);
  CHECK_THROWS_WITH_AS(io::parse_strict("{\"a\": 1,}", "f.json"),
                       doctest::Contains("f.json: invalid JSON: parse error at line 1, column 9: syntax error"),
                       InputError);
  CHECK_THROWS_WITH_AS(io::parse_strict("1e999", "f.json"), doctest::Contains("f.json: invalid JSON"), InputError);
  const double seconds = seconds_for([] { io::parse_strict(array_of_objects(kOneMegabyte), "big"); });
  CHECK(seconds < kLimitSeconds);
}

TEST_CASE("linear parsers: a 1 MB config file and a 1 MB --set value") {
  TempDir dir;
  const std::string path = dir.write("big.json", "{\"model\": " + array_of_objects(kOneMegabyte) + "}");
  CHECK(seconds_for([&] { train::load_config(path); }) < kLimitSeconds);
  CHECK_THROWS_WITH_AS(train::load_config(path), doctest::Contains("model: must be a JSON object"), InputError);
  const std::string assignment = "model.d_model=" + array_of_objects(kOneMegabyte);
  CHECK(seconds_for([&] { train::load_config(dir.write("empty.json", "{}"), {assignment}); }) < kLimitSeconds);
}

TEST_CASE("linear parsers: a 1 MB JSONL line is refused before it is parsed, and parsed linearly when allowed") {
  TempDir dir;
  data::Task task = data::make_task("reverse");
  task.max_seq_len = 4096;
  const std::string line = "{\"tokens\": " + array_of_objects(kOneMegabyte) + ", \"targets\": []}";
  const std::string path = dir.write("big.jsonl", line + "\n");
  CHECK(seconds_for([&] { data::load_jsonl(path, task); }) < kLimitSeconds);
  CHECK_THROWS_WITH_AS(data::load_jsonl(path, task), doctest::Contains((path + ":1: line of").c_str()), InputError);
  // With a limit that lets the line through, the parse itself is linear too.
  task.max_seq_len = 1 << 20;
  CHECK(seconds_for([&] { data::parse_jsonl_line(line, task, "big:1"); }) < kLimitSeconds);
  CHECK_THROWS_WITH_AS(data::parse_jsonl_line(line, task, "big:1"), doctest::Contains("big:1: tokens"), InputError);
}

TEST_CASE("linear parsers: a safetensors header and checkpoint metadata holding 1 MB arrays of objects") {
  TempDir dir;
  const std::string header = "{\"x\": " + array_of_objects(kOneMegabyte) + "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  file += header;
  const std::string path = dir.write("big.safetensors", file);
  CHECK(seconds_for([&] { io::read_safetensors(path); }) < kLimitSeconds);
  CHECK_THROWS_WITH_AS(io::read_safetensors(path), doctest::Contains("tensor 'x': entry is not a JSON object"),
                       InputError);

  io::SafetensorsFile checkpoint;
  checkpoint.path = "run/checkpoint.safetensors";
  checkpoint.metadata["trainer"] = array_of_objects(kOneMegabyte);
  nlohmann::json value;
  CHECK(seconds_for([&] { value = train::metadata_json(checkpoint, "trainer"); }) < kLimitSeconds);
  CHECK(value.size() > 300000);
}

TEST_CASE("linear parsers: a compare config holding a 1 MB array of objects") {
  TempDir dir;
  const std::string path =
      dir.write("compare.json", "{\"base\": {}, \"grid\": {\"seeds\": " + array_of_objects(kOneMegabyte) + "}}");
  CHECK(seconds_for([&] { study::load_compare_plan(path); }) < kLimitSeconds);
  CHECK_THROWS_AS(study::load_compare_plan(path), InputError);
}

TEST_CASE("compare configs get the duplicate-key check, in the compare file and in its base file") {
  TempDir dir;
  dir.write("base.json", R"({"optim": {"lr": 0.001, "lr": 0.1}})");
  const std::string with_base = dir.write("a.json", R"({"base": "base.json"})");
  CHECK_THROWS_WITH_AS(study::load_compare_plan(with_base),
                       (dir.sub("base.json") + ": optim.lr: duplicate key").c_str(), InputError);
  const std::string repeated = dir.write("b.json", R"({"base": {}, "base": {}})");
  CHECK_THROWS_WITH_AS(study::load_compare_plan(repeated), (repeated + ": base: duplicate key").c_str(), InputError);
}
