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
  if (h.targets == 0) h.loss = h.accuracy = NAN;
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

Outcome classify(const RunResult& run) {
  if (run.diverged) return Outcome::diverged;
  if (!run.finished) return Outcome::unfinished;
  const HeldOut trained = run.final_trained();
  if (run.evals.empty()) return Outcome::not_evaluated;
  // A model far worse than a uniform guess has blown up (its loss, not only its accuracy, tells).
  const double guess_loss = std::isfinite(run.baseline.uniform_loss) ? run.baseline.uniform_loss : run.first_train_loss();
  if (!std::isfinite(trained.loss) || (std::isfinite(guess_loss) && trained.loss > kBlowUpFactor * guess_loss))
    return Outcome::blew_up;
  const double a = trained.accuracy, c = run.baseline.chance_accuracy();
  if (a >= kSolvedAccuracy) return Outcome::solved;
  if (a >= c + kLearnedShare * (1 - c)) return Outcome::learned;
  if (a >= c + kChanceShare * (1 - c)) return Outcome::weak;
  return Outcome::at_chance;
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::unfinished: return "unfinished";
    case Outcome::not_evaluated: return "not evaluated";
    case Outcome::diverged: return "diverged";
    case Outcome::blew_up: return "blew up";
    case Outcome::at_chance: return "at chance";
    case Outcome::weak: return "weak";
    case Outcome::learned: return "learned";
    case Outcome::solved: return "solved";
  }
  return "?";
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
    std::vector<double> train, trained_acc, trained_loss, unseen_acc, unseen_loss, solve_steps, spikes, peaks;
    std::map<std::pair<int64_t, int64_t>, std::vector<double>> buckets;
    for (const RunResult* r : g.runs) {
      g.finished += r->finished;
      switch (classify(*r)) {
        case Outcome::diverged: ++g.diverged; break;
        case Outcome::blew_up: ++g.blew_up; break;
        case Outcome::at_chance: ++g.at_chance; break;
        case Outcome::weak: ++g.weak; break;
        case Outcome::learned: ++g.learned; break;
        case Outcome::solved: ++g.solved; break;
        case Outcome::unfinished: case Outcome::not_evaluated: break;
      }
      if (!r->finished && !r->diverged) continue;  // an unfinished run's numbers are not final
      trained_acc.push_back(r->judged_accuracy());
      unseen_acc.push_back(r->judged_unseen_accuracy());
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
        Comparison c{variant, reference, setting, lr, true, {}, {}};
        std::vector<double> a_trained, b_trained, a_unseen, b_unseen;
        const auto runs = by_seed(*g);
        for (const auto& [seed, run] : runs) {
          auto other = ref_runs.find(seed);
          if (other == ref_runs.end() || !same_data(*run, *other->second)) {
            c.paired = false;
            break;
          }
        }
        if (runs.size() != ref_runs.size()) c.paired = false;
        if (c.paired) {
          for (const auto& [seed, run] : runs) {
            const RunResult* other = ref_runs.at(seed);
            a_trained.push_back(run->judged_accuracy()), b_trained.push_back(other->judged_accuracy());
            a_unseen.push_back(run->judged_unseen_accuracy()), b_unseen.push_back(other->judged_unseen_accuracy());
          }
          c.trained_accuracy = paired_difference(a_trained, b_trained);
          c.unseen_accuracy = paired_difference(a_unseen, b_unseen);
        } else {
          for (const auto& [seed, run] : runs) a_trained.push_back(run->judged_accuracy()), a_unseen.push_back(run->judged_unseen_accuracy());
          for (const auto& [seed, run] : ref_runs)
            b_trained.push_back(run->judged_accuracy()), b_unseen.push_back(run->judged_unseen_accuracy());
          c.trained_accuracy = welch_difference(a_trained, b_trained);
          c.unseen_accuracy = welch_difference(a_unseen, b_unseen);
        }
        out.push_back(c);
      }
    }
  return out;
}

