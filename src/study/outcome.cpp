// How a run ended, named from its held-out metrics and its own diagnostics, with the evidence
// (outcome.hpp; the rules are defined in docs/compare.md).
#include "normlab/study/outcome.hpp"
#include "normlab/study/class_metrics.hpp"
#include "normlab/study/instability.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "normlab/stats.hpp"

namespace normlab::study {

using nlohmann::json;

namespace {

// The early blocks' (the first half's) largest gradient norm over the last block's at one
// diagnostics record; NaN with fewer than 2 blocks or a value that is not finite.
double early_gradient_ratio(const Diagnostics& d) {
  const std::vector<double>& g = d.layer_grad_norms;
  if (g.size() < 2 || !std::isfinite(g.back()) || !(g.back() > 0)) return NAN;
  double early = 0;
  for (size_t block = 0; block < g.size() / 2; ++block) {
    if (!std::isfinite(g[block])) return NAN;
    early = std::max(early, g[block]);
  }
  return early / g.back();
}

bool gradients_collapsed(const RunResult& run) {
  return !run.diagnostics.empty() && early_gradient_ratio(run.diagnostics.back()) < kCollapseGradRatio;
}

// The first diagnostics step from which the early blocks' gradients stayed collapsed to the end.
int64_t collapse_onset(const RunResult& run) {
  int64_t onset = -1;
  for (const Diagnostics& d : run.diagnostics) {
    const bool collapsed = early_gradient_ratio(d) < kCollapseGradRatio;
    if (collapsed && onset < 0) onset = d.step;
    if (!collapsed) onset = -1;
  }
  return onset;
}

// The largest growth factor of a block's residual RMS from the first diagnostics record to the
// last (infinite when it became non-finite); NaN with fewer than two records. block: which one.
double residual_growth(const RunResult& run, size_t* block = nullptr) {
  if (run.diagnostics.size() < 2) return NAN;
  const std::vector<double>& first = run.diagnostics.front().residual_rms;
  const std::vector<double>& last = run.diagnostics.back().residual_rms;
  double growth = NAN;
  for (size_t i = 0; i < std::min(first.size(), last.size()); ++i) {
    if (!std::isfinite(first[i]) || !(first[i] > 0)) continue;
    const double g = std::isfinite(last[i]) ? last[i] / first[i] : INFINITY;
    if (!(g <= growth)) {
      growth = g;
      if (block) *block = i;
    }
  }
  return growth;
}

// Held-out trained-length loss fell at each of the last kSlowEvaluations evaluations, by at least
// kSlowDrop of its value over them.
bool still_falling(const RunResult& run) {
  if (run.evals.size() < kSlowEvaluations) return false;
  const size_t first = run.evals.size() - kSlowEvaluations;
  for (size_t i = first + 1; i < run.evals.size(); ++i)
    if (!(run.evals[i].trained.loss < run.evals[i - 1].trained.loss)) return false;
  return run.evals.back().trained.loss <= (1 - kSlowDrop) * run.evals[first].trained.loss;
}

bool predictions_constant(const RunResult& run) {
  return !run.evals.empty() && run.evals.back().top_prediction_share >= kConstantPredictionShare;
}

// The loss a held-out loss is measured against for "exploded": ln K, else the first training loss.
double guess_loss(const RunResult& run) {
  return std::isfinite(run.baseline.uniform_loss) ? run.baseline.uniform_loss : run.first_train_loss();
}

bool loss_exploded(const RunResult& run) {
  const double loss = run.final_trained().loss, guess = guess_loss(run);
  return !std::isfinite(loss) || (std::isfinite(guess) && loss > kBlowUpFactor * guess);
}

}  // namespace

Outcome classify(const RunResult& run) {
  if (run.diverged) return Outcome::diverged;
  if (!run.finished) return Outcome::unfinished;
  if (run.evals.empty()) return Outcome::not_evaluated;
  // A model far worse than a uniform guess has blown up (its loss, not only its accuracy, tells).
  if (loss_exploded(run)) return Outcome::exploded;
  const double a = run.final_trained().accuracy, c = run.baseline.chance_accuracy();
  if (solved_score(run) >= kSolvedAccuracy) return Outcome::solved;  // own data: macro-F1 too
  const bool above_chance = a >= c + kChanceShare * (1 - c);
  if (above_chance && still_falling(run)) return Outcome::slow;
  if (a >= c + kLearnedShare * (1 - c)) return Outcome::learned;
  // Short of learned: name the mechanism the diagnostics show, else how far from chance it got.
  if (residual_growth(run) > kExplodeRmsFactor) return Outcome::exploded;
  if (logit_divergence(run.diagnostics)) return Outcome::logit_divergence;
  if (attention_entropy_collapse(run.diagnostics, false)) return Outcome::entropy_collapse;
  if ((!above_chance || predictions_constant(run)) && gradients_collapsed(run)) return Outcome::collapsed;
  if (above_chance) return Outcome::weak;
  return Outcome::at_chance;
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::unfinished: return "unfinished";
    case Outcome::not_evaluated: return "not evaluated";
    case Outcome::diverged: return "diverged";
    case Outcome::exploded: return "exploded";
    case Outcome::logit_divergence: return "logit divergence";
    case Outcome::entropy_collapse: return "attention entropy collapse";
    case Outcome::collapsed: return "collapsed";
    case Outcome::at_chance: return "at chance";
    case Outcome::weak: return "weak";
    case Outcome::slow: return "slow";
    case Outcome::learned: return "learned";
    case Outcome::solved: return "solved";
  }
  return "?";
}

