// Data fingerprints: our SHA-256 against the FIPS 180-4 vectors and sha256sum, the run directory's
// data.json, `train --resume` on changed data (refused with nothing changed, or continued and
// recorded with --accept-changed-data), `compare` on a run whose training file changed, and what
// `eval` says about the file it evaluated.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/io/sha256.hpp"
#include "normlab/train/data_fingerprint.hpp"
#include "support.hpp"

using namespace normlab;
using nlohmann::json;
using normlab::test::Cli;
using normlab::test::read_text;
using normlab::test::run_normlab;
using normlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

// `sha256sum FILE`'s 64 digits, or "" when the tool is missing.
std::string sha256sum(const std::string& path) {
  FILE* pipe = ::popen(("sha256sum \"" + path + "\" 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return "";
  char digits[65] = {};
  const size_t got = std::fread(digits, 1, 64, pipe);
  ::pclose(pipe);
  return got == 64 ? std::string(digits, 64) : "";
}

// Sequence classification: "pos" when most words are "good". Same words and line count for
// `swapped`, with every label flipped: what the issue's first probe did to a training file.
std::string sentiment_lines(int count, int offset, bool swapped) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    const int length = 1 + (i + offset) % 6;
    std::string words;
    int good = 0;
    for (int t = 0; t < length; ++t) {
      const bool g = (i + offset + 2 * t) % 3 == 0;
      good += g;
      words += std::string(t ? " " : "") + (g ? "good" : "bad");
    }
    const bool positive = (2 * good > length) != swapped;
    text += fmt::format("{{\"tokens\": \"{}\", \"label\": \"{}\"}}\n", words, positive ? "pos" : "neg");
  }
  return text;
}

const char* kRunConfig = R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
    "task": {"name": "sequence_classification", "train_file": "train.jsonl", "valid_file": "valid.jsonl",
             "max_len": 6, "eval_max_len": 6, "eval_examples": 20, "bucket_width": 3},
    "optim": {"lr": 0.01, "warmup_steps": 2},
    "train": {"steps": 4, "batch_size": 8, "eval_every": 2, "checkpoint_every": 2, "threads": 1}})";

// A finished 4-step run in dir/run on train.jsonl and valid.jsonl.
void train_four_steps(const TempDir& dir) {
  dir.write("train.jsonl", sentiment_lines(40, 0, false));
  dir.write("valid.jsonl", sentiment_lines(20, 100, false));
  dir.write("config.json", kRunConfig);
  const Cli first = run_normlab(dir, fmt::format("train --config {} --out {}", dir.sub("config.json"), dir.sub("run")));
  INFO(first.err);
  REQUIRE(first.code == 0);
}

// Every file of a run directory, by name, with its bytes; not the lock file, which holds the pid of
// the last process that took the lock (docs/run-directory.md, "One owner").
std::map<std::string, std::string> snapshot(const std::string& run_dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(run_dir))
    if (entry.is_regular_file() && entry.path().filename() != ".normlab.lock")
      files[entry.path().filename().string()] = read_text(entry.path().string());
  return files;
}

}  // namespace

