// What runs left in their directories (read strictly), and what they add up to: outcomes,
// medians over seeds, findings.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "common.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/stats.hpp"
#include "normlab/study/report.hpp"

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

RunResult read_run(const RunSpec& spec, const std::string& run_dir) {
  RunResult r;
  r.spec = spec;
  const fs::path dir(run_dir);
  const std::string metrics_path = (dir / "metrics.jsonl").string();
  std::ifstream metrics(metrics_path);
  std::string line;
  bool have_init_diag = false;
  int64_t line_number = 0;
  while (std::getline(metrics, line)) {
    ++line_number;
    if (io::json_nesting_depth(line) > io::kMaxJsonDepth)
      throw InputError(fmt::format("{}: line {}: nested too deeply to be a metrics record", metrics_path, line_number));
    const json rec = json::parse(line, nullptr, false);
    if (rec.is_discarded()) continue;  // a torn last line of a killed run
    const FieldReader f{fmt::format("{}: line {}", metrics_path, line_number)};
    if (!rec.is_object()) f.wrong("record", "a JSON object", rec);
    if (rec.contains("split")) {
      if (!rec.at("split").is_string()) f.wrong("split", "a string", rec.at("split"));
      if (rec.at("split").get<std::string>() != "valid") continue;
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
          r.buckets.push_back(br);
        }
      }
      continue;
    }
    if (!rec.contains("step")) continue;
    const int64_t step = f.integer(rec, "step", 0);
    if (f.boolean(rec, "diverged")) {
      r.diverged = true;
      r.diverged_at = step;
      continue;
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
  const std::string summary_path = (dir / "summary.json").string();
  std::ifstream summary_file(summary_path);
  if (summary_file) {
    const json summary = json::parse(summary_file, nullptr, false);
    if (summary.is_object()) {  // anything else: a summary being written; the run is not finished
      const FieldReader f{summary_path};
      r.finished = true;
      if (f.boolean(summary, "diverged")) r.diverged = true;
      r.diverged_at = f.integer(summary, "diverged_at_step", r.diverged_at);
      r.wall_time_s = f.number(summary, "wall_time_s");
      r.threads = f.integer(summary, "threads", 0);
    }
  }
  if (!r.loss.empty()) {
    const size_t tail = std::max<size_t>(1, r.loss.size() / 10);
    double sum = 0;
    for (size_t i = r.loss.size() - tail; i < r.loss.size(); ++i) sum += r.loss[i];
    r.final_train_loss = sum / double(tail);
  }
  if (r.diverged) r.final_train_loss = NAN;
  return r;
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

Outcome classify(const RunResult& run, double chance) {
  if (run.diverged) return Outcome::diverged;
  if (!run.finished) return Outcome::unfinished;
  const double final_loss = run.final_train_loss;
  const double first = run.loss.empty() ? NAN : run.loss.front();
  if (!std::isfinite(final_loss)) return Outcome::diverged;
  if (std::isfinite(first) && final_loss > kBlowUpFactor * first) return Outcome::blew_up;
  if (std::isfinite(chance) && final_loss >= (1 - kChanceMargin) * chance) return Outcome::at_chance;
  return Outcome::learned;
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::unfinished: return "unfinished";
    case Outcome::diverged: return "diverged";
    case Outcome::blew_up: return "blew up";
    case Outcome::at_chance: return "at chance";
    case Outcome::learned: return "learned";
  }
  return "?";
}

