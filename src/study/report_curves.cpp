// The report's curves over steps: held-out loss and accuracy at every evaluation (Validation), and
// the training loss and gradient norm at every step, per learning rate and setting.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "common.hpp"
#include "normlab/stats.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

using detail::format_lr;

namespace {

// Median and min-max over seeds of a per-step series, smoothed by a trailing moving average.
Series curve(const GroupSummary& g, const std::vector<double> RunResult::*field, const std::string& color,
             size_t window) {
  Series s;
  s.label = g.variant;
  s.color = color;
  size_t longest = 0;
  for (const RunResult* r : g.runs) longest = std::max(longest, (r->*field).size());
  std::vector<std::vector<double>> smoothed;
  for (const RunResult* r : g.runs) {
    const std::vector<double>& v = r->*field;
    std::vector<double> out(v.size());
    double acc = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      acc += v[i];
      if (i >= window) acc -= v[i - window];
      out[i] = acc / double(std::min(i + 1, window));
    }
    smoothed.push_back(out);
  }
  for (size_t i = 0; i < longest; ++i) {
    std::vector<double> at;
    double step = double(i + 1);
    for (size_t k = 0; k < g.runs.size(); ++k)
      if (i < smoothed[k].size()) {
        at.push_back(smoothed[k][i]);
        step = g.runs[k]->steps[i];
      }
    at.erase(std::remove_if(at.begin(), at.end(), [](double x) { return !std::isfinite(x); }), at.end());
    if (at.empty()) continue;
    s.x.push_back(step);
    s.y.push_back(median(at));
    s.y_low.push_back(*std::min_element(at.begin(), at.end()));
    s.y_high.push_back(*std::max_element(at.begin(), at.end()));
  }
  return s;
}

// Median and min-max over seeds of one length group's held-out loss or accuracy at each evaluation.
Series eval_curve(const GroupSummary& g, HeldOut EvalPoint::*group, double HeldOut::*field, const std::string& label,
                  const std::string& color, bool dashed) {
  Series s;
  s.label = label;
  s.color = color;
  s.dashed = dashed;
  std::map<int64_t, std::vector<double>> at_step;
  for (const RunResult* r : g.runs)
    for (const EvalPoint& e : r->evals)
      if (const double v = e.*group.*field; std::isfinite(v)) at_step[e.step].push_back(v);
  for (const auto& [step, values] : at_step) {
    s.x.push_back(double(step));
    s.y.push_back(median(values));
    s.y_low.push_back(*std::min_element(values.begin(), values.end()));
    s.y_high.push_back(*std::max_element(values.begin(), values.end()));
  }
  return s;
}

}  // namespace

Section validation_section(const Context& c) {
  Section sec;
  sec.title = "Validation curves: held-out loss and accuracy, trained (solid) and unseen (dashed) lengths";
  sec.text =
      "Every evaluation of every run, in eval mode: median over seeds with a min–max band. Trained lengths "
      "are those of the training data; unseen lengths are longer than any training sequence.";
  if (std::any_of(c.results.begin(), c.results.end(), [](const RunResult& r) { return r.single_length; }))
    sec.text +=
        " Runs of a single-length regime trained on one length only: their shorter lengths count as unseen too.";
  const bool any_unseen = std::any_of(c.results.begin(), c.results.end(), [](const RunResult& r) {
    return std::any_of(r.evals.begin(), r.evals.end(), [](const EvalPoint& e) { return e.unseen.targets > 0; });
  });
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.plan.lrs)
      for (const bool accuracy : {false, true}) {
        Chart chart;
        chart.title = std::string(accuracy ? "held-out accuracy" : "held-out loss") + " — " + where(lr, setting);
        chart.x_label = "step";
        chart.y_label = accuracy ? "accuracy" : "loss (log)";
        chart.log_y = !accuracy;
        if (accuracy) {
          chart.y_max = 1.0;
          chart.h_lines.push_back({kSolvedAccuracy, "solved"});
        } else {
          c.add_chance_line(chart);
        }
        double HeldOut::*field = accuracy ? &HeldOut::accuracy : &HeldOut::loss;
        std::string off_top;
        for (const std::string& variant : c.plan.variants)
          if (const GroupSummary* g = c.group(variant, lr, setting)) {
            const Series trained = eval_curve(*g, &EvalPoint::trained, field, variant, c.colors.at(variant), false);
            const double peak = trained.y.empty() ? 0 : *std::max_element(trained.y.begin(), trained.y.end());
            if (!accuracy && c.loss_cap() > 0 && peak > c.loss_cap())
              off_top += fmt::format("{}{} (median up to {:.2g})", off_top.empty() ? "" : ", ", variant, peak);
            chart.series.push_back(trained);
            if (any_unseen)
              chart.series.push_back(eval_curve(*g, &EvalPoint::unseen, field, "", c.colors.at(variant), true));
          }
        if (!off_top.empty()) {
          chart.y_max = c.loss_cap();
          chart.note = "leaves the chart at the top: " + off_top;
        } else {
          chart.note = fmt::format("median and min–max over {} seeds{}", c.fewest_seeds,
                                   any_unseen ? "; solid: trained lengths, dashed: unseen lengths" : "");
        }
        sec.charts.push_back(
            {fmt::format("valid-{}-lr{}{}", accuracy ? "accuracy" : "loss", format_lr(lr), c.setting_slug(setting)),
             c.draw(chart)});
      }
  return sec;
}

Section curves_section(const Context& c, const std::vector<double> RunResult::*field, const std::string& name,
                       const std::string& y_label, bool chance_line, const std::string& slug) {
  Section sec;
  sec.title = name + " curves";
  sec.text = fmt::format(
      "Training mode, every step: median over seeds with a min–max band, moving average over {} "
      "steps. A curve that stops early belongs to a run that diverged.{}",
      c.window, chance_line && std::isfinite(c.chance) ? " The dashed grey line is the uniform guess's loss." : "");
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.plan.lrs) {
      Chart chart;
      chart.title = where(lr, setting);
      chart.x_label = "step";
      chart.y_label = y_label;
      chart.log_y = true;
      if (chance_line) c.add_chance_line(chart);
      std::string off_top;
      for (const std::string& variant : c.plan.variants)
        if (const GroupSummary* g = c.group(variant, lr, setting)) {
          chart.series.push_back(curve(*g, field, c.colors.at(variant), c.window));
          const Series& s = chart.series.back();
          const double peak = s.y.empty() ? 0 : *std::max_element(s.y.begin(), s.y.end());
          if (chance_line && c.loss_cap() > 0 && peak > c.loss_cap())
            off_top += fmt::format("{}{} (median up to {:.2g})", off_top.empty() ? "" : ", ", variant, peak);
        }
      if (!off_top.empty()) {
        chart.y_max = c.loss_cap();
        chart.note = "leaves the chart at the top: " + off_top;
      }
      sec.charts.push_back({fmt::format("{}-lr{}{}", slug, format_lr(lr), c.setting_slug(setting)), c.draw(chart)});
    }
  return sec;
}

}  // namespace normlab::study::report_parts
