// Which run directory `normlab train` uses: --out, --resume DIR, or runs/<config name>; the two
// flags must agree, and a resume needs a directory.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support.hpp"

using normlab::test::read_text;
using normlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

// `normlab ARGS` run in `cwd`, stdout and stderr captured.
Result train_in(const TempDir& dir, const std::string& cwd, const std::string& args) {
  const std::string out = dir.sub("stdout.txt"), err = dir.sub("stderr.txt");
  const std::string command =
      "cd \"" + cwd + "\" && \"" + NORMLAB_BINARY + "\" train " + args + " >\"" + out + "\" 2>\"" + err + "\"";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
}

}  // namespace

TEST_CASE("cli: train --resume and --out must name one directory - --resume alone needs one") {
  TempDir dir("normlab_train_dirs");
  const std::string cwd = dir.path.string();
  const Result both = train_in(dir, cwd, "--resume a --out b");
  CHECK(both.code == 2);
  CHECK(both.err == "normlab: error: --resume a and --out b name different directories\n");
  const Result none = train_in(dir, cwd, "--resume");
  CHECK(none.code == 2);
  CHECK(none.err == "normlab: error: --resume: give the run directory (--resume DIR or --out DIR)\n");
  const Result same = train_in(dir, cwd, "--resume a --out a");  // one directory, but no run in it
  CHECK(same.code == 2);
  CHECK(same.err == "normlab: error: a: no config.json: not a run directory\n");

  // With --config and no directory, --resume continues runs/<config name>, where train put it.
  dir.write("tiny.json", normlab::test::kTwoStepRun);
  const Result trained = train_in(dir, cwd, "--config tiny.json");
  REQUIRE(trained.code == 0);
  CHECK(trained.err.find("run directory: runs/tiny\n") != std::string::npos);
  CHECK(trained.out.find("run directory: runs/tiny\n") != std::string::npos);
  const Result resumed = train_in(dir, cwd, "--resume --config tiny.json --set train.steps=3");
  INFO(resumed.err);
  CHECK(resumed.code == 0);
  CHECK(resumed.err.find("run directory: runs/tiny") == std::string::npos);  // a resume does not announce it
  CHECK(resumed.out.find("trained 3 steps") != std::string::npos);
}
