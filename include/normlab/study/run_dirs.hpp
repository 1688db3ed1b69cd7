#pragma once
// Run directories as a plan: `normlab report RUN_DIR...` over runs trained by hand, a folder of
// them, or a compare output directory (its runs/).
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "normlab/study/plan.hpp"

namespace normlab::study {

// `normlab report RUN_DIR...`: one RunSpec per run directory (a compare output directory stands for
// its runs/). labels: {label, run dir}; runs without one are labelled by the config keys that differ
// between the runs. Runs of different tasks are refused (InputError naming two of them).
ComparePlan plan_from_run_dirs(const std::vector<std::string>& dirs,
                               const std::vector<std::pair<std::string, std::string>>& labels);

// True if DIR looks like a compare output directory (a runs/ subdirectory, no checkpoint of its own).
bool is_compare_dir(const std::string& dir);
// The run directories under a compare output directory, sorted by name.
std::vector<std::string> compare_dir_runs(const std::string& dir);
// The subdirectories of DIR that are not hidden and for which keep(path) holds, sorted by name:
// the runs of a folder of run directories, each caller saying what makes one (report: a
// config.json; serve: any file a run leaves, and a path that stays inside what it serves).
std::vector<std::string> run_subdirectories(const std::string& dir,
                                            const std::function<bool(const std::string&)>& keep);

}  // namespace normlab::study
