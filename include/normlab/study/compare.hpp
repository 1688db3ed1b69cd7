#pragma once
// The LayerNorm study: a grid of training runs (normalization variant x learning rate x seed x
// depth x warmup x any other config key), and which existing runs may be reused for it.
//
// Compare config (docs/compare.md):
//   {"base": "reverse.json" | {...a run config...},   // a path is relative to this file
//    "set":  {"train.steps": 400, ...},                // overrides for every run (optional)
//    "grid": {"variants": ["none", "post-ln", "pre-ln", "rmsnorm", "batchnorm", "rezero", "dyt"],
//             "lr": [0.001, 0.003], "seeds": [0, 1, 2], "layers": [4], "warmup": [true, false],
//             "train.batch_size": [4, 32]},            // any "section.key" is an axis too
//    "search": {"lr": {"from": 0.001, "to": 0.3, "points": 5, "rounds": 2}}}  // instead of grid.lr
// Every grid axis is optional (a missing axis keeps the base config's value). "base" may be another
// compare config: that study with this file's set/grid/search keys over it (docs/compare.md).
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "normlab/study/report.hpp"

namespace normlab::study {

// Reads and validates a compare config; every error is an InputError naming the file and key.
// A learning-rate search expands round 0, then each later round that the finished runs in
// out_dir/runs/ determine (none without out_dir); plan.search.blocks says where each one waits.
ComparePlan load_compare_plan(const std::string& path, const std::string& out_dir = "");

// Whether `--shard I/K` trains plan.runs[run_index]: index I modulo K for a grid and a search's
// round 0; a later round's run by its name's hash, so that every shard agrees while the rounds grow.
bool in_shard(const ComparePlan& plan, size_t run_index, size_t shard_index, size_t shard_count);

// What a JSON config file is, judged by its top-level keys, so that a command given the other kind
// can say so before it reports a confusing key error.
enum class ConfigKind { run, compare, unknown };
ConfigKind config_kind(const std::string& path);

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
