// What runs left in their directories (read strictly), and what they add up to: outcomes,
// medians over seeds, findings.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "common.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/stats.hpp"
#include "normlab/study/class_metrics.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/search.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Field readers: a present field of the wrong type is an InputError "<file>: line N: <field>: ...".
struct FieldReader {
  std::string where;  // "DIR/metrics.jsonl: line 12"

  [[noreturn]] void wrong(const std::string& field, const char* expected, const json& got) const {
    throw InputError(fmt::format("{}: {}: must be {}, got {}", where, field, expected, got.dump().substr(0, 60)));
  }
  // A number, or null / missing (NaN).
  double number(const json& obj, const std::string& field) const {
    if (!obj.contains(field) || obj.at(field).is_null()) return NAN;
    if (!obj.at(field).is_number()) wrong(field, "a number or null", obj.at(field));
    return obj.at(field).get<double>();
  }
  int64_t integer(const json& obj, const std::string& field, int64_t fallback) const {
    if (!obj.contains(field) || obj.at(field).is_null()) return fallback;
    if (!obj.at(field).is_number_integer()) wrong(field, "an integer", obj.at(field));
    return obj.at(field).get<int64_t>();
  }
  bool boolean(const json& obj, const std::string& field) const {
    if (!obj.contains(field)) return false;
    if (!obj.at(field).is_boolean()) wrong(field, "true or false", obj.at(field));
    return obj.at(field).get<bool>();
  }
  std::vector<double> numbers(const json& obj, const std::string& field) const {
    std::vector<double> out;
    if (!obj.contains(field) || obj.at(field).is_null()) return out;
    if (!obj.at(field).is_array()) wrong(field, "a list of numbers", obj.at(field));
    for (const json& v : obj.at(field)) {
      if (!v.is_number() && !v.is_null()) wrong(field, "a list of numbers", obj.at(field));
      out.push_back(v.is_number() ? v.get<double>() : NAN);
    }
    return out;
  }
};

}  // namespace

namespace {

// A length group's metrics from a record's "trained"/"unseen" object.
HeldOut held_out_from(const json& obj, const FieldReader& f) {
  HeldOut h;
  if (obj.is_null()) return h;
  if (!obj.is_object()) f.wrong("trained/unseen", "an object or null", obj);
  h.loss = f.number(obj, "loss");
  h.accuracy = f.number(obj, "accuracy");
  h.targets = f.integer(obj, "targets", 0);
  h.macro_f1 = f.number(obj, "macro_f1");
  if (h.targets == 0) h.loss = h.accuracy = h.macro_f1 = NAN;
  return h;
}

// Target-weighted metrics over the buckets for which `keep` holds.
template <class Keep>
HeldOut held_out_from(const std::vector<BucketResult>& buckets, Keep keep) {
  HeldOut h;
  double loss = 0, correct = 0;
  for (const BucketResult& b : buckets) {
    if (!keep(b) || b.targets == 0 || !std::isfinite(b.loss) || !std::isfinite(b.accuracy)) continue;
    loss += b.loss * double(b.targets);
    correct += b.accuracy * double(b.targets);
    h.targets += b.targets;
  }
  if (h.targets > 0) h.loss = loss / double(h.targets), h.accuracy = correct / double(h.targets);
  return h;
}

}  // namespace

HeldOut held_out_of(const std::vector<BucketResult>& buckets, bool unseen) {
  return held_out_from(buckets, [unseen](const BucketResult& b) { return b.beyond_train == unseen; });
}

namespace {

// An evaluation record ("split": "valid"): the last evaluation's buckets and one more EvalPoint.
void read_eval_record(const json& rec, const FieldReader& f, RunResult& r) {
  r.final_valid_loss = f.number(rec, "loss");
  r.final_valid_accuracy = f.number(rec, "accuracy");
  r.buckets.clear();
  if (rec.contains("buckets")) {
    if (!rec.at("buckets").is_array()) f.wrong("buckets", "a list of bucket objects", rec.at("buckets"));
    for (const json& b : rec.at("buckets")) {
      if (!b.is_object()) f.wrong("buckets", "a list of bucket objects", b);
      const FieldReader fb{f.where + ": buckets"};
      BucketResult br;
      br.min_len = fb.integer(b, "min_len", 0);
      br.max_len = fb.integer(b, "max_len", 0);
      br.beyond_train = fb.boolean(b, "beyond_train");
      br.loss = fb.number(b, "loss");
      br.accuracy = fb.number(b, "accuracy");
      br.count = fb.integer(b, "count", 0);
      br.targets = fb.integer(b, "targets", br.count);
      r.buckets.push_back(br);
    }
  }
  EvalPoint point;
  point.step = f.integer(rec, "step", r.steps.empty() ? 0 : int64_t(r.steps.back()));
  point.trained = rec.contains("trained")
                      ? held_out_from(rec.at("trained"), f)
                      : held_out_from(r.buckets, [](const BucketResult& b) { return !b.beyond_train; });
  point.unseen = rec.contains("unseen")
                     ? held_out_from(rec.at("unseen"), f)
                     : held_out_from(r.buckets, [](const BucketResult& b) { return b.beyond_train; });
  point.all = {r.final_valid_loss, r.final_valid_accuracy, f.integer(rec, "targets", 0)};
  if (rec.contains("trained") && rec.at("trained").is_object()) {
    point.top_prediction_share = f.number(rec.at("trained"), "top_prediction_share");
    point.trained_confusion = train::confusion_from_json(rec.at("trained"), f.where + ": trained");
  }
  if (rec.contains("labels") && rec.at("labels").is_array())
    for (const json& name : rec.at("labels")) point.labels.push_back(name.is_string() ? name.get<std::string>() : "");
  if (r.buckets.empty() && !rec.contains("trained")) point.trained = point.all;  // no buckets: all lengths trained
  r.evals.push_back(point);
  if (const double u = f.number(rec, "uniform_loss"); std::isfinite(u)) r.baseline.uniform_loss = u;
  if (const double u = f.number(rec, "uniform_accuracy"); std::isfinite(u)) r.baseline.uniform_accuracy = u;
  if (rec.contains("trained") && rec.at("trained").is_object())
    if (const double m = f.number(rec.at("trained"), "majority_accuracy"); std::isfinite(m))
      r.baseline.majority_accuracy = m;
}

// A step record: the curves, and the first and last diagnostics.
void read_step_record(const json& rec, const FieldReader& f, RunResult& r, bool& have_init_diag) {
  const int64_t step = f.integer(rec, "step", 0);
  if (f.boolean(rec, "diverged")) {
    r.diverged = true;
    r.diverged_at = step;
    return;
  }
  r.steps.push_back(double(step));
  r.loss.push_back(f.number(rec, "loss"));
  r.grad_norm.push_back(f.number(rec, "grad_norm"));
  r.accuracy.push_back(f.number(rec, "accuracy"));
  if (rec.contains("residual_rms")) {
    std::vector<double> rms = f.numbers(rec, "residual_rms"), grads = f.numbers(rec, "layer_grad_norms");
    if (!have_init_diag) {
      r.init_residual_rms = rms;
      r.init_layer_grad_norms = grads;
      have_init_diag = true;
    }
    r.diagnostics.push_back({step, rms, grads});
    r.end_residual_rms = std::move(rms);
    r.end_layer_grad_norms = std::move(grads);
  }
}

// A run file that exists but cannot be opened or read (permissions, a directory, an I/O error) is
// an InputError naming it; a file that does not exist yet is not (a run that has not written it).
void require_readable(const std::string& path, const std::ifstream& in) {
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(path, ec));
  if (exists && (!in.is_open() || in.bad() || fs::is_directory(path, ec)))
    throw InputError(fmt::format("{}: cannot read: {}", path, errno != 0 ? std::strerror(errno) : "not a file"));
}

