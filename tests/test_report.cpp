// The comparison report: well-formed SVG, the expected sections, and a real render in headless
// Chromium (skipped with a message where chromium is not installed).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/study/svg.hpp"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

// A small XML well-formedness check: balanced tags, quoted attributes, known entities. Enough to
// catch an unescaped '<' or '&' in a label, or an unclosed element.
std::string xml_problem(const std::string& xml) {
  std::vector<std::string> stack;
  size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] == '&') {
      size_t semi = xml.find(';', i);
      std::string entity = semi == std::string::npos ? "" : xml.substr(i, semi - i + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" && entity != "&apos;")
        return fmt::format("bad entity at {}", i);
      i = semi + 1;
      continue;
    }
    if (xml[i] != '<') {
      if (xml[i] == '>') return fmt::format("stray '>' at {}", i);
      ++i;
      continue;
    }
    size_t end = i + 1;
    char quote = 0;
    while (end < xml.size() && (quote || xml[end] != '>')) {
      if (quote && xml[end] == quote) quote = 0;
      else if (!quote && (xml[end] == '"' || xml[end] == '\'')) quote = xml[end];
      else if (!quote && xml[end] == '<') return fmt::format("'<' inside a tag at {}", end);
      ++end;
    }
    if (end >= xml.size()) return "unterminated tag";
    std::string tag = xml.substr(i + 1, end - i - 1);
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name)
        return fmt::format("</{}> does not close <{}>", name, stack.empty() ? "" : stack.back());
      stack.pop_back();
    } else if (tag.back() != '/' && tag[0] != '?' && tag[0] != '!') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
    i = end + 1;
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

std::vector<std::string> extract_svgs(const std::string& html) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = html.find("<svg", pos)) != std::string::npos) {
    size_t end = html.find("</svg>", pos);
    REQUIRE(end != std::string::npos);
    out.push_back(html.substr(pos, end + 6 - pos));
    pos = end;
  }
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A plan and results made up in the test: the report code is exercised without training.
void write_fake_study(const fs::path& dir, study::ComparePlan& plan, std::vector<study::RunResult>& results) {
  fs::create_directories(dir);
  std::ofstream(dir / "base.json") << R"({"train": {"steps": 50}, "task": {"name": "reverse"}})";
  std::ofstream(dir / "compare.json")
      << R"({"base": "base.json", "grid": {"variants": ["none", "post-ln", "pre-ln", "batchnorm"], "lr": [0.001, 0.1], "seeds": [0, 1, 2], "layers": [3]}})";
  plan = study::load_compare_plan((dir / "compare.json").string());
  for (const study::RunSpec& spec : plan.runs) {
    study::RunResult r;
    r.spec = spec;
    r.finished = true;
    r.diverged = spec.variant == "none" && spec.lr() > 0.01;  // the picture the report must show
    const size_t steps = r.diverged ? 20 : 50;
    for (size_t s = 1; s <= steps; ++s) {
      r.steps.push_back(double(s));
      r.loss.push_back(2.5 * std::exp(-0.02 * double(s)) + 0.1 * double(spec.seed()));
      r.grad_norm.push_back(1.0 + 0.01 * double(s));
    }
    r.final_train_loss = r.diverged ? NAN : r.loss.back();
    r.final_valid_loss = r.final_train_loss + 0.1;
    r.final_valid_accuracy = 0.8;
    r.init_residual_rms = {1.0, 1.5, 2.0};
    r.end_residual_rms = {1.2, 2.0, 3.0};
    r.init_layer_grad_norms = {0.5, 0.4, 0.3};
    r.end_layer_grad_norms = {0.2, 0.2, 0.1};
    r.buckets = {{1, 8, false, 0.1, 0.9, 10, 10}, {9, 16, false, 0.3, 0.7, 10, 10}, {17, 32, true, 1.0, 0.3, 10, 10}};
    r.baseline = {std::log(10.0), 0.1, NAN};
    if (!r.diverged)
      for (int64_t step : {25, 50})
        r.evals.push_back(
            {step, {0.2 + 0.01 * double(spec.seed()), step == 50 ? 0.8 : 0.5, 20}, {1.0, 0.3, 10}, {0.5, 0.6, 30}});
    results.push_back(r);
  }
}

}  // namespace

TEST_CASE("report: the well-formedness checker rejects broken XML") {
  CHECK(xml_problem("<svg><text>a &amp; b</text></svg>").empty());
  CHECK_FALSE(xml_problem("<svg><text>a & b</text></svg>").empty());
  CHECK_FALSE(xml_problem("<svg><text>a < b</text></svg>").empty());
  CHECK_FALSE(xml_problem("<svg><g></svg>").empty());
}

