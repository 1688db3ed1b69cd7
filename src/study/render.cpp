// The two renderings of one report model: Markdown (report.md) and a self-contained HTML page
// (report.html, the page `normlab serve` shows). Neither computes anything; build_report does.
#include <string>

#include "normlab/study/render.hpp"
#include "normlab/study/svg.hpp"

namespace normlab::study {

namespace {

const char* kStyle =
    "<style>body{font-family:sans-serif;margin:24px;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}"
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th{background:#f3f3f3}td:first-child{text-align:left}"
    ".answer{background:#f4f8fc;border-left:4px solid #0072b2;padding:4px 16px}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:8px}"
    ".charts svg{width:100%;height:auto}p,li{line-height:1.4;max-width:1400px}</style>";

// The Answer is a box of paragraphs; every other section's bullets are a list.
std::string html_section(const ReportSection& sec) {
  const bool answer = sec.title == "Answer";
  std::string html = "<h2>" + xml_escape(sec.title) + "</h2>\n" + (answer ? "<div class=\"answer\">" : "") + "<p>" +
                     xml_escape(sec.text) + "</p>\n";
  if (!sec.bullets.empty()) {
    html += answer ? "" : "<ul>\n";
    for (const std::string& b : sec.bullets) html += answer ? "<p>" + xml_escape(b) + "</p>\n" : "<li>" + xml_escape(b) + "</li>\n";
    html += answer ? "" : "</ul>\n";
  }
  if (answer) html += "</div>\n";
  html += sec.table_html;
  if (!sec.charts.empty()) {
    html += "<div class=\"charts\">\n";
    for (const auto& [name, svg] : sec.charts) html += svg;
    html += "</div>\n";
  }
  return html;
}

}  // namespace

std::string render_markdown(const ReportModel& report) {
  std::string md = "# " + report.title + "\n\n";
  for (const std::string& p : report.intro) md += p + "\n\n";
  for (const ReportSection& sec : report.sections) {
    md += "## " + sec.title + "\n\n" + sec.text + "\n\n";
    for (const std::string& b : sec.bullets) md += "- " + b + "\n";
    if (!sec.bullets.empty()) md += "\n";
    md += sec.table_md + (sec.table_md.empty() ? "" : "\n");
    if (!sec.charts.empty()) {
      for (const auto& [name, svg] : sec.charts) md += "![" + name + "](charts/" + name + ".svg) ";
      md += "\n\n";
    }
  }
  return md + "Charts: report.html and charts/*.svg. One row per run: runs.csv; every curve: curves.csv.\n";
}

std::string render_html(const ReportModel& report, const HtmlExtras& extras) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
                     xml_escape(report.title) + "</title>\n" + kStyle + extras.head + "</head><body>\n<h1>" +
                     xml_escape(report.title) + "</h1>\n";
  for (const std::string& p : report.intro) html += "<p>" + xml_escape(p) + "</p>\n";
  html += extras.before_sections;
  for (const ReportSection& sec : report.sections) html += html_section(sec);
  return html + "<p>One row per run: <a href=\"runs.csv\">runs.csv</a>; every curve: <a href=\"curves.csv\">curves.csv</a>; "
                "each chart as SVG in charts/. Tables as Markdown: report.md.</p>\n" +
         extras.before_end + "</body></html>\n";
}

}  // namespace normlab::study