void read_metrics(const std::string& metrics_path, RunResult& r) {
  errno = 0;
  std::ifstream metrics(metrics_path);
  require_readable(metrics_path, metrics);
  std::string line;
  bool have_init_diag = false;
  int64_t line_number = 0;
  while (std::getline(metrics, line)) {
    ++line_number;
    if (io::json_nesting_depth(line) > io::kMaxJsonDepth)
      throw InputError(fmt::format("{}: line {}: nested too deeply to be a metrics record", metrics_path, line_number));
    const json rec = json::parse(line, nullptr, false);
    // Only a torn last line is skipped: the start of a record without its newline (a trainer
    // writes each line with one write(2)). Anything else that is not JSON is a damaged file.
    if (rec.is_discarded() && metrics.eof() && !line.empty() && line[0] == '{' &&
        line.find('\0') == std::string::npos)
      continue;
    if (rec.is_discarded())
      throw InputError(fmt::format("{}: line {}: not a JSON record (only a torn last line is skipped)", metrics_path,
                                   line_number));
    const FieldReader f{fmt::format("{}: line {}", metrics_path, line_number)};
    if (!rec.is_object()) f.wrong("record", "a JSON object", rec);
    if (rec.contains("split")) {
      if (!rec.at("split").is_string()) f.wrong("split", "a string", rec.at("split"));
      if (rec.at("split").get<std::string>() == "valid") read_eval_record(rec, f, r);
      continue;
    }
    if (rec.contains("step")) read_step_record(rec, f, r, have_init_diag);
  }
  if (metrics.bad()) throw InputError(fmt::format("{}: cannot read: {}", metrics_path, std::strerror(errno)));
}

void read_summary(const std::string& summary_path, RunResult& r) {
  errno = 0;
  std::ifstream summary_file(summary_path);
  require_readable(summary_path, summary_file);
  if (!summary_file) return;
  const json summary = json::parse(summary_file, nullptr, false);
  if (!summary.is_object()) return;  // a summary being written; the run is not finished
  const FieldReader f{summary_path};
  r.finished = true;
  if (f.boolean(summary, "diverged")) r.diverged = true;
  r.diverged_at = f.integer(summary, "diverged_at_step", r.diverged_at);
  r.wall_time_s = f.number(summary, "wall_time_s");
  r.threads = f.integer(summary, "threads", 0);
}

}  // namespace

RunResult read_run(const RunSpec& spec, const std::string& run_dir) {
  RunResult r;
  r.spec = spec;
  if (r.spec.dir.empty()) r.spec.dir = run_dir;
  r.baseline.uniform_loss = chance_loss(spec.config);
  if (spec.config.contains("train") && spec.config["train"].is_object() && spec.config["train"].contains("steps") &&
      spec.config["train"]["steps"].is_number_integer())
    r.planned_steps = spec.config["train"]["steps"].get<int64_t>();
  if (std::isfinite(r.baseline.uniform_loss)) r.baseline.uniform_accuracy = std::exp(-r.baseline.uniform_loss);
  const fs::path dir(run_dir);
  read_metrics((dir / "metrics.jsonl").string(), r);
  read_summary((dir / "summary.json").string(), r);
  if (!r.loss.empty()) {
    const size_t tail = std::max<size_t>(1, r.loss.size() / 10);
    double sum = 0;
    for (size_t i = r.loss.size() - tail; i < r.loss.size(); ++i) sum += r.loss[i];
    r.final_train_loss = sum / double(tail);
  }
  if (r.diverged) r.final_train_loss = NAN;
  return r;
}

double Baseline::chance_accuracy() const {
  double c = 0;
  if (std::isfinite(uniform_accuracy)) c = std::max(c, uniform_accuracy);
  if (std::isfinite(majority_accuracy)) c = std::max(c, majority_accuracy);
  return c;
}

double RunResult::judged_accuracy() const {
  if (diverged) return std::isfinite(baseline.uniform_accuracy) ? baseline.uniform_accuracy : 0.0;
  return final_trained().accuracy;
}

double RunResult::judged_unseen_accuracy() const {
  return diverged ? baseline.uniform_accuracy : final_unseen().accuracy;
}

double RunResult::peak_grad_norm() const {
  double peak = NAN;
  for (double g : grad_norm)
    if (std::isfinite(g) && !(g <= peak)) peak = g;
  return peak;
}

int64_t RunResult::loss_spikes() const {
  int64_t spikes = 0;
  bool in_spike = false;
  // Near a zero loss, relative noise is large: a spike must also rise by a share of the first loss.
  const double min_rise = std::isfinite(first_train_loss()) ? kSpikeMinRise * first_train_loss() : 0.0;
  for (size_t t = kSpikeWindow; t < loss.size(); ++t) {
    const double before = median(std::vector<double>(loss.begin() + std::ptrdiff_t(t - kSpikeWindow),
                                                     loss.begin() + std::ptrdiff_t(t)));
    const bool spike = std::isfinite(loss[t]) && std::isfinite(before) && loss[t] > kSpikeFactor * before &&
                       loss[t] - before > min_rise;
    if (spike && !in_spike) ++spikes;
    in_spike = spike;
  }
  return spikes;
}