std::vector<GroupSummary> summarize(const std::vector<RunResult>& results, double chance) {
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
    std::vector<double> train, valid, acc;
    std::map<std::pair<int64_t, int64_t>, std::vector<double>> buckets;
    for (const RunResult* r : g.runs) {
      g.finished += r->finished;
      switch (classify(*r, chance)) {
        case Outcome::diverged: ++g.diverged; break;
        case Outcome::blew_up: ++g.blew_up; break;
        case Outcome::at_chance: ++g.at_chance; break;
        case Outcome::learned: ++g.learned; break;
        case Outcome::unfinished: break;
      }
      if (r->diverged) continue;  // medians are over the seeds that did not diverge
      if (std::isfinite(r->final_train_loss)) train.push_back(r->final_train_loss);
      valid.push_back(r->final_valid_loss);
      acc.push_back(r->final_valid_accuracy);
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
    g.valid_loss = median(valid);
    g.valid_accuracy = median(acc);
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

std::string where(const GroupSummary& g, const ComparePlan& plan) {
  std::string out = plan.lrs.size() > 1 ? "lr " + detail::format_lr(g.lr) : "";
  if (plan.settings.size() > 1) out += (out.empty() ? "" : ", ") + g.setting;
  return out;
}

std::string num(double v) { return std::isfinite(v) ? (std::abs(v) >= 1e4 ? fmt::format("{:.2g}", v) : fmt::format("{:.3f}", v)) : "–"; }

}  // namespace

double most_different_lr(const ComparePlan& plan, const std::vector<GroupSummary>& groups, const std::string& setting) {
  double best_lr = plan.lrs.empty() ? 0 : plan.lrs.front(), best_spread = -1;
  for (double lr : plan.lrs) {
    double lo = INFINITY, hi = -INFINITY;
    for (const std::string& variant : plan.variants) {
      const GroupSummary* g = find(groups, variant, lr, setting);
      if (!g) continue;
      // A group with no finite loss (all diverged) counts as the worst possible.
      const double v = std::isfinite(g->train_loss) && g->train_loss > 0 ? std::log10(g->train_loss) : 40.0;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (hi - lo > best_spread) best_spread = hi - lo, best_lr = lr;
  }
  return best_lr;
}

std::vector<std::string> findings(const ComparePlan& plan, const std::vector<GroupSummary>& groups, double chance) {
  std::vector<std::string> out;
  int total = 0, learned = 0, at_chance = 0, blew_up = 0, diverged = 0, finished = 0;
  for (const GroupSummary& g : groups) {
    total += int(g.runs.size());
    learned += g.learned, at_chance += g.at_chance, blew_up += g.blew_up, diverged += g.diverged;
    finished += g.finished;
  }
  out.push_back(fmt::format("{} of {} runs finished: {} learned, {} stalled at chance, {} blew up, {} diverged{}.",
                            finished, total, learned, at_chance, blew_up, diverged,
                            std::isfinite(chance) ? fmt::format(" (chance loss {:.3f})", chance) : ""));
  // Where runs failed, by kind.
  for (const auto& [what, member] : {std::pair{"Stalled at chance", &GroupSummary::at_chance},
                                     std::pair{"Blew up (finite loss far above its start)", &GroupSummary::blew_up},
                                     std::pair{"Diverged (non-finite loss, stopped)", &GroupSummary::diverged}}) {
    std::string list;
    for (const GroupSummary& g : groups)
      if (g.*member > 0) {
        const std::string at = where(g, plan);
        list += fmt::format("{}{}{} ({}/{}{})", list.empty() ? "" : "; ", g.variant, at.empty() ? "" : " at " + at,
                            g.*member, g.runs.size(),
                            member == &GroupSummary::blew_up ? ", median final loss " + num(g.train_loss) : "");
      }
    if (!list.empty()) out.push_back(fmt::format("{}: {}.", what, list));
  }
  // The highest learning rate each variant tolerates.
  if (plan.lrs.size() > 1)
    for (const std::string& setting : plan.settings) {
      std::vector<std::pair<double, std::string>> tolerance;
      for (const std::string& variant : plan.variants) {
        double highest = 0;
        for (double lr : plan.lrs)
          if (const GroupSummary* g = find(groups, variant, lr, setting); g && 2 * g->learned > int(g->runs.size()))
            highest = std::max(highest, lr);
        tolerance.emplace_back(highest, variant);
      }
      std::stable_sort(tolerance.begin(), tolerance.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      std::string list;
      for (const auto& [lr, variant] : tolerance)
        list += fmt::format("{}{} {}", list.empty() ? "" : ", ", variant, lr > 0 ? detail::format_lr(lr) : "none");
      out.push_back(fmt::format("Highest learning rate at which most seeds learned{}: {}.",
                                plan.settings.size() > 1 ? " (" + setting + ")" : "", list));
    }
  // Differences larger than the spread over seeds.
  for (const std::string& setting : plan.settings)
    for (double lr : plan.lrs) {
      std::vector<const GroupSummary*> here;
      for (const std::string& variant : plan.variants)
        if (const GroupSummary* g = find(groups, variant, lr, setting)) here.push_back(g);
      const GroupSummary* best = nullptr;
      for (const GroupSummary* g : here)
        if (std::isfinite(g->train_loss) && (!best || g->train_loss < best->train_loss)) best = g;
      if (!best || here.size() < 2) continue;
      size_t seeds_in_best = 0;
      for (const RunResult* r : best->runs) seeds_in_best += !r->diverged && std::isfinite(r->final_train_loss);
      const std::string at = where(*best, plan);
      if (seeds_in_best < 2) {
        out.push_back(fmt::format("{}{}: lowest final train loss {} ({}); one seed, so no difference is tested "
                                  "against the spread over seeds.",
                                  at.empty() ? "All runs" : "At " + at, "", best->variant, num(best->train_loss)));
        continue;
      }
      std::string clear, within;
      for (const GroupSummary* g : here) {
        if (g == best) continue;
        const bool separated = !std::isfinite(g->train_loss_min) || g->train_loss_min > best->train_loss_max;
        (separated ? clear : within) += fmt::format("{}{} {}", (separated ? clear : within).empty() ? "" : ", ",
                                                   g->variant, g->diverged == int(g->runs.size()) ? "diverged"
                                                                                                   : num(g->train_loss));
      }
      out.push_back(fmt::format("{}: lowest final train loss {} {} (seeds {}–{}); above its seed range: {}; within it: {}.",
                                at.empty() ? "All runs" : "At " + at, best->variant, num(best->train_loss),
                                num(best->train_loss_min), num(best->train_loss_max), clear.empty() ? "no variant" : clear,
                                within.empty() ? "no variant" : within));
    }
  return out;
}

}  // namespace normlab::study