std::string describe_difference(const Interval& d, bool paired) {
  const std::string unit = paired ? "pairs" : "seeds (unpaired)";
  if (d.n == 0 || !std::isfinite(d.mean)) return "no data";
  if (!d.has_interval())
    return fmt::format("no difference shown ({:+.3f} from {} {}, no interval)", d.mean, d.n, d.n == 1 ? "pair" : unit);
  if (d.contains_zero())
    return fmt::format("no difference shown ({:+.3f}, 95% CI {:+.3f} to {:+.3f}, {} {})", d.mean, d.low, d.high, d.n, unit);
  return fmt::format("{} by {:.3f} (95% CI {:+.3f} to {:+.3f}, {} {})", d.mean > 0 ? "higher" : "lower", std::abs(d.mean),
                     d.low, d.high, d.n, unit);
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

// "0.001–0.03" for a contiguous run of grid rates, else the list.
std::string lr_range(const ComparePlan& plan, const std::vector<double>& lrs) {
  if (lrs.empty()) return "none";
  std::vector<double> grid = plan.lrs;
  std::sort(grid.begin(), grid.end());
  const auto first = std::find(grid.begin(), grid.end(), lrs.front());
  const bool contiguous = size_t(grid.end() - first) >= lrs.size() && std::equal(lrs.begin(), lrs.end(), first);
  if (lrs.size() == 1) return detail::format_lr(lrs.front());
  if (contiguous) return detail::format_lr(lrs.front()) + "–" + detail::format_lr(lrs.back());
  return lr_list(lrs) + " (not contiguous)";
}

// "diverged in 3/5 seeds, at chance in 2/5" for a cell where most seeds did not learn.
std::string failure_counts(const GroupSummary& g) {
  const int n = int(g.runs.size());
  std::string out;
  for (const auto& [count, word] : {std::pair{g.diverged, "diverged"}, std::pair{g.blew_up, "blew up"},
                                    std::pair{g.at_chance, "at chance"}, std::pair{g.weak, "weak"}})
    if (count > 0) out += fmt::format("{}{} in {}/{}", out.empty() ? "" : ", ", word, count, n);
  const int unfinished = n - g.finished;
  if (out.empty() && unfinished > 0) out = fmt::format("unfinished in {}/{}", unfinished, n);
  return out;
}

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
      if (const GroupSummary* g = find(groups, variant, lr, setting); g && !g->mostly_learned()) {
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
    per_variant += fmt::format("{}{} learned at {} of {} learning rates ({}){}{}", per_variant.empty() ? "" : "; ",
                               variant, ok.size(), plan.lrs.size(), lr_range(plan, ok),
                               solved.empty() ? ", solved at none" : ", solved at " + solved,
                               failures.empty() ? "" : " — " + failures);
  }
  return per_variant;
}

// The question itself: does LayerNorm widen the range of learning rates that train?
std::string headroom_verdict(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                             const std::string& setting, const std::string& reference, const std::string& none_label) {
  const std::vector<double> ln = learned_lrs(plan, groups, reference, setting);
  const std::vector<double> none = learned_lrs(plan, groups, none_label, setting);
  const double ln_top = ln.empty() ? 0 : ln.back(), none_top = none.empty() ? 0 : none.back();
  if (ln_top > none_top)
    return fmt::format("{} trained at higher learning rates than {} (up to {} vs {}): "
                       "normalization bought learning-rate headroom here.",
                       reference, none_label, detail::format_lr(ln_top), none.empty() ? "none" : detail::format_lr(none_top));
  if (ln_top == none_top)
    return fmt::format("{} trained at as high a learning rate as {} ({}): no learning-rate "
                       "headroom from LayerNorm in this grid.",
                       none_label, reference, ln.empty() ? "neither learned at any" : "up to " + detail::format_lr(ln_top));
  return fmt::format("{} trained at higher learning rates than {} (up to {} vs {}): LayerNorm "
                     "did not help here.",
                     none_label, reference, detail::format_lr(none_top), ln.empty() ? "none" : detail::format_lr(ln_top));
}

