#pragma once
// The live page's own parts around the report: its style, the run table and charts panel, and the
// script that fills them (Chart.js from Debian's libjs-chart.js, served by serve itself). Their
// text never changes, so the page's CSP names each by its SHA-256 hash.
#include <string>
#include <string_view>

namespace normlab::serve {

// Where Debian's libjs-chart.js installs Chart.js (UMD build; v3.9 in Debian 12).
inline constexpr const char* kChartJsPath = "/usr/share/javascript/chart.js/chart.min.js";

// Chart.js's text, read once ("" when libjs-chart.js is not installed: the page then says so and
// shows the run table without charts).
const std::string& chart_library();

// "BASE64" of the SHA-256 of `text`: a CSP hash source and a subresource-integrity value.
std::string sha256_base64(std::string_view text);

std::string live_head();  // the style, inside <head>
// The run table (its first rows and progress line drawn by the server, for a reader without
// scripts; the script redraws them) and the charts panel, before the report's sections.
std::string live_top(const std::string& progress, const std::string& rows_html);
// Chart.js and the page's script, before </body>; `etag` is the page's (an attribute: the script
// text stays the same).
std::string live_script(const std::string& etag);

}  // namespace normlab::serve
