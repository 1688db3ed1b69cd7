#pragma once
// The report's prose: the Answer paragraph and the Findings, computed from the runs' statistics.
#include <string>
#include <vector>

#include "normlab/study/plan.hpp"
#include "normlab/study/statistics.hpp"

namespace normlab::study {

// The Answer paragraph (sentences) and the Findings section: computed from the runs, never
// hand-written.
std::vector<std::string> answer(const ComparePlan& plan, const std::vector<GroupSummary>& groups);
std::vector<std::string> findings(const ComparePlan& plan, const std::vector<GroupSummary>& groups);

// The learning rate (per setting) at which the variants' held-out accuracies differ most.
double most_different_lr(const ComparePlan& plan, const std::vector<GroupSummary>& groups, const std::string& setting);

}  // namespace normlab::study