// Where both learned: the paired held-out accuracy differences against the reference ("" if no cell).
std::string learned_differences(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                                const std::vector<Comparison>& comparisons, const std::string& setting,
                                const std::string& reference, const std::string& prefix) {
  std::string shown, not_shown;
  for (const Comparison& c : comparisons) {
    if (c.setting != setting) continue;
    const GroupSummary* a = find(groups, c.variant, c.lr, setting);
    const GroupSummary* b = find(groups, c.reference, c.lr, setting);
    if (!a || !b || !a->mostly_learned() || !b->mostly_learned()) continue;
    const std::string at = plan.lrs.size() > 1 ? " at " + detail::format_lr(c.lr) : "";
    if (c.trained_accuracy.has_interval() && !c.trained_accuracy.contains_zero())
      shown += fmt::format("{}{}{} {} by {:.3f}", shown.empty() ? "" : ", ", c.variant, at,
                           c.trained_accuracy.mean > 0 ? "higher" : "lower", std::abs(c.trained_accuracy.mean));
    else
      not_shown += fmt::format("{}{}{}", not_shown.empty() ? "" : ", ", c.variant, at);
  }
  if (shown.empty() && not_shown.empty()) return "";
  return fmt::format("{}Where both learned, held-out accuracy on trained lengths against {} (paired by seed, "
                     "95% CI): {}{}.",
                     prefix, reference, shown.empty() ? "" : "a difference for " + shown,
                     not_shown.empty() ? "" : (shown.empty() ? "" : "; ") + std::string("no difference shown for ") + not_shown);
}

// Length extrapolation, apart from the trained lengths ("" when no cell was evaluated on unseen lengths).
std::string unseen_sentence(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  const GroupSummary* best_unseen = nullptr;
  for (const GroupSummary& g : groups)
    if (std::isfinite(g.unseen_accuracy.mean) && (!best_unseen || g.unseen_accuracy.mean > best_unseen->unseen_accuracy.mean))
      best_unseen = &g;
  if (!best_unseen) return "";
  const std::string range = length_range(plan, true);
  const std::string at = where(best_unseen->lr, best_unseen->setting, plan);
  return fmt::format("On unseen {}, no cell's mean accuracy exceeded {:.3f} ({}{}): {}.",
                     range.empty() ? "lengths" : range, best_unseen->unseen_accuracy.mean, best_unseen->variant,
                     at.empty() ? "" : " at " + at,
                     best_unseen->unseen_accuracy.mean >= kSolvedAccuracy
                         ? "length extrapolation was solved there"
                         : "no variant extrapolates to lengths it never saw");
}

}  // namespace

std::vector<std::string> answer(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  std::vector<std::string> out;
  if (groups.empty()) return out;
  const std::string reference = reference_variant(plan);
  std::string none_label;
  for (const std::string& label : plan.variants)
    if (variant_kind(plan, label) == "none" && none_label.empty()) none_label = label;
  const bool has_none = !none_label.empty();
  const std::vector<Comparison> comparisons = compare_variants(plan, groups);
  for (const std::string& setting : plan.settings) {
    const std::string prefix = plan.settings.size() > 1 ? (setting.empty() ? "" : setting + ": ") : "";
    out.push_back(prefix + variant_outcomes(plan, groups, setting) + ".");
    if (has_none && reference != none_label && plan.lrs.size() > 1)
      out.push_back(prefix + headroom_verdict(plan, groups, setting, reference, none_label));
    if (std::string d = learned_differences(plan, groups, comparisons, setting, reference, prefix); !d.empty())
      out.push_back(d);
  }
  for (std::string& sentence : boundary_sentences(plan, groups)) out.push_back(std::move(sentence));
  if (std::string u = unseen_sentence(plan, groups); !u.empty()) out.push_back(u);
  const int seeds = seeds_per_cell(groups);
  if (seeds > 0 && size_t(seeds) < kMinSeeds)
    out.push_back(fmt::format("Caution: as few as {} seed{} per cell (fewer than {}); intervals are wide and a "
                              "\"no difference shown\" is weak evidence of no difference.",
                              seeds, seeds == 1 ? "" : "s", kMinSeeds));
  return out;
}

