// The two renderings of one report model: Markdown (report.md) and a self-contained HTML page
// (report.html, the page `normlab serve` shows). Neither computes anything; build_report does.
// Both open on the first screen (the lead sections: the verdict, the headline figure, the compact
// table), then a contents list linking every other section's heading.
#include <cctype>
#include <string>

#include "normlab/study/render.hpp"
#include "normlab/study/svg.hpp"

namespace normlab::study {

namespace {

// The first screen fits 1400 x 900: a compact title and setup line, the verdict in a box, the
// headline charts two to a row, the table in small type.
const char* kStyle =
    "<style>body{font-family:sans-serif;margin:16px 24px;color:#222}"
    "h1{font-size:20px;margin:0 0 4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}"
    ".intro{font-size:13px;color:#555;margin:0 0 6px}"
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th{background:#f3f3f3}td:first-child{text-align:left}"
    ".answer{background:#f4f8fc;border-left:4px solid #0072b2;padding:2px 16px}.answer p{margin:6px 0}"
    ".lead h2{margin-top:4px}.lead .charts{grid-template-columns:repeat(auto-fill,minmax(520px,1fr))}"
    ".lead table{font-size:12px}.lead td,.lead th{padding:2px 6px}"
    ".contents{font-size:14px;margin-top:12px}.contents ol{display:flex;flex-wrap:wrap;gap:2px 20px;margin:4px 0;"
    "padding:0;list-style:none}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:8px}"
    ".charts svg{width:100%;height:auto}p,li{line-height:1.4;max-width:1400px}</style>";

// A heading's anchor as GitHub makes it from Markdown: lower case, spaces to '-', other
// punctuation (and every non-ASCII byte) dropped, so report.md's links work on GitHub too.
std::string anchor(const std::string& title) {
  std::string out;
  for (unsigned char ch : title) {
    if (std::isalnum(ch)) out += char(std::tolower(ch));
    else if (ch == ' ' || ch == '-' || ch == '_') out += ch == ' ' ? '-' : char(ch);
  }
  return out;
}

// A title as Markdown link text: its brackets escaped.
std::string link_text(const std::string& title) {
  std::string out;
  for (char ch : title) {
    if (ch == '[' || ch == ']') out += '\\';
    out += ch;
  }
  return out;
}

// The verdict is a box of paragraphs; every other section's bullets are a list. The lead sections
// draw their charts before their table (the figure, then its numbers).
std::string html_section(const ReportSection& sec, bool lead) {
  const bool answer = sec.title == "Answer";
  std::string html = "<h2>" + xml_escape(sec.title) + "</h2>\n" + (answer ? "<div class=\"answer\">" : "") +
                     (sec.text.empty() ? "" : "<p>" + xml_escape(sec.text) + "</p>\n");
  if (!sec.bullets.empty()) {
    html += answer ? "" : "<ul>\n";
    for (const std::string& b : sec.bullets)
      html += answer ? "<p>" + xml_escape(b) + "</p>\n" : "<li>" + xml_escape(b) + "</li>\n";
    html += answer ? "" : "</ul>\n";
  }
  if (answer) html += "</div>\n";
  std::string charts;
  if (!sec.charts.empty()) {
    charts += "<div class=\"charts\">\n";
    for (const auto& [name, svg] : sec.charts) charts += svg;
    charts += "</div>\n";
  }
  html += lead ? charts + sec.table_html : sec.table_html + charts;
  // Each section in its own element, its id the heading's anchor (the contents list links to it).
  return "<section id=\"" + anchor(sec.title) + "\"" + (lead ? " class=\"lead\"" : "") + ">\n" + html + "</section>\n";
}

std::string md_section(const ReportSection& sec, bool lead) {
  std::string md = "## " + sec.title + "\n\n" + (sec.text.empty() ? "" : sec.text + "\n\n");
  if (lead && !sec.bullets.empty()) {
    for (const std::string& b : sec.bullets) md += b + (&b == &sec.bullets.back() ? "\n\n" : " ");
  } else {
    for (const std::string& b : sec.bullets) md += "- " + b + "\n";
    if (!sec.bullets.empty()) md += "\n";
  }
  std::string charts;
  if (!sec.charts.empty()) {
    for (const auto& [name, svg] : sec.charts) charts += "![" + name + "](charts/" + name + ".svg) ";
    charts += "\n\n";
  }
  const std::string table = sec.table_md + (sec.table_md.empty() ? "" : "\n");
  return md + (lead ? charts + table : table + charts);
}

}  // namespace

std::string render_markdown(const ReportModel& report) {
  std::string md = "# " + report.title + "\n\n";
  for (const std::string& p : report.intro) md += p + "\n\n";
  const size_t lead = std::min(report.lead_sections, report.sections.size());
  for (size_t i = 0; i < lead; ++i) md += md_section(report.sections[i], true);
  if (lead < report.sections.size()) {
    md += "Contents: ";
    for (size_t i = lead; i < report.sections.size(); ++i)
      md += (i == lead ? "" : " · ") +
            ("[" + link_text(report.sections[i].title) + "](#" + anchor(report.sections[i].title) + ")");
    md += "\n\n";
  }
  for (size_t i = lead; i < report.sections.size(); ++i) md += md_section(report.sections[i], false);
  return md + "Charts: report.html and charts/*.svg. One row per run: runs.csv; every curve: curves.csv.\n";
}

std::string render_html(const ReportModel& report, const HtmlExtras& extras) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
                     xml_escape(report.title) + "</title>\n" + kStyle + extras.head + "</head><body>\n<h1>" +
                     xml_escape(report.title) + "</h1>\n";
  for (const std::string& p : report.intro) html += "<p class=\"intro\">" + xml_escape(p) + "</p>\n";
  html += extras.before_sections;
  const size_t lead = std::min(report.lead_sections, report.sections.size());
  for (size_t i = 0; i < lead; ++i) html += html_section(report.sections[i], true);
  html += extras.after_first_screen;
  if (lead < report.sections.size()) {
    html += "<nav class=\"contents\" id=\"contents\"><b>Contents</b><ol>\n";
    for (size_t i = lead; i < report.sections.size(); ++i)
      html += "<li><a href=\"#" + anchor(report.sections[i].title) + "\">" + xml_escape(report.sections[i].title) +
              "</a></li>\n";
    html += "</ol></nav>\n";
  }
  for (size_t i = lead; i < report.sections.size(); ++i) html += html_section(report.sections[i], false);
  return html +
         "<p>One row per run: <a href=\"runs.csv\">runs.csv</a>; every curve: <a href=\"curves.csv\">curves.csv</a>; "
         "each chart as SVG in charts/. Tables as Markdown: report.md.</p>\n" +
         extras.before_end + "</body></html>\n";
}

}  // namespace normlab::study
