// The learning-rate search's boundaries in the report's words (search.hpp): each variant's
// boundary from its runs, the Answer's boundary sentences and summary.json's "boundaries".
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common.hpp"
#include "normlab/study/convergence.hpp"
#include "normlab/study/search.hpp"

namespace normlab::study {

using nlohmann::json;

std::string format_rate(double lr) { return std::isfinite(lr) ? fmt::format("{:.3g}", lr) : "–"; }

std::vector<VariantBoundary> lr_boundaries(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  std::vector<VariantBoundary> out;
  if (!plan.search.enabled()) return out;
  const auto by_lr = [](const RateOutcome& a, const RateOutcome& b) { return a.lr < b.lr; };
  for (const std::string& setting : plan.settings)
    for (const std::string& variant : plan.variants) {
      VariantBoundary vb{variant, setting, {}, {}, {}, 0, {}, {}, {}};
      for (const GroupSummary& g : groups)
        if (g.variant == variant && g.setting == setting) {
          vb.tested.push_back(rate_outcome(g.lr, g.runs, LearnedRule::strict));
          vb.tested_slow_inclusive.push_back(rate_outcome(g.lr, g.runs, LearnedRule::slow_inclusive));
        }
      std::sort(vb.tested.begin(), vb.tested.end(), by_lr);
      std::sort(vb.tested_slow_inclusive.begin(), vb.tested_slow_inclusive.end(), by_lr);
      // The fit's x range reaches past the searched range when the gate extended it.
      const double from = std::min(plan.search.from, vb.tested.empty() ? plan.search.from : vb.tested.front().lr);
      const double to = std::max(plan.search.to, vb.tested.empty() ? plan.search.to : vb.tested.back().lr);
      vb.fit = fit_boundary(vb.tested, from, to);
      vb.fit_slow_inclusive = fit_boundary(vb.tested_slow_inclusive, from, to);
      for (const GroupSummary& g : groups) {
        if (g.variant != variant || g.setting != setting) continue;
        // Above the boundary (or anywhere, for a variant that never learned): how the runs that did not learn ended.
        if (vb.fit.kind == BoundaryFit::Kind::boundary ? !(g.lr > vb.fit.lr50)
                                                       : vb.fit.kind != BoundaryFit::Kind::never_learned)
          continue;
        for (const RunResult* r : g.runs) {
          const Outcome o = classify(*r);
          if (o == Outcome::unfinished || o == Outcome::not_evaluated) continue;
          vb.runs_above.push_back(r);
          if (learned_by(*r, LearnedRule::strict)) continue;
          ++vb.failures_above[outcome_name(o)];
          ++vb.failing_above;
        }
      }
      out.push_back(std::move(vb));
    }
  return out;
}

std::string format_ratio(double r) {
  if (!std::isfinite(r)) return "?";
  if (r >= 9.95) return fmt::format("{:.0f}x", r);                             // 9.95 would print as "10.0x" below
  return r >= 0.995 ? fmt::format("{:.1f}x", r) : fmt::format("{:#.2g}x", r);  // 0.996 -> "1.0x", not "1.00x"
}

namespace {

// "0.0213 [95% CI 0.0150, > 0.3]"
std::string boundary_interval(const BoundaryFit& f) {
  return fmt::format("{} [95% CI {}{}, {}{}]", format_rate(f.lr50), f.low_open ? "< " : "", format_rate(f.low),
                     f.high_open ? "> " : "", format_rate(f.high));
}

std::string ratio_text(double r) { return format_ratio(r); }

// What the slow-inclusive rule says where it differs from the strict one ("" where they agree).
std::string slow_inclusive_note(const VariantBoundary& vb) {
  const BoundaryFit& s = vb.fit_slow_inclusive;
  const BoundaryFit& f = vb.fit;
  if (s.kind == f.kind && (s.kind != BoundaryFit::Kind::boundary || format_rate(s.lr50) == format_rate(f.lr50)))
    return "";
  switch (s.kind) {
    case BoundaryFit::Kind::boundary: return "counting slow runs as learned: " + boundary_interval(s);
    case BoundaryFit::Kind::never_failed:
      return "counting slow runs as learned: most seeds learned at every rate up to " + format_rate(s.top_lr);
    case BoundaryFit::Kind::never_learned: return "counting slow runs as learned: most seeds learned at no rate";
    case BoundaryFit::Kind::not_run: break;
  }
  return "";
}

std::string variant_sentence(const VariantBoundary& vb, const LrSearchSpec& spec) {
  const BoundaryFit& f = vb.fit;
  const std::string slow = slow_inclusive_note(vb);
  const std::string beside = slow.empty() ? "" : " (" + slow + ")";
  std::vector<const RunResult*> failing;
  for (const RunResult* r : vb.runs_above)
    if (!learned_by(*r, LearnedRule::strict)) failing.push_back(r);
  switch (f.kind) {
    case BoundaryFit::Kind::not_run: return fmt::format("{}: no finished search runs yet.", vb.variant);
    case BoundaryFit::Kind::never_learned: {
      const RateOutcome& best = vb.tested[peak_index(vb.tested)];
      return fmt::format(
          "{}: most seeds reached the learned level at no rate from {} to {} (best {}/{} at lr {}){}; its "
          "runs: {}.",
          vb.variant, format_rate(vb.tested.front().lr), format_rate(f.top_lr), best.learned, best.runs,
          format_rate(best.lr), beside, describe_failures(failing, vb.runs_above.size()));
    }
    case BoundaryFit::Kind::never_failed:
      return fmt::format(
          "{}: most seeds learned at every rate from {} up to {}{}: no boundary in the searched range{}.", vb.variant,
          format_rate(f.peak_lr), format_rate(f.top_lr),
          f.top_lr >= round_rate(spec.max) ? ", the top of the search" : " (the highest rate run so far)", beside);
    case BoundaryFit::Kind::boundary: break;
  }
  std::string s = fmt::format(
      "{}: half the seeds reach the learned level at lr {} (logistic fit on {} runs at {} rates from {}, profile "
      "likelihood){}",
      vb.variant, boundary_interval(f), f.fitted_runs, f.fitted_rates, format_rate(f.peak_lr), beside);
  // How the runs above the boundary ended, named from their diagnostics (describe_failures).
  if (vb.failing_above > 0) s += fmt::format("; above it: {}", describe_failures(failing, vb.runs_above.size()));
  return s + ".";
}

// "1.3x [1.0x, 1.8x]"
std::string ratio_interval(const BoundaryRatio& r) {
  return fmt::format("{} [{}, {}]", ratio_text(r.ratio), r.low_open ? "no lower limit" : ratio_text(r.low),
                     r.high_open ? "no upper limit" : ratio_text(r.high));
}

// The ratio to no normalization by both rules, or why there is none.
std::string ratio_sentence(const StudyRow& row, const StudyRow& none, const VariantBoundary& vb,
                           const VariantBoundary& none_vb, bool gate_failed) {
  const std::string& v = row.variant;
  if (gate_failed) {
    std::string who = row.convergence.judged && !row.convergence.converged ? v : "";
    if (none.convergence.judged && !none.convergence.converged) who += (who.empty() ? "" : " and ") + none.variant;
    return fmt::format(" No ratio to {}: {} did not converge.", none.variant, who);
  }
  const BoundaryRatio& strict = row.strict_ratio;
  const BoundaryRatio& slow = row.slow_inclusive_ratio;
  if (std::isfinite(strict.ratio)) {
    std::string s = fmt::format(" {} trains at {} the learning rate of {}", v, ratio_interval(strict), none.variant);
    if (row.rules_agree) return s + fmt::format(" (counting slow runs as learned: {}).", ratio_interval(slow));
    return s + fmt::format(
                   "; counting slow runs as learned: {} — the two rules disagree, so this ratio is not settled "
                   "(slow runs below the learned level carry the difference).",
                   std::isfinite(slow.ratio) ? ratio_interval(slow) : std::string("no ratio"));
  }
  if (std::isfinite(slow.ratio))
    return fmt::format(
        " No ratio to {} at the learned level; counting slow runs as learned {} trains at {} its learning "
        "rate — the two rules disagree, so this is not settled.",
        none.variant, v, ratio_interval(slow));
  if (vb.fit.kind == BoundaryFit::Kind::never_failed && none_vb.fit.kind == BoundaryFit::Kind::boundary)
    return fmt::format(" Its boundary lies above {}, more than {} {}'s ({}).", format_rate(vb.fit.top_lr),
                       ratio_text(vb.fit.top_lr / none_vb.fit.lr50), none.variant, format_rate(none_vb.fit.lr50));
  return "";
}

}  // namespace

std::vector<std::string> boundary_sentences(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  return boundary_sentences(plan, study_table(plan, groups));
}

std::vector<std::string> boundary_sentences(const ComparePlan& plan, const StudyTable& table) {
  std::vector<std::string> out;
  if (!plan.search.enabled()) return out;
  const std::vector<VariantBoundary>& all = table.boundaries;
  const std::string& none_label = table.none_label;
  for (const std::string& setting : plan.settings) {
    const std::string prefix = plan.settings.size() > 1 && !setting.empty() ? setting + ": " : "";
    const VariantBoundary* none = nullptr;
    for (const VariantBoundary& vb : all)
      if (vb.setting == setting && vb.variant == none_label) none = &vb;
    const StudyRow* none_row = table.find(none_label, setting);
    for (const VariantBoundary& vb : all) {
      if (vb.setting != setting) continue;
      std::string s = prefix + "Learning-rate boundary, " + variant_sentence(vb, plan.search);
      const StudyRow* row = table.find(vb.variant, setting);
      if (none && none_row && row && &vb != none) {
        const auto failed = [&](const StudyRow& r) {
          return table.gated && r.convergence.judged && !r.convergence.converged;
        };
        s += ratio_sentence(*row, *none_row, vb, *none, failed(*row) || failed(*none_row));
      }
      out.push_back(s);
    }
  }
  for (const LrSearchSpec::Block& b : plan.search.blocks)
    if (!b.settled && !b.waiting_on.empty())
      out.push_back(
          fmt::format("Search not complete: {}{} has run {} round{} (round 0, refinement and extension); the "
                      "next waits for run {}.",
                      plan.settings.size() > 1 ? b.setting + ", " : "", b.variant, b.rounds_known,
                      b.rounds_known == 1 ? "" : "s", b.waiting_on));
  return out;
}

namespace {

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

const char* kind_name(BoundaryFit::Kind kind) {
  switch (kind) {
    case BoundaryFit::Kind::boundary: return "boundary";
    case BoundaryFit::Kind::never_failed: return "never failed";
    case BoundaryFit::Kind::never_learned: return "never learned";
    case BoundaryFit::Kind::not_run: break;
  }
  return "not run";
}

}  // namespace

json boundaries_json(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  json out = json::array();
  const std::vector<VariantBoundary> all = lr_boundaries(plan, groups);
  for (const VariantBoundary& vb : all) {
    const BoundaryFit& f = vb.fit;
    json entry = {{"variant", vb.variant},
                  {"setting", vb.setting},
                  {"rule", "strict"},
                  {"kind", kind_name(f.kind)},
                  {"lr50", number_or_null(f.lr50)},
                  {"low", number_or_null(f.kind == BoundaryFit::Kind::boundary ? f.low : NAN)},
                  {"high", number_or_null(f.kind == BoundaryFit::Kind::boundary ? f.high : NAN)},
                  {"low_open", f.low_open},
                  {"high_open", f.high_open},
                  {"failures_above", vb.failures_above}};
    entry["ratio_to_none"] = nullptr;
    for (const VariantBoundary& none : all)
      if (none.setting == vb.setting && &none != &vb && variant_kind(plan, none.variant) == "none")
        if (const BoundaryRatio r = boundary_ratio(f, none.fit); std::isfinite(r.ratio))
          entry["ratio_to_none"] = {{"ratio", r.ratio},
                                    {"low", r.low},
                                    {"high", r.high},
                                    {"low_open", r.low_open},
                                    {"high_open", r.high_open}};
    entry["tested"] = json::array();
    for (const RateOutcome& t : vb.tested)
      entry["tested"].push_back({{"lr", t.lr}, {"learned", t.learned}, {"runs", t.runs}});
    const BoundaryFit& s = vb.fit_slow_inclusive;
    const bool fitted = s.kind == BoundaryFit::Kind::boundary;
    json slow = {{"kind", kind_name(s.kind)},
                 {"lr50", number_or_null(s.lr50)},
                 {"low", number_or_null(fitted ? s.low : NAN)},
                 {"high", number_or_null(fitted ? s.high : NAN)},
                 {"low_open", s.low_open},
                 {"high_open", s.high_open},
                 {"tested", json::array()}};
    for (const RateOutcome& t : vb.tested_slow_inclusive)
      slow["tested"].push_back({{"lr", t.lr}, {"learned", t.learned}, {"runs", t.runs}});
    entry["slow_inclusive"] = std::move(slow);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace normlab::study
