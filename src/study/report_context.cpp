// The report's shared context (report_parts.hpp): the runs summarized per cell, the chance levels,
// one colour per series, and the number and table formatting every section uses.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "common.hpp"
#include "normlab/study/findings.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

using detail::format_lr;

const GroupSummary* Context::group(const std::string& variant, double lr, const std::string& setting) const {
  for (const GroupSummary& g : groups)
    if (g.variant == variant && g.lr == lr && g.setting == setting) return &g;
  return nullptr;
}

std::string Context::draw(const Chart& chart) const {
  if (stop_requested && stop_requested()) throw ReportStopped{};
  return render_svg(chart, ++charts_drawn);
}

std::string Context::setting_slug(const std::string& setting) const {
  if (plan.settings.size() <= 1 || setting.empty()) return "";
  std::string slug = "-";
  for (char ch : setting) {
    const bool keep = std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '=';
    if (keep) slug += ch;
    else if (slug.back() != '-') slug += '-';
  }
  while (slug.size() > 1 && slug.back() == '-') slug.pop_back();
  return slug;
}

std::vector<double> Context::detail_lrs(const std::string& setting) const {
  if (plan.lrs.size() * plan.settings.size() <= 6) return plan.lrs;
  return {most_different_lr(plan, groups, setting)};
}

double Context::loss_cap() const { return std::isfinite(chance) ? 10 * chance : 0; }

void Context::add_chance_line(Chart& chart) const {
  if (std::isfinite(chance)) chart.h_lines.push_back({chance, fmt::format("chance {:.3f}", chance)});
}

namespace {

// One fixed colour per variant in every report: a known variant name (or a label whose runs are all
// one known variant) gets the variant's colour; other labels share a palette in order.
std::map<std::string, std::string> series_colors(const ComparePlan& plan) {
  std::map<std::string, std::string> colors;
  std::set<std::string> used;
  for (const std::string& label : plan.variants) {
    std::string kind = find_variant(label) ? label : "";
    if (kind.empty()) {
      std::set<std::string> kinds;
      for (const RunSpec& r : plan.runs)
        if (r.variant == label) kinds.insert(variant_of(r.config.model));
      if (kinds.size() == 1) kind = *kinds.begin();
    }
    const Variant* v = kind.empty() ? nullptr : find_variant(kind);
    if (v && !used.count(v->color)) {
      colors[label] = v->color;
      used.insert(v->color);
    }
  }
  size_t next = 0;
  for (const std::string& label : plan.variants) {
    if (colors.count(label)) continue;
    while (used.count(palette(next))) ++next;
    colors[label] = palette(next);
    used.insert(palette(next));
  }
  return colors;
}

}  // namespace

Context make_context(const ComparePlan& plan, const std::vector<RunResult>& results, const train::RunConfig& base,
                     const std::function<bool()>& stop_requested) {
  Context c{plan,
            results,
            summarize(results),
            chance_loss(plan.base),
            0,
            0,
            false,
            size_t(std::max<int64_t>(1, base.train.steps / 40)),
            series_colors(plan),
            stop_requested};
  for (const RunResult& r : results) {
    if (std::isfinite(r.baseline.uniform_loss) && !std::isfinite(c.chance)) c.chance = r.baseline.uniform_loss;
    c.chance_accuracy = std::max(c.chance_accuracy, r.baseline.chance_accuracy());
  }
  c.has_batchnorm = std::any_of(results.begin(), results.end(),
                                [](const RunResult& r) { return r.spec.config.model.norm.name() == "batchnorm"; });
  for (size_t i = 0; i < c.groups.size(); ++i)
    c.fewest_seeds = i == 0 ? c.groups[i].runs.size() : std::min(c.fewest_seeds, c.groups[i].runs.size());
  return c;
}

std::string fmt_num(double v, const char* spec) {
  if (!std::isfinite(v)) return "–";
  if (std::abs(v) >= 1e4) return fmt::format("{:.2g}", v);
  return fmt::format(fmt::runtime(spec), v);
}

std::string html_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table><tr>";
  for (const std::string& h : header) out += "<th>" + xml_escape(h) + "</th>";
  out += "</tr>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const std::string& c : row) out += "<td>" + xml_escape(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "|";
  for (const std::string& h : header) out += " " + h + " |";
  out += "\n|";
  for (size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& row : rows) {
    out += "|";
    for (const std::string& c : row) out += " " + c + " |";
    out += "\n";
  }
  return out;
}

// "lr 0.01, 4 layers, no warmup": a chart's learning rate and setting.
std::string where(double lr, const std::string& setting) {
  return "lr " + format_lr(lr) + (setting.empty() ? "" : ", " + setting);
}

std::string fmt_interval(const Interval& i, double lowest, double highest) {
  if (!std::isfinite(i.mean)) return "–";
  if (!i.has_interval()) return fmt_num(i.mean);
  return fmt::format("{} [{}, {}]", fmt_num(i.mean), fmt_num(std::max(lowest, i.low)),
                     fmt_num(std::min(highest, i.high)));
}

}  // namespace normlab::study::report_parts
