// Replays every input under tests/data/fuzz-regressions/<target>/ through the same code the fuzz
// target runs (fuzz/fuzz_inputs.hpp): each must be accepted or refused with an InputError that names
// its file, never escape as another exception type or break a round trip. File names say more:
//   reject-*   must be refused (truncated headers, absurd sizes, malformed text, ...)
//   accept-*   must be accepted
//   anything else (e.g. crash-<sha1> saved by libFuzzer) only has to be clean.
// scripts/check/fuzz.sh explains how a crash found by the fuzzer becomes a file here.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "../fuzz/fuzz_checkpoint.hpp"
#include "../fuzz/fuzz_inputs.hpp"

namespace {

namespace fs = std::filesystem;
using normlab::fuzz::Outcome;
using normlab::fuzz::Scratch;

std::vector<fs::path> regression_files(const std::string& target) {
  const fs::path dir = fs::path(NORMLAB_TEST_DATA_DIR) / "fuzz-regressions" / target;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

void replay(const std::string& target, Outcome (*run)(std::string_view, const Scratch&)) {
  const Scratch scratch;
  const std::vector<fs::path> files = regression_files(target);
  REQUIRE(files.size() >= 3);
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    INFO("input: " << file.string());
    std::optional<Outcome> outcome;
    std::string escaped;
    try {
      outcome = run(read_bytes(file), scratch);
    } catch (const std::exception& e) {
      escaped = e.what();
    }
    CHECK_MESSAGE(outcome.has_value(), "escaped the parser's contract: " << escaped);
    if (!outcome) continue;
    if (starts_with(name, "reject-")) CHECK_MESSAGE(*outcome == Outcome::rejected, "accepted, expected an InputError");
    if (starts_with(name, "accept-")) CHECK_MESSAGE(*outcome == Outcome::accepted, "refused, expected to load");
  }
}

}  // namespace

TEST_CASE("fuzz regression: npy inputs are loaded or refused with InputError") {
  replay("npy", normlab::fuzz::run_npy);
}

TEST_CASE("fuzz regression: safetensors inputs are loaded or refused with InputError") {
  replay("safetensors", normlab::fuzz::run_safetensors);
}

TEST_CASE("fuzz regression: jsonl inputs are loaded or refused with InputError") {
  replay("jsonl", normlab::fuzz::run_jsonl);
}

TEST_CASE("fuzz regression: config files are loaded or refused with InputError") {
  replay("config", normlab::fuzz::run_config);
}

TEST_CASE("fuzz regression: --set overrides are applied or refused with InputError") {
  replay("config_set", normlab::fuzz::run_config_set);
}

TEST_CASE("fuzz regression: checkpoints are loaded or refused with InputError") {
  replay("checkpoint", normlab::fuzz::run_checkpoint);
}

TEST_CASE("fuzz regression: the replay catches what it must") {
  // The harness itself: an exception that is not InputError escapes (UsageError too: the CLI reports
  // it as an internal error, exit 1), and an InputError that does not name its file is a violation.
  using normlab::fuzz::expect_clean;
  CHECK(expect_clean({"f.npy"}, [] { throw normlab::InputError("f.npy: bad"); }) == Outcome::rejected);
  CHECK(expect_clean({"f.npy"}, [] {}) == Outcome::accepted);
  CHECK_THROWS_AS(expect_clean({"f.npy"}, [] { throw std::out_of_range("json"); }), std::out_of_range);
  CHECK_THROWS_AS(expect_clean({"f.npy"}, [] { throw normlab::UsageError("f.npy: misuse"); }), normlab::UsageError);
  CHECK_THROWS_AS(expect_clean({"f.npy"}, [] { throw normlab::InputError("bad"); }), normlab::fuzz::PropertyViolation);
}