int64_t RunResult::steps_to_solve() const {
  for (const EvalPoint& e : evals)
    if (e.trained.accuracy >= kSolvedAccuracy) return e.step;
  return -1;
}

double RunResult::accuracy_auc() const {
  std::vector<std::pair<double, double>> curve;  // (step, trained accuracy)
  for (const EvalPoint& e : evals)
    if (std::isfinite(e.trained.accuracy)) curve.emplace_back(double(e.step), e.trained.accuracy);
  if (curve.empty()) return NAN;
  if (diverged) {  // no usable model from the divergence on: the uniform guess
    const double guess = std::isfinite(baseline.uniform_accuracy) ? baseline.uniform_accuracy : 0.0;
    curve.emplace_back(std::max(curve.back().first, double(diverged_at)), guess);
  }
  const double end = std::max(double(planned_steps), curve.back().first);
  if (end > curve.back().first) curve.emplace_back(end, curve.back().second);  // held to the budget's end
  const double span = end - curve.front().first;
  if (!(span > 0)) return curve.front().second;
  double area = 0;
  for (size_t i = 1; i < curve.size(); ++i)
    area += 0.5 * (curve[i].second + curve[i - 1].second) * (curve[i].first - curve[i - 1].first);
  return area / span;
}

double chance_loss(const json& run_config) {
  if (!run_config.contains("task") || !run_config["task"].is_object()) return NAN;
  const std::string name = run_config["task"].value("name", std::string("reverse"));
  if (name == "mlm_text") return NAN;
  try {
    return std::log(double(data::make_task(name).num_classes()));
  } catch (const InputError&) {
    return NAN;
  }
}

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
  std::string out = fmt::format("blocks 0–{} gradient norms {}{} (block {}: {})", blocks / 2 - 1,
                                value_range(early.lo, early.hi),
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
                       : fmt::format("held-out loss {} (over {:g}x the uniform guess's)", value_range(loss.lo, loss.hi, loss_text),
                                     kBlowUpFactor);
  if (!growth.empty())
    out += fmt::format("{}residual RMS grew {}x{}", out.empty() ? "" : "; ", value_range(growth.lo, growth.hi),
                       runs.size() == 1 ? fmt::format(" after block {}", block) : "");
  return out;
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
      return span.empty() ? "non-finite loss" : fmt::format("non-finite at step {}", value_range(span.lo, span.hi, [](double v) {
                                                              return fmt::format("{:.0f}", v);
                                                            }));
    case Outcome::exploded: return explosion_evidence(runs);
    case Outcome::collapsed: return collapse_evidence(runs);
    case Outcome::slow: return slow_evidence(runs);
    case Outcome::weak:
    case Outcome::at_chance:
      for (const RunResult* r : runs) span.add(r->final_trained().accuracy);
      return fmt::format("held-out accuracy {} (chance {:.3f}){}", value_range(span.lo, span.hi, accuracy_text),
                         runs.front()->baseline.chance_accuracy(),
                         std::any_of(runs.begin(), runs.end(), [](const RunResult* r) { return r->diagnostics.empty(); })
                             ? "; no diagnostics to name a mechanism"
                             : "");
    default: return "";
  }
}

}  // namespace

std::string outcome_evidence(const RunResult& run) { return evidence(classify(run), {&run}); }

std::string describe_failures(const std::vector<const RunResult*>& runs) {
  std::map<Outcome, std::vector<const RunResult*>> by_outcome;
  for (const RunResult* r : runs) by_outcome[classify(*r)].push_back(r);
  std::string out;
  for (const Outcome o : {Outcome::diverged, Outcome::exploded, Outcome::collapsed, Outcome::slow, Outcome::weak,
                          Outcome::at_chance, Outcome::not_evaluated, Outcome::unfinished}) {
    const auto it = by_outcome.find(o);
    if (it == by_outcome.end()) continue;
    const std::string why = evidence(o, it->second);
    out += fmt::format("{}{} in {}/{}{}", out.empty() ? "" : "; ", outcome_name(o), it->second.size(), runs.size(),
                       why.empty() ? "" : " — " + why);
  }
  return out;
}

std::vector<GroupSummary> summarize(const std::vector<RunResult>& results) {
  std::vector<GroupSummary> groups;
  for (const RunResult& r : results) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const GroupSummary& g) {
      return g.variant == r.spec.variant && g.lr == r.spec.lr && g.setting == r.spec.setting;
    });
    if (it == groups.end()) {
      groups.push_back({});
      it = groups.end() - 1;
      it->variant = r.spec.variant;
      it->lr = r.spec.lr;
      it->setting = r.spec.setting;
    }
    it->runs.push_back(&r);
  }
  for (GroupSummary& g : groups) {
    std::vector<double> train, trained_acc, trained_loss, unseen_acc, unseen_loss, solve_steps, spikes, peaks, auc;
    std::map<std::pair<int64_t, int64_t>, std::vector<double>> buckets;
    for (const RunResult* r : g.runs) {
      g.finished += r->finished;
      switch (classify(*r)) {
        case Outcome::diverged: ++g.diverged; break;
        case Outcome::exploded: ++g.exploded; break;
        case Outcome::collapsed: ++g.collapsed; break;
        case Outcome::at_chance: ++g.at_chance; break;
        case Outcome::weak: ++g.weak; break;
        case Outcome::slow: ++g.slow; break;
        case Outcome::learned: ++g.learned; break;
        case Outcome::solved: ++g.solved; break;
        case Outcome::unfinished: case Outcome::not_evaluated: break;
      }
      if (!r->finished && !r->diverged) continue;  // an unfinished run's numbers are not final
      trained_acc.push_back(r->judged_accuracy());
      unseen_acc.push_back(r->judged_unseen_accuracy());
      auc.push_back(r->accuracy_auc());
      spikes.push_back(double(r->loss_spikes()));
      peaks.push_back(r->peak_grad_norm());
      if (r->diverged) continue;  // losses and the rest are over the seeds that did not diverge
      trained_loss.push_back(r->final_trained().loss);
      unseen_loss.push_back(r->final_unseen().loss);
      if (std::isfinite(r->final_train_loss)) train.push_back(r->final_train_loss);
      if (const int64_t s = r->steps_to_solve(); s >= 0) solve_steps.push_back(double(s)), ++g.reached_solve;
      for (const BucketResult& b : r->buckets) {
        if (b.count == 0 || !std::isfinite(b.accuracy)) continue;
        buckets[{b.min_len, b.max_len}].push_back(b.accuracy);
        g.bucket_beyond_train[{b.min_len, b.max_len}] = b.beyond_train;
      }
    }
    if (!train.empty()) {
      g.train_loss = median(train);
      g.train_loss_min = *std::min_element(train.begin(), train.end());
      g.train_loss_max = *std::max_element(train.begin(), train.end());
    }
    g.trained_accuracy = t_interval(trained_acc);
    g.trained_loss = t_interval(trained_loss);
    g.unseen_accuracy = t_interval(unseen_acc);
    g.unseen_loss = t_interval(unseen_loss);
    g.accuracy_auc = t_interval(auc);
    g.steps_to_solve = median(solve_steps);
    g.loss_spikes = t_interval(spikes).mean;
    g.peak_grad_norm = median(peaks);
    for (auto& [range, values] : buckets) g.bucket_accuracy[range] = median(values);
  }
  return groups;
}

