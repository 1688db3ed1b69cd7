#pragma once
// The report model (report.hpp) as report.md and report.html.
#include <string>

#include "normlab/study/report.hpp"

namespace normlab::study {

std::string render_markdown(const ReportModel& report);  // report.md
// What a caller adds to the page (`normlab serve`: its run table and update script); none in report.html.
struct HtmlExtras {
  std::string head;                // inside <head>, after the style
  std::string before_sections;     // after the intro, before the Answer
  std::string before_end;          // before </body>
  std::string after_first_screen;  // after the lead sections, before the contents
};
std::string render_html(const ReportModel& report, const HtmlExtras& extras = {});  // report.html

}  // namespace normlab::study