namespace {

// "0.04" / "1e-07": a diagnostic magnitude in two significant digits.
std::string magnitude(double v) { return fmt::format("{:.2g}", v); }

// "1e-07–1e-06" or "0.5" when both ends agree.
std::string value_range(double lo, double hi, std::string (*show)(double) = magnitude) {
  return show(lo) == show(hi) ? show(lo) : show(lo) + "–" + show(hi);
}

std::string accuracy_text(double v) { return fmt::format("{:.3f}", v); }
std::string loss_text(double v) { return fmt::format("{:.3g}", v); }

struct Span {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

std::string collapse_evidence(const std::vector<const RunResult*>& runs) {
  Span early, last, onset, share;
  size_t blocks = 0;
  for (const RunResult* r : runs) {
    const std::vector<double>& g = r->diagnostics.back().layer_grad_norms;
    blocks = std::max(blocks, g.size());
    for (size_t b = 0; b < g.size() / 2; ++b) early.add(g[b]);
    last.add(g.back());
    onset.add(double(collapse_onset(*r)));
    share.add(r->evals.back().top_prediction_share);
  }
  std::string out =
      fmt::format("blocks 0–{} gradient norms {}{} (block {}: {})", blocks / 2 - 1, value_range(early.lo, early.hi),
                  onset.empty() ? "" : fmt::format(" by step {:.0f}", onset.hi), blocks - 1,
                  value_range(last.lo, last.hi));
  if (!share.empty())
    out += fmt::format("; {}% of held-out predictions one label",
                       value_range(100 * share.lo, 100 * share.hi, [](double v) { return fmt::format("{:.0f}", v); }));
  return out;
}

std::string explosion_evidence(const std::vector<const RunResult*>& runs) {
  Span loss, growth;
  size_t block = 0;
  for (const RunResult* r : runs) {
    if (loss_exploded(*r)) loss.add(std::isfinite(r->final_trained().loss) ? r->final_trained().loss : INFINITY);
    else growth.add(residual_growth(*r, &block));
  }
  std::string out;
  if (!loss.empty() || std::any_of(runs.begin(), runs.end(), [](const RunResult* r) { return loss_exploded(*r); }))
    out = loss.empty() ? "held-out loss not finite"
                       : fmt::format("held-out loss {} (over {:g}x the uniform guess's)",
                                     value_range(loss.lo, loss.hi, loss_text), kBlowUpFactor);
  if (!growth.empty())
    out += fmt::format("{}residual RMS grew {}x{}", out.empty() ? "" : "; ", value_range(growth.lo, growth.hi),
                       runs.size() == 1 ? fmt::format(" after block {}", block) : "");
  return out;
}

// "the attention entropy of layer 4 fell from 2.1 to 0.05 nats by step 150 while its max |logit| grew
// 40x (1.2 to 48)" for one run; ranges over the runs for several.
std::string entropy_collapse_evidence(const std::vector<const RunResult*>& runs) {
  std::vector<EntropyCollapse> found;
  for (const RunResult* r : runs)
    if (const auto c = attention_entropy_collapse(r->diagnostics, false)) found.push_back(*c);
  if (found.empty()) return "";
  if (found.size() == 1) return found.front().evidence();
  Span from, to, onset, growth, top;
  std::set<int64_t> layers;
  for (const EntropyCollapse& c : found) {
    layers.insert(c.layer);
    from.add(c.initial_entropy), to.add(c.entropy), onset.add(double(c.onset));
    growth.add(c.max_logit / c.initial_max_logit), top.add(c.max_logit);
  }
  std::string names;
  for (const int64_t l : layers) names += (names.empty() ? "" : ", ") + std::to_string(l);
  auto step = [](double v) { return fmt::format("{:.0f}", v); };
  auto growth_text = [](double v) { return v < 100 ? fmt::format("{:.1f}", v) : fmt::format("{:.0f}", v); };
  return fmt::format(
      "the attention entropy of layer{} {} fell from {} to {} nats by step {} while {} max |logit| grew "
      "{}x (to {})",
      layers.size() > 1 ? "s" : "", names, value_range(from.lo, from.hi, loss_text), value_range(to.lo, to.hi),
      value_range(onset.lo, onset.hi, step), layers.size() > 1 ? "their" : "its",
      value_range(growth.lo, growth.hi, growth_text), value_range(top.lo, top.hi, loss_text));
}

std::string logit_divergence_evidence(const std::vector<const RunResult*>& runs) {
  std::vector<LogitDivergence> found;
  for (const RunResult* r : runs)
    if (const auto d = logit_divergence(r->diagnostics)) found.push_back(*d);
  if (found.empty()) return "";
  if (found.size() == 1) return found.front().evidence();
  Span value, onset, start;
  for (const LogitDivergence& d : found)
    value.add(d.log_z_max_abs), onset.add(double(d.onset)), start.add(d.initial_log_z_max_abs);
  return fmt::format("the output's |log Z| reached {} by step {} (bound {:g}{})",
                     value_range(value.lo, value.hi, loss_text),
                     value_range(onset.lo, onset.hi, [](double v) { return fmt::format("{:.0f}", v); }),
                     found.front().bound,
                     start.empty() ? "" : fmt::format("; {} at step 1", value_range(start.lo, start.hi, loss_text)));
}

std::string slow_evidence(const std::vector<const RunResult*>& runs) {
  std::vector<double> from, to;
  for (const RunResult* r : runs) {
    from.push_back(r->evals[r->evals.size() - kSlowEvaluations].trained.loss);
    to.push_back(r->evals.back().trained.loss);
  }
  const RunResult& any = *runs.front();
  return fmt::format("held-out loss still falling at the end: {} → {} over steps {}–{}{}", loss_text(median(from)),
                     loss_text(median(to)), any.evals[any.evals.size() - kSlowEvaluations].step, any.evals.back().step,
                     runs.size() > 1 ? " (medians)" : "");
}

// The evidence for the runs that share one outcome.
std::string evidence(Outcome outcome, const std::vector<const RunResult*>& runs) {
  Span span;
  switch (outcome) {
    case Outcome::diverged:
      for (const RunResult* r : runs) span.add(double(r->diverged_at));
      return span.empty()
                 ? "non-finite loss"
                 : fmt::format("non-finite at step {}",
                               value_range(span.lo, span.hi, [](double v) { return fmt::format("{:.0f}", v); }));
    case Outcome::exploded: return explosion_evidence(runs);
    case Outcome::collapsed: return collapse_evidence(runs);
    case Outcome::entropy_collapse: return entropy_collapse_evidence(runs);
    case Outcome::logit_divergence: return logit_divergence_evidence(runs);
    case Outcome::slow: {
      // A slow run short of learned may still creep along with its attention collapsed: say so.
      std::vector<const RunResult*> collapsed;
      for (const RunResult* r : runs)
        if (!at_learned_level(*r) && attention_entropy_collapse(r->diagnostics, false)) collapsed.push_back(r);
      if (collapsed.empty()) return slow_evidence(runs);
      return slow_evidence(runs) + (runs.size() == 1 ? "; " : fmt::format("; in {} of them ", collapsed.size())) +
             entropy_collapse_evidence(collapsed);
    }
    case Outcome::weak:
    case Outcome::at_chance: {
      // Each run's own chance level (its majority label's share differs by seed): the range over them.
      Span chance;
      for (const RunResult* r : runs) span.add(r->final_trained().accuracy), chance.add(r->baseline.chance_accuracy());
      return fmt::format("held-out accuracy {} (chance {}){}", value_range(span.lo, span.hi, accuracy_text),
                         chance.empty() ? "unknown" : value_range(chance.lo, chance.hi, accuracy_text),
                         std::any_of(runs.begin(), runs.end(),
                                     [](const RunResult* r) { return r->diagnostics.empty(); })
                             ? "; no diagnostics to name a mechanism"
                             : "");
    }
    default: return "";
  }
}

}  // namespace

std::string outcome_evidence(const RunResult& run) { return evidence(classify(run), {&run}); }

std::string outcome_evidence(Outcome outcome, const std::vector<const RunResult*>& runs) {
  return evidence(outcome, runs);
}

namespace {

std::string failure_clauses(const std::vector<const RunResult*>& runs, size_t of, bool strict) {
  std::map<Outcome, std::vector<const RunResult*>> by_outcome;
  for (const RunResult* r : runs) by_outcome[classify(*r)].push_back(r);
  std::string out;
  for (const Outcome o :
       {Outcome::diverged, Outcome::exploded, Outcome::logit_divergence, Outcome::entropy_collapse, Outcome::collapsed,
        Outcome::slow, Outcome::weak, Outcome::at_chance, Outcome::not_evaluated, Outcome::unfinished}) {
    const auto it = by_outcome.find(o);
    if (it == by_outcome.end()) continue;
    const std::string why = evidence(o, it->second);
    out += fmt::format("{}{}{} in {}/{}{}", out.empty() ? "" : "; ", outcome_name(o),
                       strict && o == Outcome::slow ? " below the learned level" : "", it->second.size(), of,
                       why.empty() ? "" : " — " + why);
  }
  return out;
}

}  // namespace

std::string describe_failures(const std::vector<const RunResult*>& runs) {
  return failure_clauses(runs, runs.size(), false);
}

std::string describe_failures(const std::vector<const RunResult*>& failing, size_t of) {
  return failure_clauses(failing, of, true);
}

bool at_learned_level(const RunResult& run) {
  if (run.diverged || !run.finished || run.evals.empty()) return false;
  const double a = run.final_trained().accuracy, c = run.baseline.chance_accuracy();
  return a >= c + kLearnedShare * (1 - c);
}

}  // namespace normlab::study
