// Runs summarized over seeds and the variants compared with the reference (statistics.hpp).
#include "normlab/study/statistics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common.hpp"
#include "normlab/study/search.hpp"

namespace normlab::study {

std::vector<GroupSummary> summarize(const std::vector<RunResult>& results) {
  std::vector<GroupSummary> groups;
  for (const RunResult& r : results) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const GroupSummary& g) {
      return g.variant == r.spec.variant && g.lr == r.spec.lr() && g.setting == r.spec.setting;
    });
    if (it == groups.end()) {
      groups.push_back({});
      it = groups.end() - 1;
      it->variant = r.spec.variant;
      it->lr = r.spec.lr();
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
        case Outcome::logit_divergence: ++g.logit_divergence; break;
        case Outcome::entropy_collapse: ++g.entropy_collapse; break;
        case Outcome::collapsed: ++g.collapsed; break;
        case Outcome::at_chance: ++g.at_chance; break;
        case Outcome::weak: ++g.weak; break;
        case Outcome::slow: ++g.slow; break;
        case Outcome::learned: ++g.learned; break;
        case Outcome::solved: ++g.solved; break;
        case Outcome::unfinished:
        case Outcome::not_evaluated: break;
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

// Each seed's value of `metric` in a group, keyed by seed.
std::map<uint64_t, const RunResult*> by_seed(const GroupSummary& g) {
  std::map<uint64_t, const RunResult*> out;
  for (const RunResult* r : g.runs)
    if (r->finished || r->diverged) out[r->spec.seed()] = r;
  return out;
}

// Two runs saw the same data order and validation set: same task, seed and batch size.
bool same_data(const RunResult& a, const RunResult& b) {
  const train::RunConfig& ca = a.spec.config;
  const train::RunConfig& cb = b.spec.config;
  return ca.task == cb.task && ca.train.seed == cb.train.seed && ca.train.batch_size == cb.train.batch_size;
}

}  // namespace

std::string variant_kind(const ComparePlan& plan, const std::string& label) {
  if (find_variant(label)) return label;
  std::set<std::string> kinds;
  for (const RunSpec& r : plan.runs)
    if (r.variant == label) kinds.insert(variant_of(r.config.model));
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
  for (const auto& [metric, into] :
       {std::pair{trained_acc, &c.trained_accuracy}, std::pair{unseen_acc, &c.unseen_accuracy},
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

const GroupSummary* find_group(const std::vector<GroupSummary>& groups, const std::string& variant, double lr,
                               const std::string& setting) {
  for (const GroupSummary& g : groups)
    if (g.variant == variant && g.lr == lr && g.setting == setting) return &g;
  return nullptr;
}

std::vector<Comparison> compare_variants(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  std::vector<Comparison> out;
  const std::string reference = reference_variant(plan);
  for (const std::string& setting : plan.settings)
    for (double lr : plan.lrs) {
      const GroupSummary* ref = find_group(groups, reference, lr, setting);
      if (!ref) continue;
      const auto ref_runs = by_seed(*ref);
      for (const std::string& variant : plan.variants) {
        if (variant == reference) continue;
        const GroupSummary* g = find_group(groups, variant, lr, setting);
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
  return fmt::format("{} by {} ({})", d.mean > 0 ? "higher" : "lower", signed_value(std::abs(d.mean)).substr(1),
                     interval);
}

std::vector<std::vector<EndpointTest>> test_comparisons(const std::vector<Comparison>& comparisons,
                                                        const EquivalenceMargins& margins) {
  std::vector<std::vector<EndpointTest>> out;
  std::vector<double> family;  // every difference and equivalence p-value, in order
  for (const Comparison& c : comparisons) {
    std::vector<EndpointTest> tests;
    for (const auto& [name, interval, margin] : {std::tuple{"held-out loss", &c.trained_loss, margins.loss},
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
  const double family_size =
      double(std::count_if(family.begin(), family.end(), [](double p) { return !std::isnan(p); }));
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

std::string seeds_needed_words(size_t seeds_needed, bool paired) {
  const char* what = paired ? "pairs" : "seeds per variant";
  if (seeds_needed > kMaxSeedsStated) return fmt::format("more than {} {}", kMaxSeedsStated, what);
  return fmt::format("about {} {}", seeds_needed, what);
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
                             : fmt::format("{} would show {} (80% power at the observed spread, Holm's "
                                           "strictest level)",
                                           seeds_needed_words(t.seeds_needed, t.paired),
                                           t.seeds_for_equivalence ? "equivalence within " + margin : "a difference"));
  }
  return difference;
}

std::string direction_text(const EndpointTest& t, const std::string& variant, const std::string& reference) {
  const Interval& d = t.difference;
  if (t.verdict == Verdict::no_data || d.n == 0 || !std::isfinite(d.mean)) return "no test";
  const bool loss = t.endpoint == "held-out loss";
  const std::string unit = loss ? " nats" : "";
  // Name the better one: lower loss, higher accuracy. The interval is the named one's minus the other's.
  const bool variant_better = loss ? d.mean < 0 : d.mean > 0;
  const std::string& named = variant_better ? variant : reference;
  const double sign = variant_better ? 1 : -1;
  const double lo = sign > 0 ? d.low : -d.high, hi = sign > 0 ? d.high : -d.low;
  const char* way = loss ? "lower" : "higher";
  const std::string pairs = t.paired ? "pairs" : "seeds (unpaired)";
  const std::string lead = signed_value(std::abs(d.mean)).substr(1);  // "0.180", "3.1e-04", "1.11e+04"
  std::string estimate;
  if (d.mean == 0 && (!d.has_interval() || d.standard_error == 0))
    estimate = fmt::format("identical in all {} {}", d.n, pairs);
  else if (d.mean == 0)
    estimate = fmt::format("no difference in the mean [{}, {}]{}", signed_value(d.low), signed_value(d.high), unit);
  else if (!d.has_interval())
    estimate = fmt::format("{} {} by {}{} in {} {}, no interval", named, way, lead, unit, d.n, pairs);
  else if (d.standard_error == 0)
    estimate = fmt::format("{} {} by {}{} in all {} {}", named, way, lead, unit, d.n, pairs);
  else estimate = fmt::format("{} {} by {}{} [{}, {}]", named, way, lead, unit, signed_value(lo), signed_value(hi));
  switch (t.verdict) {
    case Verdict::differs: return fmt::format("{}; differs (Holm p {:.2g})", estimate, t.holm_difference);
    case Verdict::equivalent:
      return fmt::format("{}; equivalent within ±{:g} (Holm p {:.2g})", estimate, t.margin, t.holm_equivalence);
    case Verdict::undecided:
      return t.seeds_needed > 0 ? fmt::format("{}; undecided ({} would decide)", estimate,
                                              seeds_needed_words(t.seeds_needed, t.paired))
                                : fmt::format("{}; undecided (more {} would not show equivalence within ±{:g})",
                                              estimate, t.paired ? "pairs" : "seeds", t.margin);
    case Verdict::no_data: break;
  }
  return "no test";
}

std::vector<double> learned_lrs(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                                const std::string& variant, const std::string& setting) {
  std::vector<double> out;
  for (double lr : plan.lrs)
    if (const GroupSummary* g = find_group(groups, variant, lr, setting); g && g->mostly_learned()) out.push_back(lr);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace normlab::study
