// docs/tour.md and docs/layernorm.md send a reader into the code; these tests check that what they
// name is there. The docs name a function, type or constant with its file, `path:name`
// (`src/kernels/layer_norm.cpp:forward_row`, `src/train/trainer.cpp:Trainer::fit`): the file must
// exist and define the name. Every markdown link to a repository file, and every backticked
// repository path (`src/kernels/lanes.hpp`), must exist; a link's #anchor must be a heading of the
// page it points to.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/ops.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using normlab::test::read_text;

namespace {

const fs::path kRoot = NORMLAB_SOURCE_DIR;
const char* const kCheckedDocs[] = {"docs/tour.md", "docs/layernorm.md"};

// A doc's text with the lines of its ``` code blocks blanked (they hold commands and programs, not
// references), so line numbers still match the file.
std::string prose_of(const std::string& markdown) {
  std::string out;
  bool in_code = false;
  size_t begin = 0;
  while (begin < markdown.size()) {
    size_t end = markdown.find('\n', begin);
    if (end == std::string::npos) end = markdown.size();
    const std::string line = markdown.substr(begin, end - begin);
    const bool fence = line.rfind("```", 0) == 0;
    if (fence) in_code = !in_code;
    out += fence || in_code ? "" : line;
    out += '\n';
    begin = end + 1;
  }
  return out;
}

int line_at(const std::string& text, size_t offset) {
  return 1 + int(std::count(text.begin(), text.begin() + std::ptrdiff_t(offset), '\n'));
}

std::string regex_escape(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}

// Does `source` define `name`? A qualified name (Trainer::fit) as `Trainer::fit(`; a plain one as a
// function after its return type (`void forward_row(`, `data::Task build_task(`, not a call such
// as `= row_sum(` or `return row_sum(`), a struct/class/enum, a macro or a constexpr/const constant.
bool defines(const std::string& source, const std::string& name) {
  const std::string e = regex_escape(name);
  if (name.find("::") != std::string::npos) return std::regex_search(source, std::regex("\\b" + e + "\\s*\\("));
  if (std::regex_search(source, std::regex("(\\b(struct|class|enum class|enum)|#define)\\s+" + e + "\\b")) ||
      std::regex_search(source, std::regex("\\b(constexpr|const)\\b[^;=\\n(]*\\b" + e + "\\s*[={]"))) {
    return true;
  }
  static const std::set<std::string> not_types = {"return", "else", "new",    "delete",
                                                  "throw",  "case", "sizeof", "co_return"};
  const std::regex function("([A-Za-z_][A-Za-z0-9_:]*)[>*&]?[ \\t*&]+" + e + "\\s*\\(");
  for (auto it = std::sregex_iterator(source.begin(), source.end(), function); it != std::sregex_iterator(); ++it) {
    if (not_types.count((*it)[1].str()) == 0) return true;
  }
  return false;
}

// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as '-'.
std::string anchor_of(const std::string& heading) {
  std::string out;
  for (unsigned char c : heading) {
    if (std::isalnum(c) || c == '-' || c == '_') out += char(std::tolower(c));
    else if (c == ' ') out += '-';
  }
  return out;
}

std::set<std::string> anchors_in(const std::string& markdown) {
  std::set<std::string> anchors;
  static const std::regex heading(R"((^|\n)#+ ([^\n]*))");
  const std::string prose = prose_of(markdown);
  for (auto it = std::sregex_iterator(prose.begin(), prose.end(), heading); it != std::sregex_iterator(); ++it) {
    anchors.insert(anchor_of((*it)[2].str()));
  }
  return anchors;
}

struct Problems {
  std::vector<std::string> list;
  void add(const std::string& doc, int line, const std::string& what) {
    list.push_back(doc + ":" + std::to_string(line) + ": " + what);
  }
};

struct Counts {
  int links = 0, paths = 0, names = 0;
};

// Markdown links [text](target): targets relative to the doc; web links skipped.
void check_links(const std::string& doc, const std::string& prose, Problems& problems, Counts& counts) {
  static const std::regex link(R"(\]\(([^)\s]+)\))");
  const fs::path doc_dir = (kRoot / doc).parent_path();
  for (auto it = std::sregex_iterator(prose.begin(), prose.end(), link); it != std::sregex_iterator(); ++it) {
    const std::string target = (*it)[1].str();
    if (target.rfind("http", 0) == 0 || target.rfind("mailto:", 0) == 0) continue;
    const int line = line_at(prose, size_t(it->position(0)));
    const size_t hash = target.find('#');
    const std::string path = target.substr(0, hash);
    const fs::path file = path.empty() ? kRoot / doc : (doc_dir / path).lexically_normal();
    counts.links++;
    if (!fs::exists(file)) {
      problems.add(doc, line, "link to a missing file: " + target);
      continue;
    }
    if (hash != std::string::npos && file.extension() == ".md" &&
        anchors_in(read_text(file.string())).count(target.substr(hash + 1)) == 0) {
      problems.add(doc, line, "link to a missing heading: " + target);
    }
  }
}

// Backticked spans: `path:name` and repository paths.
void check_spans(const std::string& doc, const std::string& prose, Problems& problems, Counts& counts) {
  static const std::regex span("`([^`]+)`");
  static const std::regex file_name(
      R"(([A-Za-z0-9_./-]+\.(cpp|hpp|h|py|sh)):([A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*))");
  static const std::regex repo_path(
      R"((src|include|tests|apps|scripts|configs|data|bench|docs|fuzz)/[A-Za-z0-9_./-]*)");
  for (auto it = std::sregex_iterator(prose.begin(), prose.end(), span); it != std::sregex_iterator(); ++it) {
    const std::string text = (*it)[1].str();
    const int line = line_at(prose, size_t(it->position(0)));
    std::smatch m;
    if (std::regex_match(text, m, file_name)) {
      counts.names++;
      const fs::path file = kRoot / m[1].str();
      if (!fs::is_regular_file(file)) {
        problems.add(doc, line, "`" + text + "`: no file " + m[1].str());
      } else if (!defines(read_text(file.string()), m[3].str())) {
        problems.add(doc, line, "`" + text + "`: " + m[1].str() + " does not define " + m[3].str());
      }
    } else if (std::regex_match(text, repo_path)) {
      counts.paths++;
      if (!fs::exists(kRoot / text)) problems.add(doc, line, "`" + text + "`: no such file or directory");
    }
  }
}

}  // namespace