namespace {

const GroupSummary* find(const std::vector<GroupSummary>& groups, const std::string& variant, double lr,
                         const std::string& setting) {
  for (const GroupSummary& g : groups)
    if (g.variant == variant && g.lr == lr && g.setting == setting) return &g;
  return nullptr;
}

std::string where(double lr, const std::string& setting, const ComparePlan& plan) {
  std::string out = plan.lrs.size() > 1 ? "lr " + detail::format_lr(lr) : "";
  if (plan.settings.size() > 1) out += (out.empty() ? "" : ", ") + setting;
  return out;
}

std::string lr_list(const std::vector<double>& lrs) {
  std::string out;
  for (double lr : lrs) out += (out.empty() ? "" : ", ") + detail::format_lr(lr);
  return out;
}

// Each seed's value of `metric` in a group, keyed by seed.
std::map<uint64_t, const RunResult*> by_seed(const GroupSummary& g) {
  std::map<uint64_t, const RunResult*> out;
  for (const RunResult* r : g.runs)
    if (r->finished || r->diverged) out[r->spec.seed] = r;
  return out;
}

// Two runs saw the same data order and validation set: same task, seed and batch size.
bool same_data(const RunResult& a, const RunResult& b) {
  auto part = [](const json& config, const char* section, const char* key) {
    return config.contains(section) && config[section].is_object() && config[section].contains(key)
               ? config[section][key]
               : json(nullptr);
  };
  const json& ca = a.spec.config;
  const json& cb = b.spec.config;
  return ca.value("task", json()) == cb.value("task", json()) && part(ca, "train", "seed") == part(cb, "train", "seed") &&
         part(ca, "train", "batch_size") == part(cb, "train", "batch_size");
}

// "lengths 1–16" / "lengths 17–32" of the runs' task, when the config says.
std::string length_range(const ComparePlan& plan, bool unseen) {
  if (!plan.base.contains("task") || !plan.base["task"].is_object()) return "";
  const json& t = plan.base["task"];
  if (!t.contains("min_len") || !t.contains("max_len")) return "";
  if (!unseen) return fmt::format("lengths {}–{}", t["min_len"].dump(), t["max_len"].dump());
  if (!t.contains("eval_max_len") || !t["max_len"].is_number_integer() || !t["eval_max_len"].is_number_integer() ||
      t["eval_max_len"].get<int64_t>() <= t["max_len"].get<int64_t>())
    return "";
  return fmt::format("lengths {}–{}", t["max_len"].get<int64_t>() + 1, t["eval_max_len"].get<int64_t>());
}

}  // namespace

std::string variant_kind(const ComparePlan& plan, const std::string& label) {
  if (find_variant(label)) return label;
  std::set<std::string> kinds;
  for (const RunSpec& r : plan.runs)
    if (r.variant == label && r.config.contains("model") && r.config["model"].is_object())
      kinds.insert(variant_of(r.config["model"].value("norm", ""), r.config["model"].value("placement", "")));
  return kinds.size() == 1 ? *kinds.begin() : "";
}

std::string reference_variant(const ComparePlan& plan) {
  for (const char* kind : {"pre-ln", "post-ln"})
    for (const std::string& label : plan.variants)
      if (variant_kind(plan, label) == kind) return label;
  return plan.variants.empty() ? "" : plan.variants.front();
}

namespace {

// The held-out trained-length loss a comparison uses: none for a diverged seed (no usable model).
double judged_loss(const RunResult& r) { return r.diverged ? NAN : r.final_trained().loss; }

// Both variants at accuracy 1 in every seed: the final accuracy has hit its ceiling.
bool at_ceiling(const std::vector<double>& a, const std::vector<double>& b) {
  auto all_one = [](const std::vector<double>& v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [](double x) { return x >= 1.0; });
  };
  return all_one(a) && all_one(b);
}

// One comparison's intervals from the two cells' runs: per seed when every seed pairs up, else Welch.
void fill_comparison(Comparison& c, const std::map<uint64_t, const RunResult*>& runs,
                     const std::map<uint64_t, const RunResult*>& ref_runs) {
  using Metric = double (*)(const RunResult&);
  const Metric trained_acc = [](const RunResult& r) { return r.judged_accuracy(); };
  const Metric unseen_acc = [](const RunResult& r) { return r.judged_unseen_accuracy(); };
  const Metric loss = [](const RunResult& r) { return judged_loss(r); };
  const Metric auc = [](const RunResult& r) { return r.accuracy_auc(); };
  for (const auto& [seed, run] : runs) {
    auto other = ref_runs.find(seed);
    if (other == ref_runs.end() || !same_data(*run, *other->second)) c.paired = false;
  }
  if (runs.size() != ref_runs.size()) c.paired = false;
  std::vector<double> ceiling_a, ceiling_b;
  for (const auto& [seed, run] : runs) ceiling_a.push_back(trained_acc(*run));
  for (const auto& [seed, run] : ref_runs) ceiling_b.push_back(trained_acc(*run));
  c.accuracy_ceiling = at_ceiling(ceiling_a, ceiling_b);
  for (const auto& [metric, into] : {std::pair{trained_acc, &c.trained_accuracy}, std::pair{unseen_acc, &c.unseen_accuracy},
                                     std::pair{loss, &c.trained_loss}, std::pair{auc, &c.accuracy_auc}}) {
    std::vector<double> a, b;
    if (c.paired) {
      for (const auto& [seed, run] : runs) a.push_back(metric(*run)), b.push_back(metric(*ref_runs.at(seed)));
      *into = paired_difference(a, b);
    } else {
      for (const auto& [seed, run] : runs) a.push_back(metric(*run));
      for (const auto& [seed, run] : ref_runs) b.push_back(metric(*run));
      *into = welch_difference(a, b);
    }
  }
}

}  // namespace

