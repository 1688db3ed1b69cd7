// The learning-rate search: its config, the rates of each round, the logistic fit of P(learned)
// against ln lr with its profile-likelihood interval, and the Answer's boundary sentences. The
// method and why is at the top of include/normlab/study/search.hpp.
#include "normlab/study/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "common.hpp"
#include "normlab/study/convergence.hpp"

namespace normlab::study {

using detail::fail;
using nlohmann::json;

namespace {

constexpr double kChi2Level95 = 3.841458820694124;  // chi2 with 1 degree of freedom, 0.95 quantile
constexpr double kThetaStep = 0.01;                 // the profile's grid in ln lr: 1% steps in lr
constexpr double kThetaMargin = 0.5;                // the grid reaches this far (ln) past the searched range

int read_int(const json& lr, const char* key, int fallback, int lo, int hi, const std::string& path) {
  if (!lr.contains(key)) return fallback;
  const json& v = lr.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    fail(path, std::string("search.lr.") + key,
         fmt::format("must be an integer in [{}, {}], got {}", lo, hi, v.dump()));
  return int(v.get<int64_t>());
}

double read_rate(const json& lr, const char* key, const std::string& path) {
  if (!lr.contains(key)) fail(path, std::string("search.lr.") + key, "missing (a learning rate in (0, 10])");
  const json& v = lr.at(key);
  if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 10)
    fail(path, std::string("search.lr.") + key, fmt::format("must be a number in (0, 10], got {}", v.dump()));
  return v.get<double>();
}

}  // namespace

LrSearchSpec parse_lr_search(const json& search, const std::string& path) {
  if (!search.is_object()) fail(path, "search", "must be an object: {\"lr\": {\"from\": ..., \"to\": ...}}");
  for (const auto& [key, value] : search.items())
    if (key != "lr") fail(path, "search." + key, "unknown key (the search has one axis: lr)");
  if (!search.contains("lr")) fail(path, "search.lr", "missing: {\"from\": ..., \"to\": ...}");
  const json& lr = search.at("lr");
  if (!lr.is_object()) fail(path, "search.lr", "must be an object with from, to (and points, rounds, max_new)");
  for (const auto& [key, value] : lr.items())
    if (key != "from" && key != "to" && key != "points" && key != "rounds" && key != "max_new" && key != "min" &&
        key != "max")
      fail(path, "search.lr." + key, "unknown key (expected from, to, points, rounds, max_new, min, max)");
  LrSearchSpec spec;
  spec.from = read_rate(lr, "from", path);
  spec.to = read_rate(lr, "to", path);
  if (!(round_rate(spec.from) < round_rate(spec.to)))
    fail(path, "search.lr.to",
         fmt::format("must be above from ({:g}) at 3 significant digits, got {:g}", spec.from, spec.to));
  spec.points = read_int(lr, "points", 5, 2, 16, path);
  spec.rounds = read_int(lr, "rounds", 2, 0, 8, path);
  spec.max_new = read_int(lr, "max_new", spec.points, 1, 16, path);
  // The convergence gate's room to extend the range: default none (min = from, max = to).
  spec.min = lr.contains("min") ? read_rate(lr, "min", path) : spec.from;
  spec.max = lr.contains("max") ? read_rate(lr, "max", path) : spec.to;
  if (spec.min > spec.from)
    fail(path, "search.lr.min", fmt::format("must be at most from ({:g}), got {:g}", spec.from, spec.min));
  if (spec.max < spec.to)
    fail(path, "search.lr.max", fmt::format("must be at least to ({:g}), got {:g}", spec.to, spec.max));
  return spec;
}

double round_rate(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) return lr;
  return std::stod(fmt::format("{:.3g}", lr));
}

std::vector<double> initial_rates(const LrSearchSpec& spec) {
  std::vector<double> rates;
  const double lo = std::log(spec.from), hi = std::log(spec.to);
  for (int i = 0; i < spec.points; ++i) {
    const double rate = round_rate(std::exp(lo + (hi - lo) * i / (spec.points - 1)));
    if (rates.empty() || rate > rates.back()) rates.push_back(rate);
  }
  return rates;
}

bool learned_by(const RunResult& run, LearnedRule rule) {
  const Outcome o = classify(run);
  if (rule == LearnedRule::slow_inclusive) return has_learned(o);
  return o == Outcome::solved || o == Outcome::learned || (o == Outcome::slow && at_learned_level(run));
}

RateOutcome rate_outcome(double lr, const std::vector<const RunResult*>& runs, LearnedRule rule) {
  RateOutcome out;
  out.lr = lr;
  for (const RunResult* r : runs) {
    const Outcome o = classify(*r);
    if (o == Outcome::unfinished || o == Outcome::not_evaluated) continue;
    ++out.runs;
    if (learned_by(*r, rule)) ++out.learned;
  }
  return out;
}

