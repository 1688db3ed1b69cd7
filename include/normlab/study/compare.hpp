#pragma once
// The LayerNorm study: a grid of training runs (normalization variant x learning rate x seed x
// depth x warmup), and the report that compares them.
//
// Compare config (docs/compare.md):
//   {"base": "reverse.json" | {...a run config...},   // a path is relative to this file
//    "set":  {"train.steps": 400, ...},                // overrides for every run (optional)
//    "grid": {"variants": ["none", "post-ln", "pre-ln", "rmsnorm", "batchnorm", "rezero", "dyt"],
//             "lr": [0.001, 0.003], "seeds": [0, 1, 2], "layers": [4], "warmup": [true, false]}}
// Every grid axis is optional (a missing axis keeps the base config's value).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace normlab::study {

// What each variant name sets in the run config.
struct Variant {
  std::string name;       // "pre-ln"
  std::string norm;       // model.norm
  std::string placement;  // model.placement
  std::string description;
};
const std::vector<Variant>& known_variants();

struct RunSpec {
  std::string name;  // directory name under DIR/runs/, e.g. "pre-ln_lr0.001_L4_warmup_s0"
  std::string variant;
  double lr = 0;
  int64_t layers = 0;
  bool warmup = true;
  uint64_t seed = 0;
  nlohmann::json config;  // the full run config for `normlab train`
};

struct ComparePlan {
  std::string source;           // the compare config's path, for messages
  nlohmann::json base;          // base run config after "set"
  std::vector<std::string> variants;
  std::vector<double> lrs;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> layers;
  std::vector<bool> warmups;
  std::vector<RunSpec> runs;    // the expanded grid, in a fixed order
};

// Reads and validates a compare config; every error is an InputError naming the file and key.
ComparePlan load_compare_plan(const std::string& path);

// What one finished (or diverged, or unfinished) run left in its directory.
struct BucketResult {
  int64_t min_len = 0, max_len = 0;
  bool beyond_train = false;
  double loss = 0, accuracy = 0;
  int64_t count = 0;
};
struct RunResult {
  RunSpec spec;
  bool finished = false;  // summary.json present
  bool diverged = false;
  int64_t diverged_at = -1;
  std::vector<double> steps, loss, grad_norm, accuracy;  // per training step
  double final_train_loss = NAN;                          // mean over the last 10% of steps
  double final_valid_loss = NAN, final_valid_accuracy = NAN;
  std::vector<BucketResult> buckets;                      // last evaluation
  std::vector<double> init_residual_rms, init_layer_grad_norms;  // first diagnostics record
  std::vector<double> end_residual_rms, end_layer_grad_norms;    // last diagnostics record
  double wall_time_s = NAN;
};

RunResult read_run(const RunSpec& spec, const std::string& run_dir);

// Writes DIR/report.html (self-contained, inline SVG), DIR/report.md and DIR/runs.csv.
void write_report(const ComparePlan& plan, const std::vector<RunResult>& results, const std::string& out_dir);

}  // namespace normlab::study