std::vector<Comparison> compare_variants(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  std::vector<Comparison> out;
  const std::string reference = reference_variant(plan);
  for (const std::string& setting : plan.settings)
    for (double lr : plan.lrs) {
      const GroupSummary* ref = find(groups, reference, lr, setting);
      if (!ref) continue;
      const auto ref_runs = by_seed(*ref);
      for (const std::string& variant : plan.variants) {
        if (variant == reference) continue;
        const GroupSummary* g = find(groups, variant, lr, setting);
        if (!g) continue;
        Comparison c;
        c.variant = variant, c.reference = reference, c.setting = setting, c.lr = lr;
        fill_comparison(c, by_seed(*g), ref_runs);
        out.push_back(c);
      }
    }
  return out;
}

namespace {

// "+0.012", "-3.1e-04": a signed difference with three decimals, or in scientific notation when
// three decimals would print a nonzero difference as 0.
std::string signed_value(double v) {
  if (v != 0 && std::abs(v) < 5e-4) return fmt::format("{:+.1e}", v);
  if (std::abs(v) >= 1e4) return fmt::format("{:+.2e}", v);
  return fmt::format("{:+.3f}", v);
}

std::string unit_of(const Interval& d, bool paired) {
  return paired ? (d.n == 1 ? "pair" : "pairs") : "seeds (unpaired)";
}

}  // namespace

std::string describe_difference(const Interval& d, bool paired) {
  const std::string unit = unit_of(d, paired);
  if (d.n == 0 || !std::isfinite(d.mean)) return "no data";
  if (!d.has_interval()) return fmt::format("{} from {} {}, no interval", signed_value(d.mean), d.n, unit);
  // Zero spread: no t interval exists; say what the data are instead of a zero-width "interval".
  if (d.standard_error == 0)
    return d.mean == 0 ? fmt::format("identical in all {} {}", d.n, unit)
                       : fmt::format("the same {} in all {} {}", signed_value(d.mean), d.n, unit);
  const std::string interval =
      fmt::format("95% CI {} to {}, {} {}", signed_value(d.low), signed_value(d.high), d.n, unit);
  if (d.contains_zero()) return fmt::format("{} ({})", signed_value(d.mean), interval);
  return fmt::format("{} by {} ({})", d.mean > 0 ? "higher" : "lower", signed_value(std::abs(d.mean)).substr(1), interval);
}

std::vector<std::vector<EndpointTest>> test_comparisons(const std::vector<Comparison>& comparisons,
                                                        const EquivalenceMargins& margins) {
  std::vector<std::vector<EndpointTest>> out;
  std::vector<double> family;  // every difference and equivalence p-value, in order
  for (const Comparison& c : comparisons) {
    std::vector<EndpointTest> tests;
    for (const auto& [name, interval, margin] :
         {std::tuple{"held-out loss", &c.trained_loss, margins.loss},
          std::tuple{"accuracy AUC", &c.accuracy_auc, margins.accuracy_auc},
          std::tuple{"accuracy", &c.trained_accuracy, margins.accuracy}}) {
      EndpointTest t;
      t.endpoint = name, t.margin = margin, t.difference = *interval, t.paired = c.paired;
      t.p_difference = p_difference(t.difference);
      t.p_equivalence = p_equivalence(t.difference, margin);
      family.push_back(t.p_difference);
      family.push_back(t.p_equivalence);
      tests.push_back(t);
    }
    out.push_back(tests);
  }
  const std::vector<double> adjusted = holm_adjust(family);
  // Seeds needed at Holm's strictest step (alpha / m): what a rerun with more seeds must pass.
  const double family_size = double(std::count_if(family.begin(), family.end(), [](double p) { return !std::isnan(p); }));
  const double alpha = 0.05 / std::max(1.0, family_size);
  size_t next = 0;
  for (std::vector<EndpointTest>& tests : out)
    for (EndpointTest& t : tests) {
      t.holm_difference = adjusted[next++];
      t.holm_equivalence = adjusted[next++];
      if (!t.difference.has_interval() || std::isnan(t.holm_difference)) continue;  // no_data
      if (t.holm_equivalence < 0.05) t.verdict = Verdict::equivalent;
      else if (t.holm_difference < 0.05) t.verdict = Verdict::differs;
      else {
        t.verdict = Verdict::undecided;
        const double sd = t.difference.standard_error * std::sqrt(double(t.difference.n));
        t.seeds_for_equivalence = std::abs(t.difference.mean) < t.margin;
        t.seeds_needed = t.seeds_for_equivalence ? seeds_for_equivalence(sd, t.difference.mean, t.margin, alpha)
                                                 : seeds_for_difference(sd, t.difference.mean, alpha);
        if (t.seeds_needed > 0) t.seeds_needed = std::max(t.seeds_needed, t.difference.n + 1);
      }
    }
  return out;
}

std::string describe_test(const EndpointTest& t) {
  const std::string difference = describe_difference(t.difference, t.paired);
  const std::string margin = fmt::format("±{:g}", t.margin);
  switch (t.verdict) {
    case Verdict::no_data: return fmt::format("no test ({})", difference);
    case Verdict::equivalent: {
      const bool shown = t.holm_difference < 0.05;
      return fmt::format("equivalent within {}: {}, Holm p {:.2g}{}", margin, difference, t.holm_equivalence,
                         shown ? "; a difference inside the margin" : "");
    }
    case Verdict::differs: return fmt::format("differs: {}, Holm p {:.2g}", difference, t.holm_difference);
    case Verdict::undecided:
      return fmt::format("undecided: {}; {}", difference,
                         t.seeds_needed == 0
                             ? std::string("more seeds would not show equivalence within ") + margin
                             : fmt::format("about {} {} would show {} (80% power at the observed spread, Holm's "
                                           "strictest level)",
                                           t.seeds_needed, t.paired ? "pairs" : "seeds per variant",
                                           t.seeds_for_equivalence ? "equivalence within " + margin : "a difference"));
  }
  return difference;
}

