// The live page's text from one drawing: the report as `normlab report` renders it, with its step
// charts left to the page's live charts and its footer's links made the server's live tables; the
// run table and charts panel (page.hpp) above it while runs are unfinished, below it once every
// run is judged; report.md and status.json beside it.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "live_parts.hpp"
#include "normlab/serve/page.hpp"
#include "normlab/study/render.hpp"

namespace normlab::serve::live_parts {

namespace {

// The report's step charts (validation, training loss, gradient norm: every logged point as SVG,
// megabytes on a long run) are the interactive charts above the report on the live page.
bool step_chart(const std::string& name) {
  return name.rfind("valid-", 0) == 0 || name.rfind("train-loss", 0) == 0 || name.rfind("grad-norm", 0) == 0;
}

// The live page's report: its step charts drawn by the page's charts instead, and a footer whose
// links are the server's live tables.
std::string live_html(study::ReportModel report, const study::HtmlExtras& extras) {
  for (study::ReportSection& sec : report.sections) {
    const size_t before = sec.charts.size();
    sec.charts.erase(std::remove_if(sec.charts.begin(), sec.charts.end(),
                                    [](const auto& c) { return step_chart(c.first); }),
                     sec.charts.end());
    if (sec.charts.size() < before)
      sec.text +=
          (sec.text.empty() ? "" : " ") + std::string("(Live: these curves are in the Charts panel above, per run.)");
  }
  std::string html = study::render_html(report, extras);
  const std::string footer = "each chart as SVG in charts/. Tables as Markdown: report.md.";
  if (const size_t at = html.find(footer); at != std::string::npos)
    html.replace(at, footer.size(), "the report as Markdown: <a href=\"report.md\">report.md</a> (all three live).");
  return html;
}

}  // namespace

LiveReport::Page reading_page(const std::string& dir, bool compare) {
  LiveReport::Page page;
  page.etag = "\"first-drawing\"";
  const study::HtmlExtras extras{live_head(), live_top("reading the runs…", ""), live_script(page.etag), ""};
  const study::ReportModel
      model{compare ? "normlab compare report" : "normlab serve: " + dir,
            {"Reading the runs: the first drawing of this page is under way; it appears here when done."},
            {},
            {}};
  page.html = study::render_html(model, extras);
  page.report_md = study::render_markdown(model);
  page.status_json = nlohmann::json{{"page", page.etag},
                                    {"progress", "reading the runs…"},
                                    {"colors", nlohmann::json::object()},
                                    {"extra_keys", nlohmann::json::array()},
                                    {"metrics", nlohmann::json::array()},
                                    {"runs", nlohmann::json::array()}}
                         .dump();
  return page;
}

std::string waiting_text(const std::string& dir) {
  return fmt::format(
      "{} does not exist yet: this page waits for it and follows it from then on. Start the study with "
      "`normlab compare --config FILE --out {}` (or one run with `normlab train --config FILE --out {}`).",
      dir, dir, dir);
}

LiveReport::Page page_of(Drawn& drawn, const std::string& etag, const std::string& dir, const Layout& layout,
                         const std::string& no_report) {
  LiveReport::Page page;
  page.etag = etag;
  // Once every run is judged the page opens on the report's first screen (the verdict, the headline
  // figure, the table), the run table and live charts below it; until then the runs come first.
  const bool all_judged =
      !drawn.runs.empty() && drawn.report &&
      std::all_of(drawn.runs.begin(), drawn.runs.end(), [](const RunStatus& r) { return judged(r.state); });
  std::string top = live_top(progress_line(drawn.runs), rows_html(drawn.runs));
  const study::HtmlExtras extras{live_head(), all_judged ? "" : top, live_script(page.etag), all_judged ? top : ""};
  if (!drawn.report)
    drawn.report =
        study::ReportModel{layout.compare ? "normlab compare report" : "normlab serve: " + dir, {no_report}, {}, {}};
  page.html = live_html(*drawn.report, extras);
  page.report_md = study::render_markdown(*drawn.report);
  page.runs_csv = std::move(drawn.runs_csv);
  page.status_json = status_json(drawn.runs, page.etag, dir, layout.compare, metric_names(layout.run_dirs));
  return page;
}

}  // namespace normlab::serve::live_parts
