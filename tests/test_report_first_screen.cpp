// The report's first screen: the verdict (at most three sentences, never a ratio from runs that did
// not converge), the numbers behind the compact table (best loss and rate, LR sensitivity against a
// hand computation), and a real render in headless Chromium at 1400 x 900 whose first screen holds
// the verdict and the headline figure.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chromium_cdp.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/report.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::Chromium;
using normlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Final held-out loss (trained lengths) per variant and rate; seed s adds 0.01 s. pre-ln is best
// at 0.01 in both settings, post-ln 0.25 worse there (0.35 without warmup), none 0.15 worse, and
// none diverges at 0.1. `still_falling`: every run's held-out loss is still falling at the end.
double final_loss(const std::string& variant, double lr, bool warmup) {
  const int at = lr < 0.005 ? 0 : lr < 0.05 ? 1 : 2;
  if (variant == "pre-ln") return std::vector<double>{0.6, 0.05, 0.4}[at];
  if (variant == "post-ln") return std::vector<double>{0.8, 0.3, 2.3}[at] + (warmup || at == 2 ? 0.0 : 0.1);
  return std::vector<double>{0.7, 0.2, NAN}[at];
}

void make_study(const fs::path& dir, bool still_falling, study::ComparePlan& plan,
                std::vector<study::RunResult>& results) {
  fs::create_directories(dir);
  std::ofstream(dir / "base.json") << R"({"train": {"steps": 100}, "task": {"name": "reverse"}})";
  std::ofstream(dir / "compare.json") << R"({"base": "base.json", "grid": {"variants": ["none", "post-ln", "pre-ln"],
      "lr": [0.001, 0.01, 0.1], "seeds": [0, 1, 2], "layers": [2], "warmup": [true, false]}})";
  plan = study::load_compare_plan((dir / "compare.json").string());
  for (const study::RunSpec& spec : plan.runs) {
    study::RunResult r;
    r.spec = spec;
    r.finished = true;
    const double loss = final_loss(spec.variant, spec.lr(), spec.warmup());
    r.diverged = std::isnan(loss);
    for (size_t s = 1; s <= (r.diverged ? 10 : 100); ++s) {
      r.steps.push_back(double(s));
      r.loss.push_back(r.diverged ? 1e21 : 2.3);
      r.grad_norm.push_back(1.0);
    }
    r.final_train_loss = r.diverged ? NAN : 1.0;
    r.baseline = {std::log(10.0), 0.1, NAN};
    r.end_layer_grad_norms = {0.5, 0.5};
    if (!r.diverged) {
      const double final = loss + 0.01 * double(spec.seed());
      const double accuracy = still_falling ? 0.7 : final < 0.5 ? 0.97 : final < 1.0 ? 0.8 : 0.1;
      const std::vector<double> factor =
          still_falling ? std::vector<double>{1.6, 1.3, 1.1, 1.0} : std::vector<double>{1.0, 1.0, 1.0, 1.0};
      for (int i = 0; i < 4; ++i)
        r.evals.push_back({25 * (i + 1), {final * factor[size_t(i)], accuracy, 20}, {1.0, 0.3, 10}, {1.0, 0.5, 30}});
    }
    results.push_back(r);
  }
}