std::vector<double> learned_lrs(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                                const std::string& variant, const std::string& setting) {
  std::vector<double> out;
  for (double lr : plan.lrs)
    if (const GroupSummary* g = find(groups, variant, lr, setting); g && g->mostly_learned()) out.push_back(lr);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The learning rates at which a variant was run at one setting, ascending: the grid's rates, or
// the rates a learning-rate search tried for this variant (each variant's own).
std::vector<double> tested_lrs(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                               const std::string& variant, const std::string& setting) {
  std::vector<double> out;
  for (double lr : plan.lrs)
    if (find(groups, variant, lr, setting)) out.push_back(lr);
  std::sort(out.begin(), out.end());
  return out;
}

// "0.001–0.03" for a contiguous run of the rates the variant was run at (`tested`), else the list.
std::string lr_range(const std::vector<double>& tested, const std::vector<double>& lrs) {
  if (lrs.empty()) return "none";
  const std::vector<double>& grid = tested;
  const auto first = std::find(grid.begin(), grid.end(), lrs.front());
  const bool contiguous = size_t(grid.end() - first) >= lrs.size() && std::equal(lrs.begin(), lrs.end(), first);
  if (lrs.size() == 1) return detail::format_lr(lrs.front());
  if (contiguous) return detail::format_lr(lrs.front()) + "–" + detail::format_lr(lrs.back());
  return lr_list(lrs) + " (not contiguous)";
}

// "collapsed in 5/5 — blocks 0–2 gradient norms ..." for a cell where most seeds did not learn.
std::string failure_counts(const GroupSummary& g) { return describe_failures(g.runs); }

int seeds_per_cell(const std::vector<GroupSummary>& groups) {
  int fewest = std::numeric_limits<int>::max();
  for (const GroupSummary& g : groups) fewest = std::min(fewest, int(g.runs.size()));
  return groups.empty() ? 0 : fewest;
}

}  // namespace

namespace {

// "pre-ln learned at 2 of 3 learning rates (0.001–0.003), solved at 0.001 — ...": what each variant
// did at one setting.
std::string variant_outcomes(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                             const std::string& setting) {
  std::string per_variant;
  for (const std::string& variant : plan.variants) {
    const std::vector<double> ok = learned_lrs(plan, groups, variant, setting);
    std::string solved;
    for (double lr : plan.lrs)
      if (const GroupSummary* g = find(groups, variant, lr, setting); g && 2 * g->solved > int(g->runs.size()))
        solved += (solved.empty() ? "" : ", ") + detail::format_lr(lr);
    std::string failures;
    for (double lr : plan.lrs)
      if (const GroupSummary* g = find(groups, variant, lr, setting); g && (!g->mostly_learned() || g->slow > 0)) {
        const std::string counts = failure_counts(*g);
        failures += fmt::format("{}{}{}", failures.empty() ? "" : "; ", plan.lrs.size() > 1 ? "at " + detail::format_lr(lr) + " " : "",
                                counts.empty() ? "not most seeds" : counts);
      }
    if (plan.lrs.size() == 1) {  // one rate: say what happened there, no range
      const GroupSummary* g = find(groups, variant, plan.lrs.front(), setting);
      if (!g) continue;
      per_variant += fmt::format("{}{} {} ({}/{} seeds learned{})", per_variant.empty() ? "" : "; ", variant,
                                 !solved.empty() ? "solved the task" : ok.empty() ? "did not learn" : "learned",
                                 g->learned_or_solved(), g->runs.size(), failures.empty() ? "" : "; " + failures);
      continue;
    }
    const std::vector<double> tested = tested_lrs(plan, groups, variant, setting);
    per_variant += fmt::format("{}{} learned at {} of {} learning rates ({}){}{}", per_variant.empty() ? "" : "; ",
                               variant, ok.size(), tested.size(), lr_range(tested, ok),
                               solved.empty() ? ", solved at none" : ", solved at " + solved,
                               failures.empty() ? "" : " — " + failures);
  }
  return per_variant;
}

// The question itself, per variant against no normalization: the highest grid learning rate at
// which most seeds learned, higher / the same / lower. Each variant is named: post-LN and pre-LN
// are both LayerNorm and need not agree.
std::string headroom_verdict(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                             const std::string& setting, const std::string& none_label) {
  const std::vector<double> none = learned_lrs(plan, groups, none_label, setting);
  const double none_top = none.empty() ? 0 : none.back();
  std::string higher, same, lower;
  for (const std::string& variant : plan.variants) {
    if (variant == none_label) continue;
    const std::vector<double> ok = learned_lrs(plan, groups, variant, setting);
    const double top = ok.empty() ? 0 : ok.back();
    std::string& list = top > none_top ? higher : top == none_top ? same : lower;
    list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", variant,
                        ok.empty() ? "learned at none" : "up to " + detail::format_lr(top));
  }
  std::string out = fmt::format("Highest grid learning rate at which most seeds learned, against {} ({})",
                                none_label, none.empty() ? "learned at none" : "up to " + detail::format_lr(none_top));
  for (const auto& [word, list] : {std::pair{"higher", &higher}, std::pair{"the same", &same}, std::pair{"lower", &lower}})
    if (!list->empty()) out += fmt::format("; {}: {}", word, *list);
  return out + ". One grid step locates no boundary: the learning-rate search measures how far each range reaches.";
}

// One endpoint's verdict in a few words: "differs (-0.120)", "equivalent within ±0.05",
// "undecided (about 12 pairs would decide)".
std::string short_verdict(const EndpointTest& t) {
  switch (t.verdict) {
    case Verdict::differs: return fmt::format("differs ({:+.3g})", t.difference.mean);
    case Verdict::equivalent: return fmt::format("equivalent within ±{:g}", t.margin);
    case Verdict::undecided:
      return t.seeds_needed > 0 ? fmt::format("undecided (about {} {} would decide)", t.seeds_needed,
                                              t.paired ? "pairs" : "seeds")
                                : "undecided";
    case Verdict::no_data: return "no test";
  }
  return "";
}