TEST_CASE("report: every chart is well-formed SVG, labels are escaped, the sections are there") {
  study::Chart chart;
  chart.title = "loss <&> \"quotes\"";
  chart.x_label = "step";
  chart.y_label = "loss";
  chart.log_y = true;
  chart.series.push_back({"a<b", "#000", {1, 2, 3}, {1, 0.5, NAN}, {}, {}, false, true, {false, false, true}, {}, {}});
  chart.series.push_back(
      {"band", "#f00", {1, 2, 3}, {2, 1, 0.5}, {1.5, 0.8, 0.4}, {2.5, 1.2, 0.6}, true, false, {}, {}, {}});
  const std::string svg = study::render_svg(chart);
  CHECK(xml_problem(svg).empty());
  CHECK(svg.find("loss &lt;&amp;&gt; &quot;quotes&quot;") != std::string::npos);
  CHECK(svg.find("<polygon") != std::string::npos);    // the band
  CHECK(svg.find("textLength") == std::string::npos);  // a short title as it is

  // A title longer than the chart is squeezed into it (textLength = width - left - 8), not cut.
  chart.title = "learned fraction — 12 layers, warmup, task.length_regime=bucketed, and some more words";
  const std::string long_svg = study::render_svg(chart);
  CHECK(xml_problem(long_svg).empty());
  const size_t at = long_svg.find("textLength=\"");
  REQUIRE(at != std::string::npos);
  const double squeezed = std::stod(long_svg.substr(at + 12));
  CHECK(squeezed > 300);
  CHECK(squeezed < chart.width);

  const fs::path dir = fs::temp_directory_path() / fmt::format("normlab-report-{}", ::getpid());
  fs::remove_all(dir);
  study::ComparePlan plan;
  std::vector<study::RunResult> results;
  write_fake_study(dir, plan, results);
  CHECK(plan.runs.size() == 4 * 2 * 3);
  study::write_report(plan, results, dir.string());
  const std::string html = slurp(dir / "report.html");
  for (const char* section : {"Answer", "Setup", "Summary", "Stability", "Validation curves", "Training loss curves",
                              "Gradient norm curves", "per-layer residual RMS", "Accuracy per sequence length"})
    CHECK_MESSAGE(html.find(section) != std::string::npos, section);
  CHECK(html.find("<script") == std::string::npos);                        // self-contained, nothing to run
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // no network resource
  const std::vector<std::string> svgs = extract_svgs(html);
  CHECK(svgs.size() >= 8);
  for (const std::string& s : svgs) CHECK_MESSAGE(xml_problem(s).empty(), xml_problem(s));
  // Readable charts: at least 3 labelled y ticks on every chart (tick labels sit 4 px left of the plot),
  // every learning rate of the grid labelled on the stability chart, the chance loss on every loss chart.
  for (const std::string& s : svgs) {
    size_t y_labels = 0;
    for (size_t pos = 0; (pos = s.find("<text x=\"60.0\"", pos)) != std::string::npos; ++pos) ++y_labels;
    CHECK_MESSAGE(y_labels >= 3, s.substr(0, 300));
  }
  const size_t stability = html.find("Stability");
  CHECK(html.find(">0.001</text>", stability) != std::string::npos);
  CHECK(html.find(">0.1</text>", stability) != std::string::npos);
  size_t chance_lines = 0;
  for (size_t pos = 0; (pos = html.find(">chance 2.303</text>", pos)) != std::string::npos; ++pos) ++chance_lines;
  CHECK(chance_lines ==
        2 + 2 + 1);  // the held-out and the train loss curves at both learning rates, the loss stability chart
  CHECK(html.find("class=\"seed\"", stability) != std::string::npos);        // per-seed points beside the means
  CHECK(html.find(">chance 0.100</text>", stability) != std::string::npos);  // chance accuracy on the stability chart
  CHECK(html.find("## Findings") == std::string::npos);
  // One line of setup, then the Answer; Findings before the table.
  CHECK(html.find("<h2>") == html.find("<h2>Answer</h2>"));
  CHECK(html.find("<h2>Answer</h2>") < html.find("<h2>Findings</h2>"));
  CHECK(html.find("<h2>Findings</h2>") < html.find("<h2>Summary"));
  // BatchNorm is in the grid, but these runs left no checkpoints to evaluate: no section from nothing.
  CHECK(html.find("BatchNorm and its batch") == std::string::npos);
  // Every chart of the page is also a file of its own.
  size_t chart_files = 0;
  for (const auto& entry : fs::directory_iterator(dir / "charts")) {
    CHECK(entry.path().extension() == ".svg");
    CHECK_MESSAGE(xml_problem(slurp(entry.path())).empty(), entry.path().string());
    ++chart_files;
  }
  CHECK(chart_files == svgs.size());
  const std::string csv = slurp(dir / "runs.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 24);
  CHECK(slurp(dir / "report.md").find("| variant |") != std::string::npos);

  // Render it in a real browser.
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
    MESSAGE("chromium is not installed: skipping the headless render of report.html (apt-get install chromium)");
  } else {
    const fs::path png = dir / "report.png";
    const std::string cmd = fmt::format(
        "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
        "--disable-background-networking --disable-component-update --disable-sync --user-data-dir={} "
        "--window-size=1200,3000 --screenshot={} file://{} >/dev/null 2>&1",
        (dir / "chromium-profile").string(), png.string(), (dir / "report.html").string());
    CHECK(std::system(cmd.c_str()) == 0);
    REQUIRE(fs::exists(png));
    const std::string bytes = slurp(png);
    CHECK(bytes.substr(1, 3) == "PNG");
    CHECK(bytes.size() > 50000);  // a blank page compresses to a few KB; charts do not
  }
  fs::remove_all(dir);
}
