// The fuzzers' seed corpus (fuzz/corpus/<target>/) replayed through the same harness as the fuzz
// targets (fuzz/fuzz_inputs.hpp): every seed is accepted or refused with an InputError; any other
// exception (UsageError included: the CLI would call it an internal error) fails the test.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../fuzz/fuzz_checkpoint.hpp"
#include "../fuzz/fuzz_inputs.hpp"

namespace {

namespace fs = std::filesystem;
using normlab::fuzz::Outcome;
using normlab::fuzz::Scratch;

int replay_corpus(const std::string& target, Outcome (*run)(std::string_view, const Scratch&)) {
  const Scratch scratch;
  const fs::path dir = fs::path(NORMLAB_SOURCE_DIR) / "fuzz" / "corpus" / target;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    INFO("seed: " << file.string());
    std::ifstream in(file, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::string escaped;
    bool clean = false;
    try {
      run(bytes, scratch);
      clean = true;
    } catch (const std::exception& e) {
      escaped = e.what();
    }
    CHECK_MESSAGE(clean, "escaped the parser's contract: " << escaped);
  }
  return int(files.size());
}

}  // namespace

TEST_CASE("fuzz corpus: every seed input is accepted or refused with InputError, nothing else") {
  CHECK(replay_corpus("npy", normlab::fuzz::run_npy) >= 5);
  CHECK(replay_corpus("safetensors", normlab::fuzz::run_safetensors) >= 3);
  CHECK(replay_corpus("jsonl", normlab::fuzz::run_jsonl) >= 5);
  CHECK(replay_corpus("config", normlab::fuzz::run_config) >= 3);
  CHECK(replay_corpus("config_set", normlab::fuzz::run_config_set) >= 3);
  CHECK(replay_corpus("checkpoint", normlab::fuzz::run_checkpoint) >= 3);
}
