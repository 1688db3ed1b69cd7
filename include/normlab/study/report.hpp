#pragma once
// The comparison report: what a set of runs left in their directories, summarized over seeds,
// classified (learned / at chance / blew up / diverged), and written as report.html (inline SVG),
// report.md, runs.csv and summary.json. The runs come from a compare grid (compare.hpp) or from
// any run directories (`normlab report`).
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace normlab::study {

// What each variant name sets in the run config.
struct Variant {
  std::string name;       // "pre-ln"
  std::string norm;       // model.norm
  std::string placement;  // model.placement
  std::string description;
  std::string color;      // the variant's colour in every report
};
const std::vector<Variant>& known_variants();
const Variant* find_variant(const std::string& name);
// The variant a (norm, placement) pair is, e.g. ("layernorm", "pre") -> "pre-ln"; "" if none.
std::string variant_of(const std::string& norm, const std::string& placement);

// The residual block a model config trains, e.g. "x = x + f(LN(x))" (pre-ln, final LN noted).
std::string block_formula(const std::string& norm, const std::string& placement, bool final_norm);

struct RunSpec {
  std::string name;     // directory name, e.g. "pre-ln_lr0.001_L4_warmup_s0"
  std::string variant;  // the series this run belongs to (a variant name or a label)
  double lr = 0;
  int64_t layers = 0;
  bool warmup = true;
  uint64_t seed = 0;
  std::vector<std::pair<std::string, std::string>> extra;  // other grid axes: key, value as in the name
  std::string setting;  // every axis but variant, lr and seed, e.g. "4 layers, no warmup, train.batch_size=4"
  nlohmann::json config;  // the full run config
  std::string dir;        // the run directory
};

struct ComparePlan {
  std::string source;  // the compare config's path (or the run directories), for messages
  std::string title = "normlab compare report";
  nlohmann::json base;  // base run config after "set" (for `report`: the first run's config)
  std::vector<std::string> variants;
  std::vector<double> lrs;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> layers;
  std::vector<bool> warmups;
  std::vector<std::pair<std::string, std::vector<std::string>>> extra_axes;  // "train.batch_size": {"4", "32"}
  std::vector<std::string> settings;  // distinct RunSpec::setting values, in grid order
  std::vector<RunSpec> runs;          // the expanded grid, in a fixed order
};

// `normlab report RUN_DIR...`: one RunSpec per run directory (a compare output directory stands for
// its runs/). labels: {label, run dir}; runs without one are labelled by the config keys that differ
// between the runs. Runs of different tasks are refused (InputError naming two of them).
ComparePlan plan_from_run_dirs(const std::vector<std::string>& dirs,
                               const std::vector<std::pair<std::string, std::string>>& labels);

// True if DIR looks like a compare output directory (a runs/ subdirectory, no checkpoint of its own).
bool is_compare_dir(const std::string& dir);
// The run directories under a compare output directory, sorted by name.
std::vector<std::string> compare_dir_runs(const std::string& dir);

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
  int64_t threads = 0;    // summary.json's thread count (0: unknown)
  std::vector<double> steps, loss, grad_norm, accuracy;  // per training step
  double final_train_loss = NAN;                          // mean over the last 10% of steps
  double final_valid_loss = NAN, final_valid_accuracy = NAN;
  std::vector<BucketResult> buckets;                      // last evaluation
  std::vector<double> init_residual_rms, init_layer_grad_norms;  // first diagnostics record
  std::vector<double> end_residual_rms, end_layer_grad_norms;    // last diagnostics record
  double wall_time_s = NAN;
};

// Reads metrics.jsonl and summary.json. A line that is not JSON (a torn last line) is skipped; a
// field of the wrong type is an InputError naming the file, line and field.
RunResult read_run(const RunSpec& spec, const std::string& run_dir);

// The loss of guessing uniformly: ln(number of classes) of the config's task; NaN when unknown
// (mlm_text: its classes come from the data).
double chance_loss(const nlohmann::json& run_config);

// How a run ended (docs/compare.md defines each word and its threshold).
enum class Outcome { unfinished, diverged, blew_up, at_chance, learned };
inline constexpr double kChanceMargin = 0.05;  // at chance: final train loss >= (1 - margin) x chance
inline constexpr double kBlowUpFactor = 2.0;   // blew up: final train loss > factor x first-step loss
Outcome classify(const RunResult& run, double chance);
const char* outcome_name(Outcome outcome);

// The runs that differ only by seed, and what they have in common.
struct GroupSummary {
  std::string variant, setting;
  double lr = 0;
  std::vector<const RunResult*> runs;
  int finished = 0, diverged = 0, blew_up = 0, at_chance = 0, learned = 0;
  // Over the seeds that did not diverge (NaN if none):
  double train_loss = NAN, train_loss_min = NAN, train_loss_max = NAN;
  double valid_loss = NAN, valid_accuracy = NAN;
  std::map<std::pair<int64_t, int64_t>, double> bucket_accuracy;  // median per length bucket
  std::map<std::pair<int64_t, int64_t>, bool> bucket_beyond_train;
};
std::vector<GroupSummary> summarize(const std::vector<RunResult>& results, double chance);

// The Findings section: lines computed from the summaries, never hand-written.
std::vector<std::string> findings(const ComparePlan& plan, const std::vector<GroupSummary>& groups, double chance);

// The learning rate (per setting) at which the variants' final losses differ most.
double most_different_lr(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                         const std::string& setting);


// Thrown by write_report when stop_requested() turns true while it draws.
struct ReportStopped {};

// Writes DIR/report.html (self-contained, inline SVG), DIR/report.md, DIR/runs.csv and
// DIR/summary.json. stop_requested is polled between charts.
void write_report(const ComparePlan& plan, const std::vector<RunResult>& results, const std::string& out_dir,
                  const std::function<bool()>& stop_requested = {});

}  // namespace normlab::study