TEST_CASE("tour: the definition check finds definitions and rejects calls and missing names") {
  const std::string source =
      "template <class P = NoPrefetch>\nvoid forward_row(float* y, int64_t cols) {\n"
      "  const double mean = row_sum(x, cols) / double(cols);\n  return row_rstd(var, eps);\n}\n"
      "inline constexpr int kLanes = 16;\nstruct PrefetchNext {\n};\n#define NORMLAB_KERNEL_LIST(X) X(a)\n"
      "TrainSummary Trainer::fit() {\n  data::Task task = build_task(config);\n}\n";
  CHECK(defines(source, "forward_row"));
  CHECK(defines(source, "kLanes"));
  CHECK(defines(source, "PrefetchNext"));
  CHECK(defines(source, "NORMLAB_KERNEL_LIST"));
  CHECK(defines(source, "Trainer::fit"));
  CHECK_FALSE(defines(source, "row_sum"));       // only called
  CHECK_FALSE(defines(source, "row_rstd"));      // only returned
  CHECK_FALSE(defines(source, "build_task"));    // only called
  CHECK_FALSE(defines(source, "forward_rows"));  // a longer name than the one defined
  CHECK_FALSE(defines(source, "Trainer::step"));
  CHECK(anchor_of("The full study: warmup and depth (`configs/study.json`)") ==
        "the-full-study-warmup-and-depth-configsstudyjson");
}

TEST_CASE("tour: every file, link and file:name that tour.md and layernorm.md name exists") {
  for (const char* doc : kCheckedDocs) {
    INFO(doc);
    const std::string prose = prose_of(read_text((kRoot / doc).string()));
    REQUIRE(!prose.empty());
    Problems problems;
    Counts counts;
    check_links(doc, prose, problems, counts);
    check_spans(doc, prose, problems, counts);
    for (const std::string& problem : problems.list) FAIL_CHECK(problem);
    // The parser found what the docs hold (a parser that matches nothing would pass vacuously).
    CHECK(counts.names >= 10);
    CHECK(counts.links + counts.paths >= 3);
  }
}

// Stop 6's exercise, as a test: sequence 1 of a packed batch gets the same LayerNorm and attention
// bits whatever its batch-mate is (8 rows go through the kernel's row groups, 5 rows one at a time),
// and different BatchNorm outputs in training mode.
TEST_CASE("tour: a sequence's LayerNorm and attention rows do not depend on its batch-mate - BatchNorm's do") {
  using namespace normlab;
  const int64_t C = 8;
  std::vector<float> table(10 * C), w(3 * C * C);
  for (size_t i = 0; i < table.size(); i++) table[i] = std::sin(float(i));
  for (size_t i = 0; i < w.size(); i++) w[i] = std::cos(float(i)) / 4;
  struct Outputs {
    Tensor layer_norm, batch_norm, attention;
  };
  auto run = [&](const std::vector<int32_t>& second) {
    const std::vector<data::Example> examples{{{1, 2, 3}, {0, 0, 0}}, {second, std::vector<int32_t>(second.size(), 0)}};
    const data::Batch batch = data::pack_batch(examples, data::TargetKind::per_token);
    Tensor x = ops::embedding(batch.tokens, Tensor::from_data({10, C}, table));
    return Outputs{ops::layer_norm(x, {C}, Tensor(), Tensor()),
                   ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1f, 1e-5f),
                   ops::attention(ops::linear(x, Tensor::from_data({3 * C, C}, w), Tensor()), batch.offsets, 2)};
  };
  const Outputs a = run({4, 5, 6, 7, 8}), b = run({9, 0});
  auto same_first_sequence = [&](const Tensor& p, const Tensor& q) {
    return std::memcmp(p.data(), q.data(), size_t(3 * C) * sizeof(float)) == 0;
  };
  CHECK(same_first_sequence(a.layer_norm, b.layer_norm));
  CHECK(same_first_sequence(a.attention, b.attention));
  CHECK_FALSE(same_first_sequence(a.batch_norm, b.batch_norm));
}

// ctest learns the test names from doctest (doctest_discover_tests) and keeps them in a CMake list,
// where ';' separates items: a name holding one becomes two ctest entries whose filters match no
// test case, so the test silently runs nothing. Every TEST_CASE name here must be free of it.
TEST_CASE("test names: no TEST_CASE name holds a semicolon, which would make ctest run nothing for it") {
  const std::regex test_case(R"re(TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\))re");
  int names = 0;
  for (const auto& entry : fs::directory_iterator(kRoot / "tests")) {
    if (entry.path().extension() != ".cpp") continue;
    const std::string text = normlab::test::read_text(entry.path().string());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), test_case); it != std::sregex_iterator(); ++it) {
      ++names;
      const std::string name = (*it)[1].str();
      INFO(entry.path().filename().string() << ": " << name);
      CHECK(name.find(';') == std::string::npos);
    }
  }
  CHECK(names > 300);  // the scan found the suite's test cases
}
