// The first screen's numbers (report_parts.hpp): the study's table (convergence.hpp) and the two
// questions the first screen asks of it, so that the verdict and the compact table say what the
// Answer's convergence, boundary and sensitivity sentences say.
#include <cmath>

#include "report_parts.hpp"

namespace normlab::study::report_parts {

bool FirstScreenNumbers::not_converged(const StudyRow& row) const {
  return table.gated && row.convergence.judged && !row.convergence.converged;
}

BoundaryRatio FirstScreenNumbers::ratio_to_none(const StudyRow& row) const {
  const StudyRow* none = table.find(table.none_label, row.setting);
  if (!none || &row == none || not_converged(row) || not_converged(*none)) return {};
  return row.strict_ratio;
}

FirstScreenNumbers first_screen_numbers(const Context& c) { return {study_table(c.plan, c.groups)}; }

nlohmann::json first_screen_json(const FirstScreenNumbers& numbers) {
  const auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  const auto interval = [&](const Interval& i) {
    return nlohmann::json{{"mean", i.n > 0 ? num(i.mean) : nullptr},
                          {"low", i.has_interval() ? num(i.low) : nullptr},
                          {"high", i.has_interval() ? num(i.high) : nullptr},
                          {"n", i.n}};
  };
  nlohmann::json cells = nlohmann::json::array();
  for (const StudyRow& r : numbers.table.rows) {
    const ConvergenceCheck& g = r.convergence;
    const BoundaryRatio ratio = numbers.ratio_to_none(r);
    cells.push_back(
        {{"variant", r.variant},
         {"setting", r.setting},
         {"best_lr", num(r.curve.best_lr())},
         {"best_loss", r.curve.empty() ? interval(Interval{NAN, NAN, NAN, 0}) : interval(r.curve.mean[r.curve.best])},
         {"edge", g.edge == ConvergenceCheck::Edge::interior ? "interior"
                  : g.edge == ConvergenceCheck::Edge::low    ? "low"
                  : g.edge == ConvergenceCheck::Edge::high   ? "high"
                                                             : "too few rates"},
         {"converged", g.converged},
         {"judged", g.judged},
         {"runs", g.runs},
         {"improving", g.improving},
         {"lr_sensitivity", interval(r.sensitivity.interval)},
         {"lr_sensitivity_range", {num(r.sensitivity.from), num(r.sensitivity.to)}},
         {"boundary_ratio_to_none",
          std::isfinite(ratio.ratio) ? nlohmann::json{{"ratio", ratio.ratio}, {"low", ratio.low}, {"high", ratio.high}}
                                     : nlohmann::json(nullptr)},
         {"rules_agree", r.rules_agree}});
  }
  return cells;
}

}  // namespace normlab::study::report_parts