std::vector<double> extension_rates(const std::vector<double>& tested, double best_lr, const LrSearchSpec& spec) {
  if (tested.size() < 2 || !std::isfinite(best_lr) || spec.points < 2) return {};
  // One round-0 step: the ratio between neighbouring rates of round 0.
  const double step = std::pow(spec.to / spec.from, 1.0 / double(spec.points - 1));
  std::vector<double> out;
  if (best_lr == tested.front()) {
    const double lower = round_rate(std::max(tested.front() / step, spec.min));
    if (lower < tested.front() && lower >= round_rate(spec.min)) out.push_back(lower);
  }
  if (best_lr == tested.back()) {
    const double upper = round_rate(std::min(tested.back() * step, spec.max));
    if (upper > tested.back() && upper <= round_rate(spec.max)) out.push_back(upper);
  }
  return out;
}

size_t peak_index(const std::vector<RateOutcome>& tested) {
  size_t best = 0;
  for (size_t i = 1; i < tested.size(); ++i)
    if (tested[i].fraction() > tested[best].fraction()) best = i;
  return best;
}

namespace {

bool mostly_learned(const RateOutcome& r) { return 2 * r.learned > r.runs; }

}  // namespace

std::vector<double> refine_rates(const std::vector<RateOutcome>& tested, int max_new) {
  if (tested.size() < 2) return {};
  const size_t peak = peak_index(tested);
  if (!mostly_learned(tested[peak])) return {};  // never learned: no upper boundary to find
  // (|fraction difference|, pair index, midpoint) of each pair worth a point.
  std::vector<std::tuple<double, size_t, double>> pairs;
  for (size_t i = peak; i + 1 < tested.size(); ++i) {
    const double diff = std::abs(tested[i].fraction() - tested[i + 1].fraction());
    if (tested[i].learned * tested[i + 1].runs == tested[i + 1].learned * tested[i].runs) continue;
    const double mid = round_rate(std::sqrt(tested[i].lr * tested[i + 1].lr));
    if (mid > tested[i].lr && mid < tested[i + 1].lr) pairs.emplace_back(diff, i, mid);
  }
  std::stable_sort(pairs.begin(), pairs.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  if (pairs.size() > size_t(std::max(0, max_new))) pairs.resize(size_t(std::max(0, max_new)));
  std::vector<double> rates;
  for (const auto& p : pairs) rates.push_back(std::get<2>(p));
  std::sort(rates.begin(), rates.end());
  return rates;
}

namespace {

double log_sigmoid(double z) { return z < 0 ? z - std::log1p(std::exp(z)) : -std::log1p(std::exp(-z)); }
double sigmoid(double z) { return z < 0 ? std::exp(z) / (1 + std::exp(z)) : 1 / (1 + std::exp(-z)); }

// The rates a fit uses: ln lr (centered), learned, runs.
struct FitData {
  std::vector<double> x;
  std::vector<int> learned, runs;
  double center = 0;  // the mean of ln lr: the determinant below is computed on centered x
};

// Firth's penalized log-likelihood of P(learned) = sigmoid(-s (x - theta)): the binomial
// log-likelihood plus half the log-determinant of the Fisher information of (intercept, slope).
double penalized_loglik(const FitData& d, double theta, double s) {
  double ll = 0, w0 = 0, w1 = 0, w2 = 0;
  for (size_t i = 0; i < d.x.size(); ++i) {
    const double eta = -s * (d.x[i] - theta);
    ll += d.learned[i] * log_sigmoid(eta) + (d.runs[i] - d.learned[i]) * log_sigmoid(-eta);
    const double p = sigmoid(eta), w = d.runs[i] * p * (1 - p);
    w0 += w;
    w1 += w * d.x[i];
    w2 += w * d.x[i] * d.x[i];
  }
  const double det = w0 * w2 - w1 * w1;
  if (!(det > 0)) return -std::numeric_limits<double>::infinity();
  return ll + 0.5 * std::log(det);
}

// The penalized log-likelihood maximized over the slope at a fixed theta: a grid over ln s, then
// golden-section search around its best point. Returns {value, s}.
std::pair<double, double> profile_at(const FitData& d, double theta) {
  constexpr double kLo = -6, kHi = 8, kStep = 0.5;
  double best_u = kLo, best = -std::numeric_limits<double>::infinity();
  for (double u = kLo; u <= kHi + 1e-9; u += kStep)
    if (const double v = penalized_loglik(d, theta, std::exp(u)); v > best) best = v, best_u = u;
  double a = best_u - kStep, b = best_u + kStep;
  const double ratio = 0.6180339887498949;
  double c = b - ratio * (b - a), e = a + ratio * (b - a);
  double fc = penalized_loglik(d, theta, std::exp(c)), fe = penalized_loglik(d, theta, std::exp(e));
  for (int it = 0; it < 30; ++it) {
    if (fc > fe) {
      b = e, e = c, fe = fc;
      c = b - ratio * (b - a);
      fc = penalized_loglik(d, theta, std::exp(c));
    } else {
      a = c, c = e, fc = fe;
      e = a + ratio * (b - a);
      fe = penalized_loglik(d, theta, std::exp(e));
    }
  }
  const double u = fc > fe ? c : e;
  const double v = std::max(fc, fe);
  return v >= best ? std::pair{v, std::exp(u)} : std::pair{best, std::exp(best_u)};
}

// Where the profile, falling from its maximum at `peak`, crosses max - chi2/2 (linear between grid
// points), walking by `dir`; nullopt-like NaN when it never does on the grid.
double crossing(const std::vector<double>& grid, const std::vector<double>& profile, size_t peak, int dir) {
  const double cutoff = profile[peak] - kChi2Level95 / 2;
  for (size_t i = peak;;) {
    const long next = long(i) + dir;
    if (next < 0 || next >= long(profile.size())) return NAN;
    const size_t j = size_t(next);
    if (profile[j] < cutoff) {
      const double t = (profile[i] - cutoff) / (profile[i] - profile[j]);
      return grid[i] + t * (grid[j] - grid[i]);
    }
    i = j;
  }
}

}  // namespace

double BoundaryFit::p_learned(double lr) const {
  if (kind != Kind::boundary) return NAN;
  return sigmoid(-slope * (std::log(lr) - std::log(lr50)));
}

BoundaryFit fit_boundary(std::vector<RateOutcome> tested, double from, double to) {
  tested.erase(std::remove_if(tested.begin(), tested.end(), [](const RateOutcome& r) { return r.runs == 0; }),
               tested.end());
  std::sort(tested.begin(), tested.end(), [](const RateOutcome& a, const RateOutcome& b) { return a.lr < b.lr; });
  BoundaryFit fit;
  if (tested.empty()) return fit;
  const size_t peak = peak_index(tested);
  fit.peak_lr = tested[peak].lr;
  fit.top_lr = tested.back().lr;
  if (!mostly_learned(tested[peak])) {
    fit.kind = BoundaryFit::Kind::never_learned;
    return fit;
  }
  if (mostly_learned(tested.back())) {
    fit.kind = BoundaryFit::Kind::never_failed;
    return fit;
  }
  fit.kind = BoundaryFit::Kind::boundary;
  FitData d;
  for (size_t i = peak; i < tested.size(); ++i) {
    d.x.push_back(std::log(tested[i].lr));
    d.learned.push_back(tested[i].learned);
    d.runs.push_back(tested[i].runs);
    fit.fitted_runs += tested[i].runs;
  }
  fit.fitted_rates = int(d.x.size());
  for (double x : d.x) d.center += x / double(d.x.size());
  for (double& x : d.x) x -= d.center;

  const double lo = std::log(std::min(from, fit.peak_lr)) - kThetaMargin,
               hi = std::log(std::max(to, fit.top_lr)) + kThetaMargin;
  size_t best = 0;
  std::vector<double> slopes;
  for (double theta = lo; theta <= hi + 1e-12; theta += kThetaStep) {
    const auto [value, s] = profile_at(d, theta - d.center);
    fit.theta_grid.push_back(theta);
    fit.profile.push_back(value);
    slopes.push_back(s);
    if (value > fit.profile[best]) best = fit.profile.size() - 1;
  }
  fit.lr50 = std::exp(fit.theta_grid[best]);
  fit.slope = slopes[best];
  const double low = crossing(fit.theta_grid, fit.profile, best, -1);
  const double high = crossing(fit.theta_grid, fit.profile, best, +1);
  fit.low_open = !(low >= std::log(from));
  fit.high_open = !(high <= std::log(to));
  fit.low = fit.low_open ? from : std::exp(low);
  fit.high = fit.high_open ? to : std::exp(high);
  return fit;
}

BoundaryRatio boundary_ratio(const BoundaryFit& variant, const BoundaryFit& reference) {
  BoundaryRatio out;
  if (variant.kind != BoundaryFit::Kind::boundary || reference.kind != BoundaryFit::Kind::boundary) return out;
  // Profile of delta = theta_v - theta_ref: for each shift j of the grid, the best sum of the two
  // profiles with theta_v = theta_ref + delta. Both grids have the same step; their starts may differ.
  const long nv = long(variant.profile.size()), nr = long(reference.profile.size());
  const long offset = std::lround((variant.theta_grid.front() - reference.theta_grid.front()) / kThetaStep);
  std::vector<double> deltas, joint;
  size_t best = 0;
  for (long j = -(nr - 1); j <= nv - 1; ++j) {
    double m = -std::numeric_limits<double>::infinity();
    for (long i = std::max(0L, -j); i < nr && i + j < nv; ++i)
      m = std::max(m, variant.profile[i + j] + reference.profile[i]);
    deltas.push_back(double(j + offset) * kThetaStep);
    joint.push_back(m);
    if (m > joint[best]) best = joint.size() - 1;
  }
  const double low = crossing(deltas, joint, best, -1), high = crossing(deltas, joint, best, +1);
  out.ratio = std::exp(deltas[best]);
  out.low_open = variant.low_open || reference.high_open || !std::isfinite(low);
  out.high_open = variant.high_open || reference.low_open || !std::isfinite(high);
  out.low = std::exp(std::isfinite(low) ? low : deltas.front());
  out.high = std::exp(std::isfinite(high) ? high : deltas.back());
  return out;
}

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
