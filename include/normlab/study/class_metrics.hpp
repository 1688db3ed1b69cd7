#pragma once
// Own-data runs judged per class. A data-defined task (sequence_classification,
// token_classification) has the user's labels, rarely balanced and often with errors gathered in a
// few of them: a tagger that ignores the word before it is right on most tokens. Such a run is
// "solved" only when both its trained-length accuracy and its macro-F1 reach kSolvedAccuracy, and
// the report draws each variant's confusion matrix (train/class_metrics.hpp defines the metrics).
#include <optional>
#include <string>
#include <vector>

#include "normlab/study/plan.hpp"
#include "normlab/study/results.hpp"
#include "normlab/study/statistics.hpp"

namespace normlab::study {

// True for a run of a data-defined task whose records carry per-class metrics.
bool judged_by_macro_f1(const RunResult& run);
// The score "solved" is measured against: min(accuracy, macro-F1) of the last evaluation's trained
// lengths for an own-data run, its accuracy otherwise.
double solved_score(const RunResult& run);

// The report section: per variant, at the cell (learning rate, setting) with its highest mean
// trained-length macro-F1, the confusion matrix summed over that cell's seeds, each target class's
// recall and F1, and the macro-F1 over seeds (mean, 95% t interval). std::nullopt when no run is an
// own-data run.
struct ClassMetricsTable {
  std::string title, text;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
std::optional<ClassMetricsTable> class_metrics_table(const ComparePlan& plan, const std::vector<GroupSummary>& groups);

}  // namespace normlab::study
