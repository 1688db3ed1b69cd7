// The convergence gate and the first screen's table (convergence.hpp; definitions in
// docs/compare.md, "The convergence gate").
#include "normlab/study/convergence.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common.hpp"

namespace normlab::study {

using nlohmann::json;

bool still_improving(const RunResult& run) {
  if (run.diverged || run.evals.size() < kPlateauEvaluations) return false;
  const double first = run.evals[run.evals.size() - kPlateauEvaluations].trained.loss;
  const double last = run.evals.back().trained.loss;
  return std::isfinite(first) && std::isfinite(last) && last <= (1 - kPlateauDrop) * first;
}

bool plateaued(const RunResult& run) {
  if (run.diverged || run.evals.size() < kPlateauEvaluations) return false;
  const double first = run.evals[run.evals.size() - kPlateauEvaluations].trained.loss;
  const double last = run.evals.back().trained.loss;
  return std::isfinite(first) && std::isfinite(last) && !still_improving(run);
}

ConvergenceCheck check_convergence(const LossCurve& curve, const std::vector<const RunResult*>& runs) {
  ConvergenceCheck c;
  c.variant = curve.variant, c.setting = curve.setting;
  if (curve.empty()) return c;
  c.best_lr = curve.best_lr();
  c.lowest_lr = curve.lrs.front(), c.highest_lr = curve.lrs.back();
  c.edge = curve.lrs.size() < 3                 ? ConvergenceCheck::Edge::too_few_rates
           : curve.best == 0                    ? ConvergenceCheck::Edge::low
           : curve.best + 1 == curve.lrs.size() ? ConvergenceCheck::Edge::high
                                                : ConvergenceCheck::Edge::interior;
  for (const RunResult* r : runs) {
    if (r->spec.lr() != c.best_lr) continue;
    const Outcome o = classify(*r);
    if (o == Outcome::unfinished || o == Outcome::not_evaluated) continue;
    ++c.runs;
    if (!r->evals.empty()) c.last_step = std::max(c.last_step, r->evals.back().step);
    if (o == Outcome::solved) ++c.solved, c.judged = true;
    else if (plateaued(*r)) ++c.plateaued;
    else if (still_improving(*r)) ++c.improving;
    if (r->evals.size() >= kPlateauEvaluations) c.judged = true;
  }
  c.converged = c.judged && 2 * (c.solved + c.plateaued) > c.runs;
  return c;
}

std::vector<const StudyRow*> StudyTable::not_converged() const {
  std::vector<const StudyRow*> out;
  if (gated)
    for (const StudyRow& r : rows)
      if (r.convergence.judged && !r.convergence.converged) out.push_back(&r);
  return out;
}

std::vector<const StudyRow*> StudyTable::not_judged() const {
  std::vector<const StudyRow*> out;
  if (gated)
    for (const StudyRow& r : rows)
      if (!r.curve.empty() && !r.convergence.judged && r.convergence.runs > 0) out.push_back(&r);
  return out;
}

std::vector<const StudyRow*> StudyTable::not_bracketed() const {
  std::vector<const StudyRow*> out;
  if (gated)
    for (const StudyRow& r : rows)
      if (r.convergence.edge == ConvergenceCheck::Edge::low || r.convergence.edge == ConvergenceCheck::Edge::high)
        out.push_back(&r);
  return out;
}

const StudyRow* StudyTable::find(const std::string& variant, const std::string& setting) const {
  for (const StudyRow& r : rows)
    if (r.variant == variant && r.setting == setting) return &r;
  return nullptr;
}

namespace {

// Both ratios exist, lie within kRulesAgreeFactor of each other, and say the same about 1.
bool ratios_agree(const BoundaryRatio& a, const BoundaryRatio& b) {
  if (!std::isfinite(a.ratio) || !std::isfinite(b.ratio)) return false;
  const auto side = [](const BoundaryRatio& r) {
    return !r.low_open && r.low > 1 ? 1 : !r.high_open && r.high < 1 ? -1 : 0;
  };
  return std::abs(std::log(a.ratio / b.ratio)) < std::log(kRulesAgreeFactor) && side(a) == side(b);
}

}  // namespace

StudyTable study_table(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  StudyTable table;
  table.gated = plan.search.enabled() || plan.lrs.size() >= 3;
  for (const std::string& label : plan.variants)
    if (variant_kind(plan, label) == "none" && table.none_label.empty()) table.none_label = label;
  table.boundaries = lr_boundaries(plan, groups);
  const std::vector<VariantBoundary>& boundaries = table.boundaries;
  for (const std::string& setting : plan.settings) {
    const size_t first = table.rows.size();
    std::vector<LossCurve> curves;
    for (const std::string& variant : plan.variants) {
      std::vector<const RunResult*> runs;
      for (const GroupSummary& g : groups)
        if (g.variant == variant && g.setting == setting) runs.insert(runs.end(), g.runs.begin(), g.runs.end());
      StudyRow row;
      row.variant = variant, row.setting = setting;
      row.curve = loss_curve(variant, setting, runs);
      row.convergence = check_convergence(row.curve, runs);
      const ConvergenceCheck::Edge edge = row.convergence.edge;
      if (edge == ConvergenceCheck::Edge::low || edge == ConvergenceCheck::Edge::high)
        row.convergence.at_limit =
            !plan.search.enabled() || extension_rates(row.curve.lrs, row.curve.best_lr(), plan.search).empty();
      for (const VariantBoundary& vb : boundaries)
        if (vb.variant == variant && vb.setting == setting) {
          row.strict = vb.fit, row.slow_inclusive = vb.fit_slow_inclusive;
          row.runs_above = int(vb.runs_above.size()), row.failing_above = vb.failing_above;
          row.failures_above = vb.failures_above;
          std::vector<const RunResult*> failing;
          for (const RunResult* r : vb.runs_above)
            if (!learned_by(*r, LearnedRule::strict) && classify(*r) != Outcome::not_evaluated) failing.push_back(r);
          row.failures_text = describe_failures(failing, vb.runs_above.size());
          std::vector<std::pair<int, std::string>> counts;  // largest first
          for (const auto& [word, n] : vb.failures_above) counts.emplace_back(-n, word);
          std::sort(counts.begin(), counts.end());
          for (const auto& [n, word] : counts)
            row.failures_short += fmt::format("{}{} {}", row.failures_short.empty() ? "" : ", ", -n, word);
          if (!counts.empty())
            row.failures_short =
                fmt::format("{} of {}: {}", vb.failing_above, vb.runs_above.size(), row.failures_short);
        }
      if (!row.curve.empty()) curves.push_back(row.curve);
      table.rows.push_back(std::move(row));
    }
    const auto [from, to] = common_range(curves);
    for (size_t i = first; i < table.rows.size(); ++i)
      table.rows[i].sensitivity = lr_sensitivity(table.rows[i].curve, from, to);
    const StudyRow* none = table.find(table.none_label, setting);
    const std::string against = none ? table.none_label : reference_variant(plan);
    const StudyRow* base = table.find(against, setting);
    for (size_t i = first; i < table.rows.size(); ++i) {
      StudyRow& row = table.rows[i];
      if (none && &row != none) {
        row.strict_ratio = boundary_ratio(row.strict, none->strict);
        row.slow_inclusive_ratio = boundary_ratio(row.slow_inclusive, none->slow_inclusive);
        row.rules_agree = ratios_agree(row.strict_ratio, row.slow_inclusive_ratio);
      }
      if (base && &row != base && row.sensitivity.interval.n > 0 && base->sensitivity.interval.n > 0)
        table.differences.push_back(sensitivity_difference(row.sensitivity, base->sensitivity));
    }
  }
  return table;
}

namespace {

std::string in_setting(const ComparePlan& plan, const std::string& setting) {
  return plan.settings.size() > 1 && !setting.empty() ? " (" + setting + ")" : "";
}

std::string join_parts(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// "0.120 [0.080, 0.160]" or "0.120 (1 seed)".
std::string value_interval(const Interval& v) {
  if (v.n == 0 || !std::isfinite(v.mean)) return "–";
  if (!v.has_interval()) return fmt::format("{:.3f} (1 seed)", v.mean);
  return fmt::format("{:.3f} [{:.3f}, {:.3f}]", v.mean, v.low, v.high);
}

}  // namespace

std::vector<std::string> gate_sentences(const ComparePlan& plan, const StudyTable& table) {
  std::vector<std::string> out;
  const char* what = plan.search.enabled() ? "the boundaries below describe" : "the comparisons below describe";
  std::vector<std::string> parts;
  for (const StudyRow* r : table.not_converged()) {
    const ConvergenceCheck& c = r->convergence;
    const std::string counts = fmt::format("{} of {} seeds solved or plateaued", c.solved + c.plateaued, c.runs);
    parts.push_back(c.improving > 0
                        ? fmt::format("{}'s best runs at {}{} are still improving at step {} ({} of {} seeds; {})",
                                      r->variant, detail::format_lr(c.best_lr), in_setting(plan, r->setting),
                                      c.last_step, c.improving, c.runs, counts)
                        : fmt::format("{}'s best runs at {}{} neither solved nor plateaued by step {} ({})", r->variant,
                                      detail::format_lr(c.best_lr), in_setting(plan, r->setting), c.last_step, counts));
  }
  if (!parts.empty())
    out.push_back(
        fmt::format("not converged: {} — {} an unfinished race, not stability.", join_parts(parts, "; "), what));
  parts.clear();
  for (const StudyRow* r : table.not_bracketed()) {
    const ConvergenceCheck& c = r->convergence;
    const bool low = c.edge == ConvergenceCheck::Edge::low;
    parts.push_back(fmt::format("{}'s lowest final held-out loss is at {}, the {} rate probed{}", r->variant,
                                detail::format_lr(c.best_lr), low ? "lowest" : "highest",
                                in_setting(plan, r->setting)));
  }
  if (!parts.empty())
    out.push_back(fmt::format("not bracketed: {} — the best rate may lie outside the range; {}.",
                              join_parts(parts, "; "),
                              plan.search.enabled() ? "search.lr.min / search.lr.max let the search extend it"
                                                    : "widen grid.lr"));
  parts.clear();
  for (const StudyRow* r : table.not_judged()) parts.push_back(r->variant + in_setting(plan, r->setting));
  if (!parts.empty())
    out.push_back(
        fmt::format("Convergence not judged for {}: at the best rate no run solved and none has {} held-out "
                    "evaluations to show a plateau (train.eval_every).",
                    join_parts(parts, ", "), kPlateauEvaluations));
  return out;
}

std::vector<std::string> sensitivity_sentences(const ComparePlan& plan, const StudyTable& table) {
  std::vector<std::string> out;
  for (const std::string& setting : plan.settings) {
    std::vector<std::string> parts;
    double from = NAN, to = NAN;
    for (const StudyRow& r : table.rows)
      if (r.setting == setting && r.sensitivity.interval.n > 0) {
        from = r.sensitivity.from, to = r.sensitivity.to;
        parts.push_back(fmt::format("{} {} ({} seeds)", r.variant, value_interval(r.sensitivity.interval),
                                    r.sensitivity.interval.n));
      }
    if (parts.empty()) continue;
    std::vector<std::string> diffs;
    for (const SensitivityDifference& d : table.differences)
      if (d.setting == setting && d.difference.n > 0) {
        const Interval& v = d.difference;
        const bool lower = v.mean < 0;
        const std::string& named = lower ? d.variant : d.reference;
        const std::string& other = lower ? d.reference : d.variant;
        const double lo = lower ? v.low : -v.high, hi = lower ? v.high : -v.low;
        diffs.push_back(
            v.has_interval()
                ? fmt::format("{} lower than {} by {:.3f} nats [{:+.3f}, {:+.3f}], {} pairs{}", named, other,
                              std::abs(v.mean), lo, hi, v.n, v.contains_zero() ? " (the interval holds 0)" : "")
                : fmt::format("{} lower than {} by {:.3f} nats, {} pair", named, other, std::abs(v.mean), v.n));
      }
    out.push_back(fmt::format(
        "LR sensitivity{} over {}–{} (mean of min(final held-out loss, ln K) minus its lowest value across the range, "
        "linear in log lr between probed rates, diverged = ln K; nats, mean over seeds [95% t interval]): {}{}.",
        plan.settings.size() > 1 ? ", " + setting : "", detail::format_lr(from), detail::format_lr(to),
        join_parts(parts, "; "), diffs.empty() ? "" : "; paired by seed: " + join_parts(diffs, "; ")));
  }
  return out;
}

namespace {

json json_number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json interval_json(const Interval& v) {
  return {{"mean", json_number(v.mean)},
          {"low", json_number(v.has_interval() ? v.low : NAN)},
          {"high", json_number(v.has_interval() ? v.high : NAN)},
          {"n", v.n}};
}

json fit_json(const BoundaryFit& f, const BoundaryRatio& r) {
  const bool fitted = f.kind == BoundaryFit::Kind::boundary;
  json out = {{"kind", f.kind == BoundaryFit::Kind::boundary        ? "boundary"
                       : f.kind == BoundaryFit::Kind::never_failed  ? "never failed"
                       : f.kind == BoundaryFit::Kind::never_learned ? "never learned"
                                                                    : "not run"},
              {"lr50", json_number(f.lr50)},
              {"low", json_number(fitted ? f.low : NAN)},
              {"high", json_number(fitted ? f.high : NAN)},
              {"low_open", f.low_open},
              {"high_open", f.high_open}};
  out["ratio_to_none"] = std::isfinite(r.ratio) ? json{{"ratio", r.ratio},
                                                       {"low", r.low},
                                                       {"high", r.high},
                                                       {"low_open", r.low_open},
                                                       {"high_open", r.high_open}}
                                                : json(nullptr);
  return out;
}

}  // namespace

json study_json(const StudyTable& table) {
  json rows = json::array();
  for (const StudyRow& r : table.rows) {
    json loss = json::array(), mean = json::array();
    for (size_t i = 0; i < r.curve.lrs.size(); ++i) {
      json seeds = json::array();
      for (double v : r.curve.loss[i]) seeds.push_back(json_number(v));
      loss.push_back(seeds);
      mean.push_back(interval_json(r.curve.mean[i]));
    }
    const ConvergenceCheck& c = r.convergence;
    const char* edge = c.edge == ConvergenceCheck::Edge::interior ? "interior"
                       : c.edge == ConvergenceCheck::Edge::low    ? "low"
                       : c.edge == ConvergenceCheck::Edge::high   ? "high"
                                                                  : "too few rates";
    rows.push_back({{"variant", r.variant},
                    {"setting", r.setting},
                    {"curve",
                     {{"lrs", r.curve.lrs},
                      {"seeds", r.curve.seeds},
                      {"loss", loss},
                      {"mean", mean},
                      {"cap", json_number(r.curve.cap)},
                      {"best_lr", json_number(r.curve.best_lr())},
                      {"best_loss", json_number(r.curve.best_loss())}}},
                    {"sensitivity",
                     {{"from", json_number(r.sensitivity.from)},
                      {"to", json_number(r.sensitivity.to)},
                      {"seeds", r.sensitivity.seeds},
                      {"per_seed", r.sensitivity.per_seed},
                      {"interval", interval_json(r.sensitivity.interval)}}},
                    {"convergence",
                     {{"best_lr", json_number(c.best_lr)},
                      {"edge", edge},
                      {"at_limit", c.at_limit},
                      {"runs", c.runs},
                      {"solved", c.solved},
                      {"plateaued", c.plateaued},
                      {"improving", c.improving},
                      {"last_step", c.last_step},
                      {"judged", c.judged},
                      {"converged", c.converged}}},
                    {"strict", fit_json(r.strict, r.strict_ratio)},
                    {"slow_inclusive", fit_json(r.slow_inclusive, r.slow_inclusive_ratio)},
                    {"rules_agree", r.rules_agree},
                    {"runs_above", r.runs_above},
                    {"failing_above", r.failing_above},
                    {"failures_above", r.failures_above},
                    {"failures", r.failures_short}});
  }
  json diffs = json::array();
  for (const SensitivityDifference& d : table.differences)
    diffs.push_back({{"variant", d.variant},
                     {"reference", d.reference},
                     {"setting", d.setting},
                     {"difference", interval_json(d.difference)}});
  return {{"rows", rows}, {"sensitivity_differences", diffs}, {"gated", table.gated}};
}

}  // namespace normlab::study
