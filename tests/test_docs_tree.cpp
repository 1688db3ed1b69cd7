// The source tree as a reader meets it: no tracker issue numbers in code, comments or docs
// (scripts/check/tracker_refs.sh, checked here on the real tree and on planted lines), and the
// LayerNorm benchmark names the copy its reference is.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

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

// bash scripts/check/tracker_refs.sh ROOT, with its stdout and stderr kept.
ScriptRun check_tracker_refs(const TempDir& scratch, const std::string& root) {
  const std::string out = scratch.sub("check.txt");
  const std::string command = std::string("bash \"") + NORMLAB_SOURCE_DIR + "/scripts/check/tracker_refs.sh\" \"" +
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
  // docs/experiments/ (generated) and tests/data/ (inputs) are not scanned.
  tree.write("docs/experiments/report.md", std::string("see (#") + "35)\n");
  std::filesystem::create_directories(tree.path / "tests" / "data");
  tree.write("tests/data/input.txt", std::string("see (#") + "35)\n");
  {
    const ScriptRun clean = check_tracker_refs(scratch, tree.path.string());
    INFO(clean.out);
    CHECK(clean.code == 0);
  }
  // Each planted line alone makes the check fail and is named with its file and line.
  const std::string planted[] = {std::string("// fixed in iss") + "ue 26\n", std::string("## Iss") + "ue 25: a title\n",
                                 std::string("the iss") + "ue-15 branch\n",  std::string("fixes (#") + "35)\n",
                                 std::string("see #") + "7 for why\n",       std::string("as PR #") + "12 did\n"};
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

namespace {

// The flags `normlab VERB --help` lists, VERB being "train" or "bench step".
std::set<std::string> help_flags(const TempDir& dir, const std::string& verb) {
  const normlab::test::Cli help = normlab::test::run_normlab(dir, verb + " --help");
  const std::string text = help.out + help.err;
  static const std::regex flag(R"(--[a-z][a-z0-9-]*)");
  std::set<std::string> flags;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), flag); it != std::sregex_iterator(); ++it)
    flags.insert(it->str());
  return flags;
}

std::vector<std::filesystem::path> user_docs() {
  const std::filesystem::path root(NORMLAB_SOURCE_DIR);
  std::vector<std::filesystem::path> files{root / "README.md", root / "bench" / "README.md",
                                           root / "data" / "README.md"};
  for (const auto& entry : std::filesystem::directory_iterator(root / "docs"))
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  return files;
}

}  // namespace

TEST_CASE("docs tree: every `normlab VERB --flag` in the READMEs and docs/*.md is a flag of that verb") {
  TempDir dir("normlab_docs_flags");
  // A command as the docs write it: the verb, then its arguments up to the end of the code span,
  // a shell comment (" # ") or the next command.
  static const std::regex command(R"(normlab\s+(bench\s+[a-z0-9]+|train|eval|predict|compare|report|serve)\b)");
  static const std::regex flag(R"((^|[^A-Za-z0-9_-])(--[a-z][a-z0-9-]*))");
  std::map<std::string, std::set<std::string>> flags_of;
  int commands_seen = 0;
  for (const auto& file : user_docs()) {
    std::istringstream lines(read_text(file.string()));
    std::string line;
    for (int number = 1; std::getline(lines, line); number++) {
      for (auto it = std::sregex_iterator(line.begin(), line.end(), command); it != std::sregex_iterator(); ++it) {
        const std::string verb = std::regex_replace(it->str(1), std::regex(R"(\s+)"), " ");
        std::string args = line.substr(size_t(it->position(0) + it->length(0)));
        for (const std::string end : {"`", " # ", "normlab "}) args = args.substr(0, args.find(end));
        if (!flags_of.count(verb)) flags_of[verb] = help_flags(dir, verb);
        commands_seen++;
        for (auto f = std::sregex_iterator(args.begin(), args.end(), flag); f != std::sregex_iterator(); ++f) {
          INFO(file.filename().string() << ":" << number << ": normlab " << verb << " " << f->str(2));
          CHECK(flags_of[verb].count(f->str(2)) == 1);
        }
      }
    }
  }
  CHECK(commands_seen > 20);  // the scan found the docs' commands at all
  CHECK(flags_of["train"].count("--config") == 1);
}

TEST_CASE("docs tree: a number of tour stops stated in README.md or docs/tour.md is the tour's") {
  const std::string tour = read_text(std::string(NORMLAB_SOURCE_DIR) + "/docs/tour.md");
  static const std::regex stop_heading(R"((^|\n)## [0-9]+\. )");
  const auto stops =
      std::distance(std::sregex_iterator(tour.begin(), tour.end(), stop_heading), std::sregex_iterator());
  CHECK(stops >= 9);
  static const std::map<std::string, long> numbers = {{"five", 5},      {"six", 6},     {"seven", 7},
                                                      {"eight", 8},     {"nine", 9},    {"ten", 10},
                                                      {"eleven", 11},   {"twelve", 12}, {"thirteen", 13},
                                                      {"fourteen", 14}, {"fifteen", 15}};
  static const std::regex stated(R"(\b([A-Za-z]+|[0-9]+) stops\b)");
  for (const std::string name : {"README.md", "docs/tour.md"}) {
    const std::string text = read_text(std::string(NORMLAB_SOURCE_DIR) + "/" + name);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), stated); it != std::sregex_iterator(); ++it) {
      std::string word = it->str(1);
      for (char& c : word) c = char(std::tolower(static_cast<unsigned char>(c)));
      const bool digits = std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits && !numbers.count(word)) continue;  // "the stops", "its stops"
      INFO(name << ": \"" << it->str(0) << "\"");
      CHECK((digits ? std::stol(word) : numbers.at(word)) == stops);
    }
  }
}

TEST_CASE("docs tree: a section a file cites as `NAME.md, \"Title\"` is a heading of docs/NAME.md") {
  namespace fs = std::filesystem;
  const fs::path root(NORMLAB_SOURCE_DIR);
  static const std::regex citation(R"re(([A-Za-z-]+\.md),? \(?"([^"]+)")re");
  std::vector<fs::path> files{root / "README.md", root / "CMakeLists.txt"};
  for (const char* dir : {"docs", "src", "include", "apps", "bench", "scripts"})
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file() || entry.path().string().find("/docs/experiments/") != std::string::npos) continue;
      const std::string ext = entry.path().extension().string();
      if (ext == ".md" || ext == ".cpp" || ext == ".hpp" || ext == ".py" || ext == ".sh") files.push_back(entry.path());
    }
  int citations = 0;
  for (const fs::path& file : files) {
    const std::string text = read_text(file.string());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), citation); it != std::sregex_iterator(); ++it) {
      const fs::path cited = root / "docs" / it->str(1);
      if (!fs::exists(cited)) continue;  // README.md, bench/README.md: cited by path elsewhere
      citations++;
      std::istringstream lines(read_text(cited.string()));
      bool found = false;
      for (std::string line; std::getline(lines, line);)
        if (line.rfind("#", 0) == 0 && line.find(it->str(2)) != std::string::npos) found = true;
      INFO(fs::relative(file, root).string() << " cites " << it->str(1) << ", \"" << it->str(2) << "\"");
      CHECK(found);
    }
  }
  CHECK(citations > 10);
}