// "Tests: ..." — the family Holm's correction runs over and the margins, said once.
std::string tests_statement(const ComparePlan& plan, size_t comparisons) {
  const EquivalenceMargins& m = plan.equivalence;
  return fmt::format(
      "Tests: {} comparisons against {} × 3 endpoints on trained lengths (held-out loss, accuracy AUC, final "
      "accuracy), each with a difference test (paired t) and an equivalence test (two one-sided t tests) — {} "
      "p-values, Holm-adjusted together at alpha 0.05. Equivalence margins {}: loss ±{:g}, accuracy AUC ±{:g}, "
      "accuracy ±{:g}.",
      comparisons, reference_variant(plan), 6 * comparisons, m.from_config ? "(from the config)" : "(defaults)", m.loss,
      m.accuracy_auc, m.accuracy);
}

// Where both learned: each variant against the reference on the primary endpoints ("" if no cell).
std::string learned_differences(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                                const std::vector<Comparison>& comparisons,
                                const std::vector<std::vector<EndpointTest>>& tests, const std::string& setting,
                                const std::string& reference, const std::string& prefix) {
  std::string list;
  for (size_t i = 0; i < comparisons.size(); ++i) {
    const Comparison& c = comparisons[i];
    if (c.setting != setting) continue;
    const GroupSummary* a = find(groups, c.variant, c.lr, setting);
    const GroupSummary* b = find(groups, c.reference, c.lr, setting);
    if (!a || !b || !a->mostly_learned() || !b->mostly_learned()) continue;
    const std::string at = plan.lrs.size() > 1 ? " at " + detail::format_lr(c.lr) : "";
    list += fmt::format("{}{}{}: held-out loss {}, accuracy AUC {}", list.empty() ? "" : "; ", c.variant, at,
                        short_verdict(tests[i][0]), short_verdict(tests[i][1]));
  }
  if (list.empty()) return "";
  return fmt::format("{}Where both learned, against {} on trained lengths (paired by seed, Holm-adjusted): {}.", prefix,
                     reference, list);
}

// Length extrapolation, apart from the trained lengths ("" when no cell was evaluated on unseen
// lengths): each cell's mean unseen-length accuracy against chance c and the "learned" level
// c + kLearnedShare (1 - c) that trained lengths are judged by, and the best cell.
std::string unseen_sentence(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  const GroupSummary* best_unseen = nullptr;
  double c = 0;
  int learned = 0, above_chance = 0, at_chance = 0, solved = 0;
  for (const GroupSummary& g : groups)
    for (const RunResult* r : g.runs) c = std::max(c, r->baseline.chance_accuracy());
  const double learned_level = c + kLearnedShare * (1 - c);
  for (const GroupSummary& g : groups) {
    const double a = g.unseen_accuracy.mean;
    if (!std::isfinite(a)) continue;
    if (!best_unseen || a > best_unseen->unseen_accuracy.mean) best_unseen = &g;
    if (a >= kSolvedAccuracy) ++solved;
    if (a >= learned_level) ++learned;
    else if (a >= c + kChanceShare * (1 - c)) ++above_chance;
    else ++at_chance;
  }
  if (!best_unseen) return "";
  const std::string range = length_range(plan, true);
  const std::string at = where(best_unseen->lr, best_unseen->setting, plan);
  const int cells = learned + above_chance + at_chance;
  return fmt::format(
      "On unseen {}, against chance {:.3f} and the 'learned' level {:.3f}, cells by mean accuracy: {} of {} at or above "
      "the learned level, {} above chance only, {} at chance; the best {:.3f} ({}{}), {} of {} at the solved level "
      "{:.2f}.",
      range.empty() ? "lengths" : range, c, learned_level, learned, cells, above_chance, at_chance,
      best_unseen->unseen_accuracy.mean, best_unseen->variant, at.empty() ? "" : " at " + at, solved, cells,
      kSolvedAccuracy);
}

}  // namespace

std::vector<std::string> answer(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  std::vector<std::string> out;
  if (groups.empty()) return out;
  const std::string reference = reference_variant(plan);
  std::string none_label;
  for (const std::string& label : plan.variants)
    if (variant_kind(plan, label) == "none" && none_label.empty()) none_label = label;
  const std::vector<Comparison> comparisons = compare_variants(plan, groups);
  const std::vector<std::vector<EndpointTest>> tests = test_comparisons(comparisons, plan.equivalence);
  // A search answers with boundaries first; its per-rate outcomes (each variant at its own rates) are
  // in the Findings and the boundary table, not repeated here.
  const bool search = plan.search.enabled();
  for (std::string& sentence : boundary_sentences(plan, groups)) out.push_back(std::move(sentence));
  for (const std::string& setting : plan.settings) {
    const std::string prefix = plan.settings.size() > 1 ? (setting.empty() ? "" : setting + ": ") : "";
    if (!search) out.push_back(prefix + variant_outcomes(plan, groups, setting) + ".");
    if (!search && !none_label.empty() && plan.variants.size() > 1 && plan.lrs.size() > 1)
      out.push_back(prefix + headroom_verdict(plan, groups, setting, none_label));
    if (std::string d = learned_differences(plan, groups, comparisons, tests, setting, reference, prefix); !d.empty())
      out.push_back(d);
  }
  if (std::string u = unseen_sentence(plan, groups); !u.empty()) out.push_back(u);
  const int seeds = seeds_per_cell(groups);
  if (seeds > 0 && size_t(seeds) < kMinSeeds)
    out.push_back(fmt::format("Caution: as few as {} seed{} per cell (fewer than {}); intervals are wide and most "
                              "comparisons stay undecided.",
                              seeds, seeds == 1 ? "" : "s", kMinSeeds));
  return out;
}

