#include "normlab/study/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace normlab::study {

std::string palette(size_t i) {
  static const char* colors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                 "#56B4E9", "#000000", "#F0E442", "#999999"};
  return colors[i % (sizeof(colors) / sizeof(colors[0]))];
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

struct Axis {
  bool log = false;
  double lo = 0, hi = 1;    // data range (log10 values when log)
  double px0 = 0, px1 = 1;  // pixel range
  double map(double v) const {
    double t = log ? std::log10(v) : v;
    return px0 + (t - lo) / (hi - lo) * (px1 - px0);
  }
};

bool usable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// "Nice" linear ticks (1, 2, 5 x 10^k) about `target` of them over [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, bool integer, double target) {
  std::vector<double> out;
  const double span = hi - lo;
  if (!(span > 0)) return {lo};
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  if (integer) step = std::max(1.0, std::round(step));
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-6; v += step)
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return out;
}

std::vector<double> ticks(const Axis& axis, bool integer = false) {
  return axis_ticks(axis.lo, axis.hi, axis.log, integer);
}

}  // namespace

std::vector<double> axis_ticks(double lo, double hi, bool log, bool integer) {
  if (!log) {
    std::vector<double> out = linear_ticks(lo, hi, integer, 5);
    if (out.size() < 3 && !integer) out = linear_ticks(lo, hi, false, 10);
    return out;
  }
  // lo and hi are log10 values.
  std::vector<double> out;
  const int first = int(std::ceil(lo - 1e-9)), last = int(std::floor(hi + 1e-9));
  const int decades = last - first + 1;
  if (decades >= 3) {
    const int every = (decades + 5) / 6;  // at most 6 labelled decades
    for (int e = first; e <= last; ++e)
      if (((e % every) + every) % every == 0) out.push_back(std::pow(10.0, e));
    if (out.size() >= 3 || every == 1) return out;
    out.clear();
    for (int e = first; e <= last; e += std::max(1, (decades - 1) / 2)) out.push_back(std::pow(10.0, e));
    return out;
  }
  for (const std::vector<double>& mantissas :
       {std::vector<double>{1, 2, 5}, std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    out.clear();
    for (int e = int(std::floor(lo)); e <= int(std::ceil(hi)); ++e)
      for (double m : mantissas) {
        const double v = m * std::pow(10.0, e);
        const double l = std::log10(v);
        if (l >= lo - 1e-9 && l <= hi + 1e-9) out.push_back(v);
      }
    if (out.size() >= 3) return out;
  }
  // Less than a factor of ~1.5 from end to end: linear ticks between the two ends.
  out = linear_ticks(std::pow(10.0, lo), std::pow(10.0, hi), false, 4);
  if (out.size() < 3) out = linear_ticks(std::pow(10.0, lo), std::pow(10.0, hi), false, 8);
  return out;
}

namespace {

std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a >= 1e4 || a < 1e-3) return fmt::format("{:.0e}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

void fit(Axis& axis, const std::vector<double>& values) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values)
    if (usable(v, axis.log)) {
      double t = axis.log ? std::log10(v) : v;
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-12) {
    lo -= axis.log ? 0.5 : (std::abs(lo) * 0.1 + 0.5);
    hi += axis.log ? 0.5 : (std::abs(hi) * 0.1 + 0.5);
  }
  const double pad = (hi - lo) * 0.04;
  axis.lo = lo - pad;
  axis.hi = hi + pad;
}

}  // namespace