TEST_CASE("sha256: the FIPS 180-4 vectors, in one piece and in pieces that straddle the blocks") {
  CHECK(io::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(io::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(io::sha256_hex(two_blocks) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a's, fed 1, 63, 64, 65, ... bytes at a time: the partial-block path at every offset.
  const std::string million(1'000'000, 'a');
  io::Sha256 pieces;
  size_t at = 0;
  for (size_t step = 1; at < million.size(); step = step % 200 + 1) {
    const size_t take = std::min(step, million.size() - at);
    pieces.update(million.data() + at, take);
    at += take;
  }
  CHECK(pieces.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(io::sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // 55, 56 and 64 bytes: the lengths where the padding needs one more block or not.
  CHECK(io::sha256_hex(std::string(55, 'x')) != io::sha256_hex(std::string(56, 'x')));
  CHECK_THROWS_AS(pieces.update("more"), UsageError);
}

TEST_CASE("sha256: a file's digest is the one sha256sum prints") {
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < 3'000'000; ++i) bytes += char((i * 131 + i / 977) & 0xff);  // more than one read chunk
  const std::string path = dir.write("data.bin", bytes);
  const io::FileDigest digest = io::sha256_file(path);
  CHECK(digest.bytes == bytes.size());
  CHECK(digest.sha256 == io::sha256_hex(bytes));
  const std::string tool = sha256sum(path);
  if (tool.empty()) {
    MESSAGE("sha256sum not found: compared with the in-memory digest only");
  } else {
    CHECK(digest.sha256 == tool);
  }
  CHECK_THROWS_WITH_AS(io::sha256_file(dir.sub("missing.jsonl")),
                       doctest::Contains("missing.jsonl: cannot read: No such file"), InputError);
  const std::string directory = dir.path.string() + ": not a regular file (a directory)";
  CHECK_THROWS_WITH_AS(io::sha256_file(dir.path.string()), directory.c_str(), InputError);
}

TEST_CASE("data fingerprint: a record round-trips - malformed ones and changed files are named") {
  const train::DataFingerprint then{{"task.train_file", "/d/train.jsonl", std::string(64, 'a'), 10},
                                    {"task.valid_file", "/d/valid.jsonl", std::string(64, 'b'), 5}};
  CHECK(train::fingerprint_from_json(json(train::to_json(then)), "x").size() == 2);
  train::DataFingerprint now = then;
  CHECK(train::changed_data(then, now).empty());
  now[1].sha256 = std::string(64, 'c');
  const std::vector<train::DataChange> changes = train::changed_data(then, now);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].describe() ==
        "/d/valid.jsonl (task.valid_file): its content changed (sha256 bbbbbbbbbbbb... "
        "recorded, cccccccccccc... now)");
  CHECK(train::changed_data({}, now).empty());  // a checkpoint from before fingerprints: nothing to compare
  json bad = train::to_json(then);
  bad["task.train_file"]["sha256"] = "ABC";
  CHECK_THROWS_WITH_AS(train::fingerprint_from_json(bad, "data.json"), doctest::Contains("64 lowercase hex"),
                       InputError);
  CHECK_THROWS_WITH_AS(train::fingerprint_from_json(json{{"task.test_file", {}}}, "data.json"),
                       doctest::Contains("not a data file key"), InputError);
}

TEST_CASE("data fingerprint: a run records each data file's sha256sum in data.json and its checkpoint") {
  TempDir dir;
  train_four_steps(dir);
  const json data = json::parse(read_text(dir.sub("run/data.json")));
  for (const char* name : {"train", "valid"}) {
    const std::string key = fmt::format("task.{}_file", name), path = dir.sub(fmt::format("{}.jsonl", name));
    CHECK(data.at("files").at(key).at("path") == fs::absolute(path).lexically_normal().string());
    CHECK(data.at("files").at(key).at("sha256") == io::sha256_file(path).sha256);
    CHECK(data.at("files").at(key).at("bytes") == fs::file_size(path));
  }
  CHECK(data.at("accepted_changes").empty());
  CHECK(read_text(dir.sub("run/checkpoint.safetensors")).find(io::sha256_file(dir.sub("train.jsonl")).sha256) !=
        std::string::npos);
}

TEST_CASE("resume: labels swapped in the training file (same words, same line count) are refused, nothing changed") {
  TempDir dir;
  train_four_steps(dir);
  dir.write("train.jsonl", sentiment_lines(40, 0, true));
  const auto before = snapshot(dir.sub("run"));
  const Cli resumed = run_normlab(dir, fmt::format("train --resume {} --set train.steps=6", dir.sub("run")));
  CHECK(resumed.code == 2);
  CHECK(resumed.err.find("normlab: error: " + fs::absolute(dir.sub("train.jsonl")).lexically_normal().string() +
                         " (task.train_file): its content changed") != std::string::npos);
  CHECK(resumed.err.find("--accept-changed-data") != std::string::npos);
  CHECK(std::count(resumed.err.begin(), resumed.err.end(), '\n') == 1);
  CHECK(snapshot(dir.sub("run")) == before);
}

TEST_CASE("resume: a validation file edited in place is refused, nothing changed") {
  TempDir dir;
  train_four_steps(dir);
  dir.write("valid.jsonl", sentiment_lines(5, 100, false));  // 20 lines became 5
  const auto before = snapshot(dir.sub("run"));
  const Cli resumed = run_normlab(dir, fmt::format("train --resume {} --set train.steps=6", dir.sub("run")));
  CHECK(resumed.code == 2);
  CHECK(resumed.err.find("valid.jsonl (task.valid_file): its content changed") != std::string::npos);
  CHECK(snapshot(dir.sub("run")) == before);
  // Restored, the resume goes on.
  dir.write("valid.jsonl", sentiment_lines(20, 100, false));
  CHECK(run_normlab(dir, fmt::format("train --resume {} --set train.steps=6", dir.sub("run"))).code == 0);
}

TEST_CASE("resume: --accept-changed-data continues on the new content and data.json records it") {
  TempDir dir;
  train_four_steps(dir);
  const std::string old_digest = io::sha256_file(dir.sub("train.jsonl")).sha256;
  dir.write("train.jsonl", sentiment_lines(40, 0, true));
  const std::string new_digest = io::sha256_file(dir.sub("train.jsonl")).sha256;
  const Cli resumed =
      run_normlab(dir, fmt::format("train --resume {} --set train.steps=6 --accept-changed-data", dir.sub("run")));
  INFO(resumed.err);
  CHECK(resumed.code == 0);
  CHECK(resumed.err.find("--accept-changed-data: ") != std::string::npos);
  const json data = json::parse(read_text(dir.sub("run/data.json")));
  CHECK(data.at("files").at("task.train_file").at("sha256") == new_digest);
  REQUIRE(data.at("accepted_changes").size() == 1);
  const json& change = data.at("accepted_changes").at(0);
  CHECK(change.at("step") == 4);
  CHECK(change.at("key") == "task.train_file");
  CHECK(change.at("sha256_before") == old_digest);
  CHECK(change.at("sha256_after") == new_digest);
  // The checkpoint now records the new content: a plain resume on it is accepted.
  CHECK(run_normlab(dir, fmt::format("train --resume {} --set train.steps=8", dir.sub("run"))).code == 0);
  CHECK(json::parse(read_text(dir.sub("run/data.json"))).at("accepted_changes").size() == 1);
  // The flag means nothing for a new run.
  const Cli fresh = run_normlab(dir, fmt::format("train --config {} --out {} --accept-changed-data",
                                                 dir.sub("config.json"), dir.sub("run2")));
  CHECK(fresh.code == 2);
  CHECK(fresh.err.find("--accept-changed-data: only with --resume") != std::string::npos);
  CHECK(!fs::exists(dir.sub("run2")));
}

TEST_CASE("eval: prints the sha256 of what it evaluated and notes a validation file changed since training") {
  TempDir dir;
  train_four_steps(dir);
  const std::string other = dir.write("other.jsonl", sentiment_lines(7, 50, false));
  const Cli on_file = run_normlab(dir, fmt::format("eval --run {} --data {}", dir.sub("run"), other));
  CHECK(on_file.code == 0);
  CHECK(on_file.out.find("(sha256 " + io::sha256_file(other).sha256 + ")") != std::string::npos);
  const Cli as_json = run_normlab(dir, fmt::format("eval --run {} --data {} --json", dir.sub("run"), other));
  CHECK(json::parse(as_json.out).at("data_sha256") == io::sha256_file(other).sha256);
  CHECK(run_normlab(dir, fmt::format("eval --run {}", dir.sub("run"))).out.find("note:") == std::string::npos);
  dir.write("valid.jsonl", sentiment_lines(20, 100, true));
  const Cli changed = run_normlab(dir, fmt::format("eval --run {}", dir.sub("run")));
  CHECK(changed.code == 0);
  CHECK(changed.out.find("note: ") != std::string::npos);
  CHECK(changed.out.find("valid.jsonl (task.valid_file): its content changed") != std::string::npos);
}

TEST_CASE(
    "compare: a run whose training file changed is not reused - named with the file - --retrain-changed retrains it") {
  TempDir dir;
  dir.write("train.jsonl", sentiment_lines(40, 0, false));
  dir.write("valid.jsonl", sentiment_lines(20, 100, false));
  json base = json::parse(kRunConfig);
  dir.write("base.json", base.dump());
  const std::string config =
      dir.write("compare.json", R"({"base": "base.json", "set": {}, "grid": {"variants": ["pre-ln"]}})");
  const std::string out = dir.sub("out");
  const Cli first = run_normlab(dir, fmt::format("compare --config {} --out {}", config, out));
  INFO(first.err);
  REQUIRE(first.code == 0);
  const std::string run = out + "/runs/" + fs::directory_iterator(out + "/runs")->path().filename().string();
  const auto before = snapshot(run);
  CHECK(run_normlab(dir, fmt::format("compare --config {} --out {}", config, out)).code == 0);  // unchanged: reused
  CHECK(snapshot(run) == before);

  dir.write("train.jsonl", sentiment_lines(40, 0, true));
  const Cli stale = run_normlab(dir, fmt::format("compare --config {} --out {}", config, out));
  CHECK(stale.code == 2);
  CHECK(stale.err.find("normlab: error: " + run + ": was trained on other data than the compare config asks for now") !=
        std::string::npos);
  CHECK(stale.err.find("train.jsonl (task.train_file): its content changed") != std::string::npos);
  CHECK(snapshot(run) == before);
  const Cli retrained = run_normlab(dir, fmt::format("compare --config {} --out {} --retrain-changed", config, out));
  INFO(retrained.err);
  CHECK(retrained.code == 0);
  CHECK(json::parse(read_text(run + "/data.json")).at("files").at("task.train_file").at("sha256") ==
        io::sha256_file(dir.sub("train.jsonl")).sha256);
}

TEST_CASE("bench sha256: hashes the file it is given, and wants exactly one of --file and --megabytes") {
  TempDir dir;
  const std::string path = dir.write("data.jsonl", sentiment_lines(200, 0, false));
  const Cli timed = run_normlab(dir, fmt::format("bench sha256 --file {} --repeats 2 --json", path));
  REQUIRE(timed.code == 0);
  const json result = json::parse(timed.out);
  CHECK(result.at("sha256") == io::sha256_file(path).sha256);
  CHECK(result.at("bytes") == fs::file_size(path));
  CHECK(result.at("median_s").get<double>() >= 0.0);
  const Cli neither = run_normlab(dir, "bench sha256");
  CHECK(neither.code == 2);
  CHECK(neither.err.find("give one of --file FILE or --megabytes N") != std::string::npos);
  CHECK(run_normlab(dir, fmt::format("bench sha256 --file {}", dir.sub("missing"))).code == 2);
}