namespace {

// Every comparison against the reference, each endpoint's verdict and the unseen-length difference:
// one line per cell of the grid, after one line stating the tests.
void paired_difference_lines(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                             std::vector<std::string>& out) {
  const std::vector<Comparison> comparisons = compare_variants(plan, groups);
  if (comparisons.empty()) return;
  const std::vector<std::vector<EndpointTest>> tests = test_comparisons(comparisons, plan.equivalence);
  out.push_back(tests_statement(plan, comparisons.size()));
  for (const std::string& setting : plan.settings)
    for (double lr : plan.lrs) {
      std::string line, reference;
      for (size_t i = 0; i < comparisons.size(); ++i) {
        const Comparison& c = comparisons[i];
        if (c.setting != setting || c.lr != lr) continue;
        reference = c.reference;
        line += fmt::format("{}{}: held-out loss {}; accuracy AUC {}; accuracy {}{}{}", line.empty() ? "" : " — ",
                            c.variant, describe_test(tests[i][0]), describe_test(tests[i][1]),
                            describe_test(tests[i][2]),
                            c.accuracy_ceiling ? " (both at accuracy 1 in every seed: the ceiling, see loss)" : "",
                            c.unseen_accuracy.n == 0 ? ""
                                                     : "; unseen-length accuracy " +
                                                           describe_difference(c.unseen_accuracy, c.paired));
      }
      if (line.empty()) continue;
      const std::string at = where(lr, setting, plan);
      out.push_back(fmt::format("{}against {}, trained lengths — {}.", at.empty() ? "" : at + ": ", reference, line));
    }
}

}  // namespace

std::vector<std::string> findings(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  std::vector<std::string> out;
  int total = 0, finished = 0;
  std::map<std::string, int> counts;
  for (const GroupSummary& g : groups) {
    total += int(g.runs.size());
    finished += g.finished;
    counts["solved"] += g.solved, counts["learned"] += g.learned, counts["slow"] += g.slow, counts["weak"] += g.weak;
    counts["at chance"] += g.at_chance, counts["collapsed"] += g.collapsed, counts["exploded"] += g.exploded;
    counts["diverged"] += g.diverged;
  }
  const std::string trained_range = length_range(plan, false);
  out.push_back(fmt::format("{} of {} runs finished ({} seeds per cell): {} solved, {} learned, {} slow, {} weak, {} at "
                            "chance, {} collapsed, {} exploded, {} diverged — judged on held-out data of trained {}.",
                            finished, total, seeds_per_cell(groups), counts["solved"], counts["learned"], counts["slow"],
                            counts["weak"], counts["at chance"], counts["collapsed"], counts["exploded"],
                            counts["diverged"], trained_range.empty() ? "lengths" : trained_range));
  // Where runs did not learn (or learned slowly), by kind, with the evidence.
  for (const auto& [what, outcome] :
       {std::pair{"Slow (above chance, held-out loss still falling at the end; counted as learned)", Outcome::slow},
        std::pair{"Weak (above chance, short of learned)", Outcome::weak},
        std::pair{"At chance", Outcome::at_chance},
        std::pair{"Collapsed (at chance or constant output, early blocks' gradients vanished)", Outcome::collapsed},
        std::pair{"Exploded (held-out loss above 2x the uniform guess's, or residual RMS grown 100x)", Outcome::exploded},
        std::pair{"Diverged (non-finite loss, stopped)", Outcome::diverged}}) {
    std::string list;
    for (const GroupSummary& g : groups) {
      std::vector<const RunResult*> runs;
      for (const RunResult* r : g.runs)
        if (classify(*r) == outcome) runs.push_back(r);
      if (runs.empty()) continue;
      const std::string at = where(g.lr, g.setting, plan);
      list += fmt::format("{}{}{} ({}/{}: {})", list.empty() ? "" : "; ", g.variant, at.empty() ? "" : " at " + at,
                          runs.size(), g.runs.size(), evidence(outcome, runs));
    }
    if (!list.empty()) out.push_back(fmt::format("{}: {}.", what, list));
  }
  // The stable learning-rate range: LayerNorm's headline effect is headroom in the learning rate.
  if (plan.lrs.size() > 1)
    for (const std::string& setting : plan.settings) {
      std::string list;
      for (const std::string& variant : plan.variants) {
        const std::vector<double> ok = learned_lrs(plan, groups, variant, setting);
        const std::vector<double> tested = tested_lrs(plan, groups, variant, setting);
        list += fmt::format("{}{} {} ({} of {})", list.empty() ? "" : "; ", variant, lr_range(tested, ok), ok.size(),
                            tested.size());
      }
      out.push_back(fmt::format("Stable learning-rate range (tested rates at which most seeds learned){}: {}.",
                                plan.settings.size() > 1 ? ", " + setting : "", list));
    }
  // Speed: steps to solve where some variant solved.
  for (const std::string& setting : plan.settings)
    for (double lr : plan.lrs) {
      std::string list;
      for (const std::string& variant : plan.variants)
        if (const GroupSummary* g = find(groups, variant, lr, setting); g && g->reached_solve > 0)
          list += fmt::format("{}{} {:.0f} ({}/{})", list.empty() ? "" : ", ", variant, g->steps_to_solve,
                              g->reached_solve, g->runs.size());
      if (list.empty()) continue;
      const std::string at = where(lr, setting, plan);
      out.push_back(fmt::format("Steps to solve{} (first evaluation at trained-length accuracy >= {}; median over "
                                "the seeds that reached it): {}.",
                                at.empty() ? "" : " at " + at, kSolvedAccuracy, list));
    }
  paired_difference_lines(plan, groups, out);
  const int seeds = seeds_per_cell(groups);
  if (seeds > 0 && size_t(seeds) < kMinSeeds)
    out.push_back(fmt::format("Warning: some cells have only {} seed{} (fewer than {}).", seeds, seeds == 1 ? "" : "s",
                              kMinSeeds));
  return out;
}

double most_different_lr(const ComparePlan& plan, const std::vector<GroupSummary>& groups, const std::string& setting) {
  double best_lr = plan.lrs.empty() ? 0 : plan.lrs.front(), best_spread = -1;
  for (double lr : plan.lrs) {
    double lo = INFINITY, hi = -INFINITY;
    for (const std::string& variant : plan.variants) {
      const GroupSummary* g = find(groups, variant, lr, setting);
      if (!g) continue;
      const double v = std::isfinite(g->trained_accuracy.mean) ? g->trained_accuracy.mean : 0.0;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (hi - lo > best_spread) best_spread = hi - lo, best_lr = lr;
  }
  return best_lr;
}

}  // namespace normlab::study
