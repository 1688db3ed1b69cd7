// The source tree as a reader meets it: no tracker issue numbers in code, comments or docs
// (scripts/check-tracker-refs.sh, checked here on the real tree and on planted lines), and the
// LayerNorm benchmark names the copy its reference is.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "normlab/bench/layernorm.hpp"
#include "normlab/parallel.hpp"
#include "support.hpp"

using normlab::test::read_text;
using normlab::test::TempDir;

namespace {

struct ScriptRun {
  int code = -1;
  std::string out;
};

// bash scripts/check-tracker-refs.sh ROOT, with its stdout and stderr kept.
ScriptRun check_tracker_refs(const TempDir& scratch, const std::string& root) {
  const std::string out = scratch.sub("check.txt");
  const std::string command = std::string("bash \"") + NORMLAB_SOURCE_DIR + "/scripts/check-tracker-refs.sh\" \"" +
                              root + "\" >\"" + out + "\" 2>&1";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out)};
}

}  // namespace

TEST_CASE("docs tree: no file of the source tree names a tracker issue") {
  TempDir scratch("normlab_tracker_refs");
  const ScriptRun run = check_tracker_refs(scratch, NORMLAB_SOURCE_DIR);
  INFO(run.out);
  CHECK(run.code == 0);
}

TEST_CASE("docs tree: the tracker check finds a planted reference and passes legitimate lines") {
  TempDir scratch("normlab_tracker_refs");
  TempDir tree("normlab_tracker_tree");
  std::filesystem::create_directories(tree.path / "src");
  std::filesystem::create_directories(tree.path / "docs" / "experiments");
  // Lines that look like references and are not: preprocessor lines, colours of 3 and 6 digits,
  // an HTML entity, a heading, "issue" inside a word, and a number without the word.
  const std::string legitimate =
      "#include <vector>\n#pragma once\nconst char* c = \"#000\"; const char* d = \"#0072B2\";\n"
      "// &#39; is an apostrophe; tissue 5; the 26th step; see docs/PERFORMANCE.md, \"LayerNorm\"\n"
      "## 3. A heading\n";
  tree.write("src/ok.cpp", legitimate);
  tree.write("README.md", "# normlab\n#### Level four\n");
  // docs/experiments/ is generated (reports may carry any text) and is not scanned.
  tree.write("docs/experiments/report.md", std::string("see (#") + "35)\n");
  {
    const ScriptRun clean = check_tracker_refs(scratch, tree.path.string());
    INFO(clean.out);
    CHECK(clean.code == 0);
  }
  // Each planted line alone makes the check fail and is named with its file and line.
  const std::string planted[] = {std::string("// fixed in iss") + "ue 26\n",
                                 std::string("## Iss") + "ue 25: a title\n",
                                 std::string("the iss") + "ue-15 branch\n",
                                 std::string("fixes (#") + "35)\n",
                                 std::string("see #") + "7 for why\n",
                                 std::string("as PR #") + "12 did\n"};
  for (const std::string& line : planted) {
    tree.write("src/planted.cpp", legitimate + line);
    const ScriptRun run = check_tracker_refs(scratch, tree.path.string());
    INFO(line, run.out);
    CHECK(run.code == 1);
    CHECK(run.out.find("src/planted.cpp:6:") != std::string::npos);
  }
}

TEST_CASE("bench layernorm: the copy reference is the faster of memcpy and the stream copy, named as such") {
  const int saved_threads = normlab::num_threads();
  normlab::set_num_threads(1);
  const normlab::bench::LayerNormBenchResult r = normlab::bench::bench_layernorm(2, 16, 256, 5);
  normlab::set_num_threads(saved_threads);
  const bool stream_faster = r.stream_copy_ms < r.memcpy_ms;
  CHECK(std::string(r.copy_kind) == (stream_faster ? "stream copy" : "memcpy"));
  CHECK(r.copy_ms == (stream_faster ? r.stream_copy_ms : r.memcpy_ms));
  CHECK(r.copy_gbps == (stream_faster ? r.stream_copy_gbps : r.memcpy_gbps));
}
