#pragma once
// A small SVG line-chart writer for the comparison report: axes (linear or log), ticks, labelled
// axes, lines, min-max bands, point markers, a legend. Output is a self-contained <svg> element —
// no scripts, no external fonts — so report.html opens anywhere, offline.
#include <string>
#include <vector>

namespace normlab::study {

struct Series {
  std::string label;
  std::string color;  // CSS colour
  std::vector<double> x, y;
  std::vector<double> y_low, y_high;  // optional band (same length as x), drawn under the line
  bool dashed = false;
  bool markers = false;       // draw a dot at each point
  std::vector<bool> crossed;  // optional: draw an X instead of a dot (diverged run) at point i
  // Optional per-seed values behind a mean or median: (point_x[i], point_y[i]) drawn as small open
  // circles in the series' colour, so a reader sees the spread and n, not only the summary.
  std::vector<double> point_x, point_y;
};

struct Chart {
  std::string title;
  std::string x_label, y_label;
  bool log_x = false, log_y = false;
  bool integer_x = false;  // ticks only at whole numbers (block index)
  double width = 560, height = 340;
  std::vector<Series> series;
  // Optional shaded x-range with a caption (e.g. "longer than trained").
  double shade_from = 0, shade_to = 0;
  std::string shade_label;
  std::string note;  // small text under the plot area
  double y_max = 0;  // > 0: the y axis ends here; data above leaves the plot at the top
  // With y_max: a point above it (or +inf: a diverged run) is drawn as a triangle on the plot's top
  // edge, filled for a series' point, open for a per-seed point, so a huge loss stays visible without
  // flattening the rest.
  bool mark_above = false;
  std::vector<double> x_ticks;  // explicit x ticks, each labelled (e.g. every learning rate of a grid)
  struct HLine {
    double y;
    std::string label;
  };
  std::vector<HLine> h_lines;  // dashed grey reference lines across the plot (e.g. the chance loss)
};

std::string render_svg(const Chart& chart);
// The same, its clip path named "plot<clip_number>": one number per chart keeps the ids unique
// within a page that inlines many charts, and the same page after page.
std::string render_svg(const Chart& chart, int clip_number);

// Tick positions: at most about 6 per axis, at least 3 on a range that is not a single point; a
// log axis labels 1-2-5 steps within a narrow range and every k-th decade over a wide one.
std::vector<double> axis_ticks(double lo, double hi, bool log, bool integer = false);

// Distinct, colour-blind-friendly colours (Okabe-Ito order), cycling.
std::string palette(size_t i);

// Escape &, <, >, " for XML text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace normlab::study
