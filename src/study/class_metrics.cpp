#include "normlab/study/class_metrics.hpp"

#include <fmt/format.h>

#include <cmath>

#include "normlab/data/task.hpp"
#include "normlab/stats.hpp"
#include "normlab/train/class_metrics.hpp"

namespace normlab::study {

namespace {

// The trained-length macro-F1 of each finished seed of a cell (NaN: not recorded).
std::vector<double> seed_macro_f1(const GroupSummary& g) {
  std::vector<double> out;
  for (const RunResult* r : g.runs)
    if (r->finished && !r->diverged && !r->evals.empty()) out.push_back(r->final_trained().macro_f1);
  return out;
}

double finite_mean(const std::vector<double>& values) {
  double sum = 0;
  size_t n = 0;
  for (double v : values)
    if (std::isfinite(v)) sum += v, ++n;
  return n ? sum / double(n) : NAN;
}

std::string label_of(const std::vector<std::string>& labels, int32_t k) {
  return size_t(k) < labels.size() ? labels[size_t(k)] : fmt::format("{}", k);
}

}  // namespace

bool judged_by_macro_f1(const RunResult& run) {
  return data::is_data_task(run.spec.config.task.name) && !run.evals.empty() &&
         std::isfinite(run.final_trained().macro_f1);
}

double solved_score(const RunResult& run) {
  const double a = run.final_trained().accuracy;
  return judged_by_macro_f1(run) ? std::min(a, run.final_trained().macro_f1) : a;
}

std::optional<ClassMetricsTable> class_metrics_table(const ComparePlan& plan, const std::vector<GroupSummary>& groups) {
  ClassMetricsTable table;
  table.title = "Per class (own data)";
  table.header = {"variant", "cell", "macro-F1 (95% CI)", "target", "recall", "F1"};
  std::vector<std::string> predicted;  // the predicted-class columns, from the first matrix
  for (const std::string& variant : plan.variants) {
    const GroupSummary* best = nullptr;
    double best_f1 = NAN;
    for (const GroupSummary& g : groups) {
      if (g.variant != variant || g.runs.empty() || !judged_by_macro_f1(*g.runs.front())) continue;
      const double f1 = finite_mean(seed_macro_f1(g));
      if (std::isfinite(f1) && (!best || f1 > best_f1)) best = &g, best_f1 = f1;
    }
    if (!best) continue;
    train::Confusion sum;
    std::vector<std::string> labels;
    for (const RunResult* r : best->runs) {
      if (!r->finished || r->diverged || r->evals.empty() || r->evals.back().trained_confusion.empty()) continue;
      if (sum.labels != 0 && sum.labels != r->evals.back().trained_confusion.labels) continue;
      sum.merge(r->evals.back().trained_confusion);
      if (labels.empty()) labels = r->evals.back().labels;
    }
    if (sum.empty()) continue;
    if (predicted.empty()) {
      for (int32_t k = 0; k < sum.labels; ++k) predicted.push_back("→ " + label_of(labels, k));
      table.header.insert(table.header.end(), predicted.begin(), predicted.end());
    }
    const Interval f1 = t_interval(seed_macro_f1(*best));
    const std::string cell = fmt::format("lr {:g}{}", best->lr, best->setting.empty() ? "" : ", " + best->setting);
    const std::string f1_text = f1.has_interval()
                                    ? fmt::format("{:.3f} ({:.3f} to {:.3f}, {} seeds)", f1.mean, f1.low, f1.high, f1.n)
                                    : fmt::format("{:.3f} ({} seed)", f1.mean, f1.n);
    const std::vector<train::ClassMetrics> per_class = train::class_metrics(sum);
    bool first = true;
    for (int32_t t = 0; t < sum.labels; ++t) {
      if (per_class[size_t(t)].support == 0) continue;
      std::vector<std::string> row = {first ? variant : "",
                                      first ? cell : "",
                                      first ? f1_text : "",
                                      label_of(labels, t),
                                      fmt::format("{:.3f}", per_class[size_t(t)].recall),
                                      fmt::format("{:.3f}", per_class[size_t(t)].f1)};
      for (int32_t p = 0; p < sum.labels && size_t(p) < predicted.size(); ++p)
        row.push_back(fmt::format("{}", sum.at(t, p)));
      table.rows.push_back(std::move(row));
      first = false;
    }
  }
  if (table.rows.empty()) return std::nullopt;
  table.text = fmt::format(
      "Held-out data of trained lengths, last evaluation. Each variant at the cell where its mean macro-F1 is highest; "
      "the counts are summed over that cell's seeds (rows: target, columns: the model's answer). An own-data run is "
      "solved only when both its accuracy and its macro-F1 reach {:.2f}: macro-F1 gives every class the same weight, "
      "so errors gathered in a few classes (a tagger that ignores context) are not averaged away as in accuracy.",
      kSolvedAccuracy);
  return table;
}

}  // namespace normlab::study