namespace {

// The plot area: its axes mapped to pixels, and the margins around it.
struct Frame {
  Axis x, y;
  double left = 64, top = 30;
};

Frame frame_of(const Chart& chart) {
  // The legend sits right of the plot; make room for its longest label (about 6.5 px per character).
  size_t longest_label = 0;
  for (const Series& s : chart.series) longest_label = std::max(longest_label, s.label.size());
  Frame f{Axis{chart.log_x}, Axis{chart.log_y}};
  const double right = std::clamp(44.0 + 6.5 * double(longest_label), 150.0, 0.45 * chart.width);
  const double bottom = chart.note.empty() ? 46 : 62;
  std::vector<double> xs, ys;
  for (const Series& s : chart.series) {
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
    ys.insert(ys.end(), s.y_low.begin(), s.y_low.end());
    ys.insert(ys.end(), s.y_high.begin(), s.y_high.end());
    xs.insert(xs.end(), s.point_x.begin(), s.point_x.end());
    ys.insert(ys.end(), s.point_y.begin(), s.point_y.end());
  }
  if (chart.shade_to > chart.shade_from) xs.push_back(chart.shade_to);
  xs.insert(xs.end(), chart.x_ticks.begin(), chart.x_ticks.end());
  for (const Chart::HLine& line : chart.h_lines) ys.push_back(line.y);
  fit(f.x, xs);
  if (chart.y_max > 0) {
    const double cap = chart.y_max;
    ys.erase(std::remove_if(ys.begin(), ys.end(), [&](double v) { return v > cap; }), ys.end());
    ys.push_back(cap);
  }
  fit(f.y, ys);
  f.x.px0 = f.left;
  f.x.px1 = chart.width - right;
  f.y.px0 = chart.height - bottom;
  f.y.px1 = f.top;
  return f;
}

// The shaded range, grid lines, ticks, the plot's frame and the axis labels.
std::string draw_axes(const Chart& chart, const Axis& xa, const Axis& ya) {
  std::string svg;
  if (chart.shade_to > chart.shade_from) {
    const double x0 = std::max(xa.px0, xa.map(chart.shade_from)), x1 = std::min(xa.px1, xa.map(chart.shade_to));
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#eeeeee\"/>\n", x0,
                       ya.px1, std::max(0.0, x1 - x0), ya.px0 - ya.px1);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#666\" font-size=\"10\">{}</text>\n", x0 + 3,
                       ya.px1 + 12, xml_escape(chart.shade_label));
  }
  // Grid, ticks and tick labels.
  std::vector<double> x_ticks = chart.x_ticks;
  x_ticks.erase(std::remove_if(x_ticks.begin(), x_ticks.end(), [&](double v) { return !usable(v, xa.log); }),
                x_ticks.end());
  if (x_ticks.empty()) x_ticks = ticks(xa, chart.integer_x);
  for (double t : x_ticks) {
    const double px = xa.map(t);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>\n", px,
                       ya.px0, ya.px1);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", px, ya.px0 + 14,
                       tick_label(t));
  }
  for (double t : ticks(ya)) {
    const double py = ya.map(t);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/>\n", xa.px0,
                       py, xa.px1, py);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", xa.px0 - 4, py + 4,
                       tick_label(t));
  }
  svg += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#444\"/>\n", xa.px0,
      ya.px1, xa.px1 - xa.px0, ya.px0 - ya.px1);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", (xa.px0 + xa.px1) / 2,
                     ya.px0 + 30, xml_escape(chart.x_label));
  svg += fmt::format("<text transform=\"translate(14 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     (ya.px0 + ya.px1) / 2, xml_escape(chart.y_label));

  return svg;
}

// One series: its band, its line (with gaps at missing values) and its markers.
std::string draw_series(const Series& s, const Axis& xa, const Axis& ya) {
  std::string svg;
  const bool band = s.y_low.size() == s.x.size() && s.y_high.size() == s.x.size() && !s.x.empty();
  if (band) {
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i)
      if (usable(s.x[i], xa.log) && usable(s.y_high[i], ya.log))
        points += fmt::format("{:.1f},{:.1f} ", xa.map(s.x[i]), ya.map(s.y_high[i]));
    for (size_t i = s.x.size(); i-- > 0;)
      if (usable(s.x[i], xa.log) && usable(s.y_low[i], ya.log))
        points += fmt::format("{:.1f},{:.1f} ", xa.map(s.x[i]), ya.map(s.y_low[i]));
    svg += fmt::format("<polygon points=\"{}\" fill=\"{}\" fill-opacity=\"0.18\" stroke=\"none\"/>\n", points, s.color);
  }
  std::string path;
  bool pen_down = false;
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!usable(s.x[i], xa.log) || !usable(s.y[i], ya.log)) {
      pen_down = false;  // a gap, not a line through a missing value
      continue;
    }
    path += fmt::format("{}{:.1f},{:.1f} ", pen_down ? "L" : "M", xa.map(s.x[i]), ya.map(s.y[i]));
    pen_down = true;
  }
  if (!path.empty())
    svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{}/>\n", path, s.color,
                       s.dashed ? " stroke-dasharray=\"5 3\"" : "");
  for (size_t i = 0; i < s.point_x.size() && i < s.point_y.size(); ++i)
    if (usable(s.point_x[i], xa.log) && usable(s.point_y[i], ya.log))
      svg += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.2\" fill=\"none\" stroke=\"{}\" "
          "stroke-opacity=\"0.7\" class=\"seed\"/>\n",
          xa.map(s.point_x[i]), ya.map(s.point_y[i]), s.color);
  if (s.markers)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!usable(s.x[i], xa.log) || !usable(s.y[i], ya.log)) continue;
      const double px = xa.map(s.x[i]), py = ya.map(s.y[i]);
      if (i < s.crossed.size() && s.crossed[i])
        svg += fmt::format(
            "<path d=\"M{0:.1f},{1:.1f} L{2:.1f},{3:.1f} M{0:.1f},{3:.1f} L{2:.1f},{1:.1f}\" stroke=\"{4}\" "
            "stroke-width=\"2\"/>\n",
            px - 4, py - 4, px + 4, py + 4, s.color);
      else svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px, py, s.color);
    }
  return svg;
}