namespace {

// Paired differences against the reference, both length groups: one line per cell of the grid.
void paired_difference_lines(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                             std::vector<std::string>& out) {
  const std::vector<Comparison> comparisons = compare_variants(plan, groups);
  for (const std::string& setting : plan.settings)
    for (double lr : plan.lrs) {
      std::string trained, unseen, reference;
      for (const Comparison& c : comparisons) {
        if (c.setting != setting || c.lr != lr) continue;
        reference = c.reference;
        if (c.unseen_accuracy.n == 0) {  // no lengths beyond training in this grid
          trained += fmt::format("{}{} {}", trained.empty() ? "" : "; ", c.variant, describe_difference(c.trained_accuracy, c.paired));
          continue;
        }
        trained += fmt::format("{}{} {}", trained.empty() ? "" : "; ", c.variant, describe_difference(c.trained_accuracy, c.paired));
        unseen += fmt::format("{}{} {}", unseen.empty() ? "" : "; ", c.variant, describe_difference(c.unseen_accuracy, c.paired));
      }
      if (trained.empty()) continue;
      const std::string at = where(lr, setting, plan);
      out.push_back(fmt::format("{}against {}, held-out accuracy — trained lengths: {}.{}", at.empty() ? "" : at + ": ",
                                reference, trained, unseen.empty() ? "" : " Unseen lengths: " + unseen + "."));
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
    counts["solved"] += g.solved, counts["learned"] += g.learned, counts["weak"] += g.weak;
    counts["at chance"] += g.at_chance, counts["blew up"] += g.blew_up, counts["diverged"] += g.diverged;
  }
  const std::string trained_range = length_range(plan, false);
  out.push_back(fmt::format("{} of {} runs finished ({} seeds per cell): {} solved, {} learned, {} weak, {} at chance, "
                            "{} blew up, {} diverged — judged on held-out data of trained {}.",
                            finished, total, seeds_per_cell(groups), counts["solved"], counts["learned"], counts["weak"],
                            counts["at chance"], counts["blew up"], counts["diverged"],
                            trained_range.empty() ? "lengths" : trained_range));
  // Where runs failed, by kind.
  for (const auto& [what, member] : {std::pair{"At chance", &GroupSummary::at_chance},
                                     std::pair{"Weak (above chance, short of learned)", &GroupSummary::weak},
                                     std::pair{"Blew up (held-out loss above 2x the uniform guess's)", &GroupSummary::blew_up},
                                     std::pair{"Diverged (non-finite loss, stopped)", &GroupSummary::diverged}}) {
    std::string list;
    for (const GroupSummary& g : groups)
      if (g.*member > 0) {
        const std::string at = where(g.lr, g.setting, plan);
        list += fmt::format("{}{}{} ({}/{})", list.empty() ? "" : "; ", g.variant, at.empty() ? "" : " at " + at,
                            g.*member, g.runs.size());
      }
    if (!list.empty()) out.push_back(fmt::format("{}: {}.", what, list));
  }
  // The stable learning-rate range: LayerNorm's headline effect is headroom in the learning rate.
  if (plan.lrs.size() > 1)
    for (const std::string& setting : plan.settings) {
      std::string list;
      for (const std::string& variant : plan.variants) {
        const std::vector<double> ok = learned_lrs(plan, groups, variant, setting);
        list += fmt::format("{}{} {} ({} of {})", list.empty() ? "" : "; ", variant, lr_range(plan, ok), ok.size(),
                            plan.lrs.size());
      }
      out.push_back(fmt::format("Stable learning-rate range (grid rates at which most seeds learned){}: {}.",
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
