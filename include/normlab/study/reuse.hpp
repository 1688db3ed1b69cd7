#pragma once
// Which existing runs of a compare output directory may be reused for the plan: a run is reused only
// when its resolved config and the content of its data files are the ones asked for.
#include <string>
#include <vector>

#include "normlab/study/plan.hpp"

namespace normlab::study {

// Keys whose value may differ between a run on disk and the run the grid asks for: they change what
// is printed or how often a checkpoint is written, never the numbers the report shows.
const std::vector<std::string>& reuse_ignored_keys();

// A run directory whose resolved config.json differs from what the grid now asks for, or whose
// data files' content differs from the one its data.json records.
struct ChangedRun {
  std::string name;
  std::vector<std::string> changes;  // "train.steps: 200 -> 100", in config key order, or the changed data files
  bool data = false;                 // the config is the same; the data changed
};

// The runs under out_dir/runs/ that have been started (a checkpoint or summary.json) with another
// config than the plan's, or on data files whose content has changed since (train/data_fingerprint.hpp).
// A run whose config.json or data.json is missing or unreadable counts as changed.
std::vector<ChangedRun> changed_runs(const ComparePlan& plan, const std::string& out_dir);

// "DIR/runs/NAME was trained with another config (k: a -> b, ...); N of M started runs differ"
// plus how to proceed; used by compare and compare --report-only.
std::string changed_runs_message(const std::vector<ChangedRun>& changed, const std::string& out_dir);

}  // namespace normlab::study