// Dashed reference lines and the legend right of the plot.
std::string draw_h_lines(const Chart& chart, const Axis& xa, const Axis& ya) {
  std::string svg;
  for (const Chart::HLine& line : chart.h_lines) {
    if (!usable(line.y, ya.log)) continue;
    const double py = ya.map(line.y);
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#777\" "
        "stroke-width=\"1.2\" stroke-dasharray=\"6 4\"/>\n",
        xa.px0, py, xa.px1, py);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#555\" font-size=\"10\" text-anchor=\"end\">{}</text>\n",
                       xa.px1 - 4, py - 4, xml_escape(line.label));
  }
  return svg;
}

// The triangles on the top edge for the points above y_max (Chart::mark_above).
std::string draw_above(const Chart& chart, const Axis& xa, const Axis& ya) {
  std::string svg;
  const auto triangle = [&](double x, const std::string& color, bool filled, double size) {
    if (!usable(x, xa.log)) return;
    const double px = xa.map(x), py = ya.px1 + 1;
    svg += fmt::format(
        "<path d=\"M{:.1f},{:.1f} L{:.1f},{:.1f} L{:.1f},{:.1f} Z\" fill=\"{}\" stroke=\"{}\" "
        "class=\"above\"/>\n",
        px, py, px - size, py + 1.6 * size, px + size, py + 1.6 * size, filled ? color : "white", color);
  };
  for (const Series& s : chart.series) {
    for (size_t i = 0; i < s.point_x.size() && i < s.point_y.size(); ++i)
      if (s.point_y[i] > chart.y_max) triangle(s.point_x[i], s.color, false, 3.5);
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (s.y[i] > chart.y_max) triangle(s.x[i], s.color, true, 4.5);
  }
  return svg;
}

std::string draw_legend(const Chart& chart, const Axis& xa, double top) {
  std::string svg;
  double ly = top + 8;
  for (const Series& s : chart.series) {
    if (s.label.empty()) continue;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2.5\"{4}/>\n",
        xa.px1 + 10, ly, xa.px1 + 30, s.color, s.dashed ? " stroke-dasharray=\"5 3\"" : "");
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", xa.px1 + 34, ly + 4, xml_escape(s.label));
    ly += 16;
  }
  return svg;
}

}  // namespace

std::string render_svg(const Chart& chart, int clip_number) {
  const Frame frame = frame_of(chart);
  const Axis &xa = frame.x, &ya = frame.y;
  const double left = frame.left;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      chart.width, chart.height);
  svg += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n", chart.width, chart.height);
  // A title wider than the chart (about 7.8 px a byte at 13 px bold) is squeezed to fit, not cut.
  const double room = double(chart.width) - left - 8.0;
  const std::string fit = 7.8 * double(chart.title.size()) > room
                              ? fmt::format(" textLength=\"{:.0f}\" lengthAdjust=\"spacingAndGlyphs\"", room)
                              : "";
  svg += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"13\" font-weight=\"bold\"{}>{}</text>\n", left, fit,
                     xml_escape(chart.title));
  svg += draw_axes(chart, xa, ya);
  // Clip the data to the plot area so an outlier cannot draw over the legend.
  const std::string clip_id = fmt::format("plot{}", clip_number);
  svg += fmt::format(
      "<clipPath id=\"{}\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/></clipPath>\n", clip_id,
      xa.px0, ya.px1, xa.px1 - xa.px0, ya.px0 - ya.px1);
  svg += fmt::format("<g clip-path=\"url(#{})\">\n", clip_id);
  for (const Series& s : chart.series) svg += draw_series(s, xa, ya);
  svg += draw_h_lines(chart, xa, ya);
  svg += "</g>\n";
  if (chart.mark_above && chart.y_max > 0) svg += draw_above(chart, xa, ya);
  // Legend, right of the plot.
  svg += draw_legend(chart, xa, frame.top);
  if (!chart.note.empty())
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#555\" font-size=\"10\">{}</text>\n", left,
                       chart.height - 8, xml_escape(chart.note));
  svg += "</svg>\n";
  return svg;
}

std::string render_svg(const Chart& chart) {
  static int clip_counter = 0;
  return render_svg(chart, ++clip_counter);
}

}  // namespace normlab::study