size_t words(const std::vector<std::string>& sentences) {
  size_t n = 0;
  for (const std::string& s : sentences) {
    std::istringstream in(s);
    for (std::string w; in >> w;) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("first screen: the verdict names the better placement, what it bought against none, and how sure") {
  TempDir tmp("normlab_first_screen");
  study::ComparePlan plan;
  std::vector<study::RunResult> results;
  make_study(tmp.path, false, plan, results);
  const std::vector<std::string> said = study::write_report(plan, results, tmp.path.string());
  const nlohmann::json summary = nlohmann::json::parse(slurp(tmp.path / "summary.json"));
  const std::vector<std::string> verdict = summary["verdict"];
  INFO(fmt::format("{}", fmt::join(verdict, "\n")));
  REQUIRE(verdict.size() == 3);
  CHECK(said.size() == 3 + summary["answer"].size());  // for the CLI: the verdict first, then the Answer in full
  CHECK(said[0] == verdict[0]);
  CHECK(words(verdict) <= 200);
  // Placement by LR sensitivity (paired by seed); the best loss against none only where it differs.
  CHECK(verdict[0] ==
        "pre-ln tolerates a wider range of learning rates than post-ln in every setting: LR sensitivity "
        "(pre-ln vs post-ln, nats) 0.225 vs 0.623 (warmup), 0.225 vs 0.598 (no warmup).");
  CHECK(verdict[1] ==
        "Against no normalization (pre-ln vs none): LR sensitivity 0.225 vs 0.648, best loss 0.15 lower "
        "(warmup); LR sensitivity 0.225 vs 0.648, best loss 0.15 lower (no warmup).");
  CHECK(verdict[2] ==
        "How sure: 3 seeds per cell; outside the 95% interval: pre-ln vs post-ln (warmup), pre-ln vs "
        "post-ln (no warmup), pre-ln vs none (warmup), pre-ln vs none (no warmup).");

  CHECK(!summary["answer"].empty());  // the Answer's sentences in full stay in summary.json
  const nlohmann::json& cells = summary["first_screen"];
  REQUIRE(cells.size() == 6);
  // Capped losses at the three log-equally spaced rates a, b, c, linear in ln lr between them, averaged
  // over ln lr (two trapezoids of equal width): (a + 2 b + c) / 4, minus the best (b).
  const auto sensitivity = [](double a, double b, double c) { return (a + 2 * b + c) / 4 - std::min({a, b, c}); };
  // One source of truth: every number of the first screen is the study table's (summary.json's "study",
  // the numbers the Answer's convergence and sensitivity lines are written from), exactly.
  const nlohmann::json& rows = summary["study"]["rows"];
  REQUIRE(rows.size() == cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    INFO(rows[i].dump());
    CHECK(cells[i]["variant"] == rows[i]["variant"]);
    CHECK(cells[i]["setting"] == rows[i]["setting"]);
    CHECK(cells[i]["best_lr"] == rows[i]["curve"]["best_lr"]);
    CHECK(cells[i]["best_loss"]["mean"] == rows[i]["curve"]["best_loss"]);
    CHECK(cells[i]["converged"] == rows[i]["convergence"]["converged"]);
    CHECK(cells[i]["judged"] == rows[i]["convergence"]["judged"]);
    CHECK(cells[i]["lr_sensitivity"] == rows[i]["sensitivity"]["interval"]);
    CHECK(cells[i]["lr_sensitivity_range"][0] == rows[i]["sensitivity"]["from"]);
  }
  CHECK(summary["study"]["gated"] == true);
  for (const nlohmann::json& cell : cells) {
    INFO(cell.dump());
    CHECK(cell["converged"] == true);
    CHECK(cell["edge"] == "interior");
    CHECK(cell["best_lr"] == doctest::Approx(0.01));
    CHECK(cell["best_loss"]["n"] == 3);
    if (cell["variant"] == "pre-ln") {
      CHECK(cell["best_loss"]["mean"].get<double>() == doctest::Approx(0.06));
      CHECK(cell["lr_sensitivity"]["mean"].get<double>() == doctest::Approx(sensitivity(0.6, 0.05, 0.4)).epsilon(1e-9));
    }
    if (cell["variant"] == "none")  // diverged at 0.1: counts as ln K there; seed 1 is the mean seed
      CHECK(cell["lr_sensitivity"]["mean"].get<double>() ==
            doctest::Approx(sensitivity(0.71, 0.21, std::log(10.0))).epsilon(1e-9));
  }

  // report.md opens on the verdict, the headline figure and the table, then the contents.
  const std::string md = slurp(tmp.path / "report.md");
  const size_t answer = md.find("## Answer"), figure = md.find("](charts/headline-2-layers-warmup.svg)"),
               table = md.find("| variant | setting | best held-out loss"), contents = md.find("Contents: ");
  CHECK(answer < md.find(verdict[0]));
  CHECK(md.find(verdict[0]) < figure);
  CHECK(figure < table);
  CHECK(table < contents);
  CHECK(contents < md.find("## Setup"));
  CHECK(
      md.find("[Summary: held-out metrics per cell, mean \\[95% interval\\] over seeds](#summary-held-out-metrics-per-"
              "cell-mean-95-interval-over-seeds)") != std::string::npos);
  // A diverged run does not flatten the headline figure: a triangle on its top edge instead.
  const std::string headline = slurp(tmp.path / "charts" / "headline-2-layers-warmup.svg");
  CHECK(headline.find("class=\"above\"") != std::string::npos);
  const std::string html = slurp(tmp.path / "report.html");
  CHECK(html.find("<nav class=\"contents\"") != std::string::npos);
  CHECK(html.find("<section id=\"setup\">\n<h2>Setup</h2>") != std::string::npos);
}

TEST_CASE("first screen: runs still improving at their best rate make the verdict say so, and state no ratio") {
  TempDir tmp("normlab_first_screen_unconverged");
  study::ComparePlan plan;
  std::vector<study::RunResult> results;
  make_study(tmp.path, true, plan, results);
  study::write_report(plan, results, tmp.path.string());
  const std::vector<std::string> verdict = nlohmann::json::parse(slurp(tmp.path / "summary.json"))["verdict"];
  INFO(fmt::format("{}", fmt::join(verdict, "\n")));
  REQUIRE(!verdict.empty());
  CHECK(verdict.size() <= 3);
  CHECK(verdict[0] ==
        "Not converged: post-ln's best runs (warmup, lr 0.01) are still improving at step 100 — the "
        "boundaries and ratios below describe an unfinished race, not stability.");
  CHECK(verdict[1].find("6 of 6 variant–setting cells did not converge") == 0);
  for (const std::string& s : verdict) {
    CHECK(s.find("beats") == std::string::npos);
    CHECK(s.find("none's") == std::string::npos);
  }
  const std::string md = slurp(tmp.path / "report.md");
  CHECK(md.find("| no: 3/3 still improving |") != std::string::npos);
  // The verdict and the Answer's gate line name the same failure, from the same table.
  const nlohmann::json summary = nlohmann::json::parse(slurp(tmp.path / "summary.json"));
  CHECK(summary["answer"][0].get<std::string>().find("not converged: none's best runs at 0.01 (2 layers, warmup) are "
                                                     "still improving at step 100 (3 of 3 seeds;") == 0);
  for (size_t i = 0; i < summary["first_screen"].size(); ++i) {
    CHECK(summary["first_screen"][i]["converged"] == false);
    CHECK(summary["study"]["rows"][i]["convergence"]["converged"] == false);
    CHECK(summary["first_screen"][i]["improving"] == 3);
  }
}

TEST_CASE("first screen in headless Chromium at 1400x900: the verdict and the headline figure are on it") {
  if (!Chromium::available()) {
    MESSAGE("chromium is not installed: skipping (apt-get install chromium; scripts/test.sh does)");
    return;
  }
  TempDir tmp("normlab_first_screen_browser");
  study::ComparePlan plan;
  std::vector<study::RunResult> results;
  make_study(tmp.path / "study", false, plan, results);
  study::write_report(plan, results, (tmp.path / "study").string());
  Chromium browser(tmp.sub("profile"), tmp.sub("chromium.log"), 1400, 900);
  browser.open("file://" + (tmp.path / "study" / "report.html").string());
  REQUIRE(browser.wait_until("document.readyState==='complete' && document.querySelector('.answer')", 20));
  // [top, bottom, left, width] of an element in CSS pixels of the 1400 x 900 viewport.
  const auto box = [&](const std::string& selector) {
    return browser.eval("(function(){var r=document.querySelector(\"" + selector +
                        "\").getBoundingClientRect();return [r.top,r.bottom,r.left,r.width];})()");
  };
  const nlohmann::json verdict = box(".answer"), first = box("section.lead .charts svg"),
                       second = box("section.lead .charts svg:nth-of-type(2)"), table = box("section.lead table");
  INFO(verdict.dump(), " ", first.dump(), " ", second.dump(), " ", table.dump());
  CHECK(verdict[0].get<double>() >= 0);
  CHECK(verdict[1].get<double>() <= 900);
  CHECK(first[1].get<double>() <= 900);
  CHECK(first[3].get<double>() >= 500);                      // drawn large enough to read
  CHECK(second[0].get<double>() == first[0].get<double>());  // warmup and no warmup side by side
  CHECK(second[2].get<double>() > first[2].get<double>());
  CHECK(second[1].get<double>() <= 900);
  CHECK(table[0].get<double>() < 900);  // the table starts on the first screen
  CHECK(browser.eval("document.querySelector('.answer').textContent")
            .get<std::string>()
            .find("pre-ln tolerates a wider range of learning rates than post-ln") != std::string::npos);
  if (const char* dir = std::getenv("NORMLAB_REPORT_SCREENSHOTS"))
    browser.screenshot(std::string(dir) + "/first-screen.png");
}
