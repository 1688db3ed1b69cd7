// Several files of one directory written atomically with one directory sync (io::write_files_atomic),
// and a new run directory's start files written that way (docs/RELIABILITY.md, "What survives a kill").
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/run_dir.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace normlab;
using normlab::test::read_text;
using normlab::test::TempDir;

namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("write_files_atomic: every file whole, old ones replaced, no temporary left") {
  TempDir dir("normlab_test_files_atomic");
  const std::string a = dir.write("a.json", "the previous a, longer than the new one");
  const std::string b = dir.sub("b.json"), c = dir.sub("c.bin");
  const std::string binary("\0\x01\xff", 3);
  io::write_files_atomic({{a, "new a"}, {b, "b"}, {c, binary}});
  CHECK(read_text(a) == "new a");
  CHECK(read_text(b) == "b");
  CHECK(read_text(c) == binary);
  CHECK(names_in(dir.path.string()) == std::vector<std::string>{"a.json", "b.json", "c.bin"});
  io::write_files_atomic({});  // nothing to write: no directory to sync, no error
}

TEST_CASE("write_files_atomic: a failure names its file, the files before it are written and the rest untouched") {
  TempDir dir("normlab_test_files_atomic_fail");
  const std::string a = dir.sub("a.json"), c = dir.write("c.json", "old c");
  const std::string blocked = dir.sub("b.json");
  fs::create_directories(blocked + "/inside");  // a non-empty directory: the rename over it fails
  const std::string message = [&] {
    try {
      io::write_files_atomic({{a, "a"}, {blocked, "b"}, {c, "new c"}});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  CHECK(message.rfind(blocked + ": cannot write: ", 0) == 0);
  CHECK(read_text(a) == "a");
  CHECK(fs::is_directory(blocked + "/inside"));
  CHECK(read_text(c) == "old c");
  CHECK(names_in(dir.path.string()) == std::vector<std::string>{"a.json", "b.json", "c.json"});  // no temporary
}

TEST_CASE("write_files_atomic: files of two directories are a usage error, nothing written") {
  TempDir dir("normlab_test_files_atomic_dirs");
  fs::create_directories(dir.sub("sub"));
  CHECK_THROWS_AS(io::write_files_atomic({{dir.sub("a"), "a"}, {dir.sub("sub/b"), "b"}}), UsageError);
  CHECK(!fs::exists(dir.sub("a")));
}

TEST_CASE("a new run writes config.json and its start files together and removes their stale temporaries") {
  TempDir dir("normlab_test_run_start_files");
  const std::string run = dir.sub("run");
  fs::create_directories(run);
  // What a session killed inside its first writes leaves: temporaries of each start file.
  for (const char* stale : {"config.json.tmp.99999.0", "vocab.json.tmp.99999.1", "data.json.tmp.99999.2"})
    dir.write(std::string("run/") + stale, "torn");
  train::RunDirectory run_dir(run, /*create=*/false);
  const train::RunConfig config;
  run_dir.begin_new(config, {{run + "/vocab.json", "{\"tokens\": []}\n"}, {run + "/data.json", "{}\n"}});
  CHECK(read_text(run + "/config.json") == train::ordered_config(config).dump(2) + "\n");
  CHECK(read_text(run + "/vocab.json") == "{\"tokens\": []}\n");
  CHECK(read_text(run + "/data.json") == "{}\n");
  CHECK(names_in(run) ==
        std::vector<std::string>{".normlab.lock", "config.json", "data.json", "metrics.jsonl", "vocab.json"});
}
