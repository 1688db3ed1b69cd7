#pragma once
// The comparison report: what a set of runs left in their directories, summarized over seeds,
// classified (solved / learned / slow / weak / at chance / collapsed / exploded / diverged), and written as report.html (inline SVG),
// report.md, runs.csv and summary.json. The runs come from a compare grid (compare.hpp) or from
// any run directories (`normlab report`).
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "normlab/stats.hpp"
#include "normlab/study/search_spec.hpp"
#include "normlab/train/class_metrics.hpp"

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

// The margins within which a difference counts as none (compare config key "equivalence"): held-out
// loss in nats, accuracy AUC and final accuracy as fractions.
struct EquivalenceMargins {
  double loss = 0.05, accuracy_auc = 0.02, accuracy = 0.02;
  bool from_config = false;  // false: the defaults above
};

struct ComparePlan {
  std::string source;  // the compare config's path (or the run directories), for messages
  std::string title = "normlab compare report";
  EquivalenceMargins equivalence;
  nlohmann::json base;  // base run config after "set" (for `report`: the first run's config)
  std::vector<std::string> variants;
  std::vector<double> lrs;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> layers;
  std::vector<bool> warmups;
  std::vector<std::pair<std::string, std::vector<std::string>>> extra_axes;  // "train.batch_size": {"4", "32"}
  std::vector<std::string> settings;  // distinct RunSpec::setting values, in grid order
  std::vector<RunSpec> runs;          // the expanded grid, in a fixed order
  LrSearchSpec search;                // the learning-rate search, when the config has one (search.hpp)
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
// The subdirectories of DIR that are not hidden and for which keep(path) holds, sorted by name:
// the runs of a folder of run directories, each caller saying what makes one (report: a
// config.json; serve: any file a run leaves, and a path that stays inside what it serves).
std::vector<std::string> run_subdirectories(const std::string& dir,
                                            const std::function<bool(const std::string&)>& keep);

// What one finished (or diverged, or unfinished) run left in its directory.
struct BucketResult {
  int64_t min_len = 0, max_len = 0;
  bool beyond_train = false;
  double loss = 0, accuracy = 0;
  int64_t count = 0;    // sequences
  int64_t targets = 0;  // predictions scored (tokens, or one per sequence)
};
// Held-out metrics of one length group at one evaluation (eval mode): target-weighted over its
// buckets. NaN when the group had no targets.
struct HeldOut {
  double loss = NAN, accuracy = NAN;
  int64_t targets = 0;
  double macro_f1 = NAN;  // records with per-class metrics (train/class_metrics.hpp); NaN otherwise
};
// Trained lengths (unseen = false) or unseen lengths of an evaluation, from its buckets.
HeldOut held_out_of(const std::vector<BucketResult>& buckets, bool unseen);
// One validation record: trained lengths (up to task.max_len), unseen lengths (beyond it), all.
struct EvalPoint {
  int64_t step = 0;
  HeldOut trained, unseen, all;
  double top_prediction_share = NAN;  // trained lengths: share of the most frequent prediction (NaN: not logged)
  train::Confusion trained_confusion{};  // trained lengths: targets against answers (empty: not logged)
  std::vector<std::string> labels{};   // class names by id (empty: not logged)
};
// One diagnostics step record: per block, the residual stream's RMS after it and its parameters'
// gradient norm.
struct Diagnostics {
  int64_t step = 0;
  std::vector<double> residual_rms, layer_grad_norms;  // (layers)
};
// What guessing achieves on the task's held-out data.
struct Baseline {
  double uniform_loss = NAN, uniform_accuracy = NAN;  // ln K and 1/K over the K labels
  double majority_accuracy = NAN;  // always the training data's most frequent label (trained lengths)
  // The accuracy "at chance" is measured against: the better of the two guesses (0 if unknown).
  double chance_accuracy() const;
};
struct RunResult {
  RunSpec spec;
  bool finished = false;  // summary.json present
  bool diverged = false;
  int64_t diverged_at = -1;
  int64_t threads = 0;    // summary.json's thread count (0: unknown)
  std::vector<double> steps, loss, grad_norm, accuracy;  // per training step
  double final_train_loss = NAN;                          // mean over the last 10% of steps
  double final_valid_loss = NAN, final_valid_accuracy = NAN;  // last evaluation, every length
  std::vector<BucketResult> buckets;                      // last evaluation
  std::vector<EvalPoint> evals;                           // every evaluation, in step order
  std::vector<Diagnostics> diagnostics;                   // every diagnostics record, in step order
  int64_t planned_steps = 0;                              // the config's train.steps (0: unknown)
  Baseline baseline;
  std::vector<double> init_residual_rms, init_layer_grad_norms;  // first diagnostics record
  std::vector<double> end_residual_rms, end_layer_grad_norms;    // last diagnostics record
  double wall_time_s = NAN;

  // The last evaluation's trained / unseen lengths (NaN fields when there was none).
  HeldOut final_trained() const { return evals.empty() ? HeldOut{} : evals.back().trained; }
  HeldOut final_unseen() const { return evals.empty() ? HeldOut{} : evals.back().unseen; }
  // The held-out trained-length accuracy a run is judged by: a diverged run (no usable model)
  // counts as the uniform guess.
  double judged_accuracy() const;
  double judged_unseen_accuracy() const;  // the same for unseen lengths
  double first_train_loss() const { return loss.empty() ? NAN : loss.front(); }
  double peak_grad_norm() const;  // the largest finite global gradient norm (NaN if none)
  int64_t loss_spikes() const;    // see kSpikeFactor
  int64_t steps_to_solve() const;  // first evaluation step with trained accuracy >= kSolvedAccuracy; -1: never
  // The area under the held-out trained-length accuracy curve over steps, normalised to [0, 1]:
  // trapezoids between evaluations from the first evaluation to the planned last step, divided by
  // that span (a diverged run scores the uniform guess from its last evaluation on; a finished run
  // holds its last value). Does not saturate the way the final accuracy does: it rewards learning
  // early. NaN with no evaluation.
  double accuracy_auc() const;
};

// Reads metrics.jsonl and summary.json. A torn last line (a record's start without its newline) is
// skipped; any other line that is not JSON, a field of the wrong type, or a file that exists but
// cannot be read is an InputError naming the file (and line and field). Trained / unseen
// metrics come from the record's "trained"/"unseen" objects when present, else from its buckets.
RunResult read_run(const RunSpec& spec, const std::string& run_dir);

// The loss of guessing uniformly: ln(number of classes) of the config's built-in task; NaN when
// unknown (data-defined classes; the evaluation records carry them then).
double chance_loss(const nlohmann::json& run_config);

// How a run ended and, when it did not learn, how it failed: judged on held-out data of trained
// lengths (eval mode) and the run's own diagnostics. docs/compare.md defines each word and the
// order of precedence (the order classify tests them in):
//   unfinished, diverged, not evaluated, exploded (by loss), solved, slow, learned, exploded (by
//   residual RMS), collapsed, weak, at chance.
// c = Baseline::chance_accuracy(), a = trained accuracy at the last evaluation.
enum class Outcome { unfinished, not_evaluated, diverged, exploded, collapsed, at_chance, weak, slow, learned, solved };
inline constexpr double kSolvedAccuracy = 0.95;  // solved: a >= 0.95
inline constexpr double kLearnedShare = 0.25;    // learned: a >= c + 0.25 (1 - c)
inline constexpr double kChanceShare = 0.05;     // at chance: a < c + 0.05 (1 - c); weak: between
inline constexpr double kBlowUpFactor = 2.0;     // exploded: held-out loss > 2 ln K (worse than guessing)
inline constexpr double kExplodeRmsFactor = 100.0;  // exploded: a block's residual RMS > 100x its first value
// collapsed: the early blocks' (the first half's) largest gradient norm < 1e-2 x the last block's
// at the last diagnostics step, with a < c + 0.05 (1 - c) or predictions constant (>= 0.9 of them
// the same label). In the demo grid the collapsed post-LN runs end at 1e-5..6e-3, every other run
// at >= 0.6: the threshold sits two decades from both.
inline constexpr double kCollapseGradRatio = 1e-2;
inline constexpr double kConstantPredictionShare = 0.9;
// slow: short of solved, a >= c + 0.05 (1 - c), and the held-out loss fell at each of the last
// 3 evaluations and by >= 5% over them: still improving when the budget ended.
inline constexpr size_t kSlowEvaluations = 3;
inline constexpr double kSlowDrop = 0.05;
inline constexpr double kSpikeFactor = 2.0;      // a loss spike: loss > 2x the median of the previous
inline constexpr size_t kSpikeWindow = 20;       //   20 steps and more than 0.05x the first step's loss
inline constexpr double kSpikeMinRise = 0.05;    //   above it; consecutive spike steps count once
inline constexpr size_t kMinSeeds = 5;           // fewer seeds in a cell: the report warns
Outcome classify(const RunResult& run);
const char* outcome_name(Outcome outcome);
// Learned for "most seeds", stable ranges and boundaries: learned, solved, or slow (above chance
// and still improving at the end: short of budget, not unstable).
inline bool has_learned(Outcome o) { return o == Outcome::learned || o == Outcome::solved || o == Outcome::slow; }

// How a group of runs (usually one cell's seeds) ended, with the evidence from their diagnostics,
// one clause per outcome that is not learned / solved, e.g. "collapsed in 5/5 — blocks 0–2
// gradient norms 1e-07–1e-06 by step 100 (block 5: 0.04)", "slow in 3/3 — held-out loss still
// falling, 1.21 → 1.05 over steps 400–600". "" when every run learned.
std::string describe_failures(const std::vector<const RunResult*>& runs);
// The evidence for one run's outcome ("" for learned / solved / unfinished).
std::string outcome_evidence(const RunResult& run);

// The runs that differ only by seed, and what they have in common.
struct GroupSummary {
  std::string variant, setting;
  double lr = 0;
  std::vector<const RunResult*> runs;
  int finished = 0, diverged = 0, exploded = 0, collapsed = 0, at_chance = 0, weak = 0, slow = 0, learned = 0,
      solved = 0;
  int learned_or_solved() const { return learned + solved + slow; }  // has_learned()
  // "Most seeds learned": strictly more than half of the cell's seeds (half is not most).
  bool mostly_learned() const { return 2 * learned_or_solved() > int(runs.size()); }
  // Mean and 95% t interval over seeds; accuracies count a diverged seed as the uniform guess,
  // losses leave it out.
  Interval trained_accuracy, trained_loss, unseen_accuracy, unseen_loss;
  Interval accuracy_auc;  // RunResult::accuracy_auc over seeds (a diverged seed included)
  // Over the seeds that did not diverge (NaN if none):
  double train_loss = NAN, train_loss_min = NAN, train_loss_max = NAN;
  double steps_to_solve = NAN;  // median over the seeds that reached it
  int reached_solve = 0;
  double loss_spikes = NAN;     // mean per seed
  double peak_grad_norm = NAN;  // median over seeds
  std::map<std::pair<int64_t, int64_t>, double> bucket_accuracy;  // median per length bucket
  std::map<std::pair<int64_t, int64_t>, bool> bucket_beyond_train;
};
std::vector<GroupSummary> summarize(const std::vector<RunResult>& results);

// What a series is: its name when it is a known variant, else the one variant all its runs are
// (a `report` label such as "model.norm=none"), else "".
std::string variant_kind(const ComparePlan& plan, const std::string& label);
// The variant the others are compared with: pre-ln, else post-ln, else the first one.
std::string reference_variant(const ComparePlan& plan);

// A paired comparison of one variant with the reference at one (learning rate, setting): the
// per-seed differences variant - reference. Paired when both runs of a seed saw the same data
// (same task section, seed and batch size), else Welch's unpaired interval.
struct Comparison {
  std::string variant, reference, setting;
  double lr = 0;
  bool paired = true;
  Interval trained_accuracy, unseen_accuracy;
  Interval trained_loss;  // held-out loss on trained lengths (seeds that did not diverge)
  Interval accuracy_auc;  // RunResult::accuracy_auc
  bool accuracy_ceiling = false;  // every seed of both at accuracy 1: accuracy cannot tell them apart
};
std::vector<Comparison> compare_variants(const ComparePlan& plan, const std::vector<GroupSummary>& groups);
// "higher by 0.12 (95% CI +0.05 to +0.19, 5 pairs)", "identical in all 5 pairs (+0.000)", "the same
// +0.010 in all 5 pairs", or "+0.004 (95% CI -0.010 to +0.018, 5 pairs)" when the interval holds 0.
std::string describe_difference(const Interval& d, bool paired);

// The three words of a comparison on one endpoint, after Holm's correction over the report's
// family of tests (docs/compare.md): differs (the difference test rejects "no difference" and the
// difference is not within the margin), equivalent within +-margin (two one-sided tests reject
// "|difference| >= margin"), undecided (neither; with the seeds a decision would need).
enum class Verdict { differs, equivalent, undecided, no_data };
struct EndpointTest {
  std::string endpoint;  // "held-out loss", "accuracy AUC", "accuracy"
  double margin = 0;
  Interval difference;
  bool paired = true;
  double p_difference = NAN, p_equivalence = NAN;        // unadjusted
  double holm_difference = NAN, holm_equivalence = NAN;  // Holm-adjusted over the family
  Verdict verdict = Verdict::no_data;
  size_t seeds_needed = 0;  // undecided: pairs to decide (0: no number would, or not undecided)
  bool seeds_for_equivalence = true;  // what seeds_needed would show: equivalence, else a difference
};
// Every comparison's tests on the trained-length endpoints held-out loss, accuracy AUC and final
// accuracy, one family Holm-adjusted at alpha 0.05; [i][k] belongs to comparisons[i], endpoint k.
std::vector<std::vector<EndpointTest>> test_comparisons(const std::vector<Comparison>& comparisons,
                                                        const EquivalenceMargins& margins);
// "equivalent within ±0.05 (−0.012, 90% CI −0.030 to +0.006, Holm p 0.004)" and the like.
std::string describe_test(const EndpointTest& test);

// The grid learning rates at which most seeds of a variant learned, per setting (ascending).
std::vector<double> learned_lrs(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                                const std::string& variant, const std::string& setting);

// The Answer paragraph (sentences) and the Findings section: computed from the runs, never
// hand-written.
std::vector<std::string> answer(const ComparePlan& plan, const std::vector<GroupSummary>& groups);
std::vector<std::string> findings(const ComparePlan& plan, const std::vector<GroupSummary>& groups);

// The learning rate (per setting) at which the variants' held-out accuracies differ most.
double most_different_lr(const ComparePlan& plan, const std::vector<GroupSummary>& groups,
                         const std::string& setting);


// The variable-length lesson (report section "BatchNorm and its batch"): the same trained
// checkpoints evaluated four ways. Drawn when the grid has BatchNorm and a LayerNorm reference.
struct BatchEvalMode {
  std::string statistics;  // "running averages" or "batch statistics"
  int64_t batch_size = 1;  // sequences per evaluation batch
  bool batch_statistics = false;
  std::string batches;     // which held-out sequences share a batch, in words
  // Only held-out sequences of trained lengths (in-distribution batch dependence); otherwise the
  // whole held-out set, where unseen lengths share batches with trained ones (contamination).
  bool trained_lengths_only = false;
};
std::vector<BatchEvalMode> batch_eval_modes(int64_t train_batch_size);
struct BatchEvalCell {
  std::string variant, setting;
  double lr = 0;
  BatchEvalMode mode;
  std::vector<double> trained, unseen;  // held-out accuracy per seed
  std::vector<uint64_t> seeds;
};
// At each setting, at the highest grid learning rate where most seeds of both BatchNorm and the
// reference LayerNorm variant solved the task (else learned, else the lowest rate): every finished
// seed of both, each mode.
std::vector<BatchEvalCell> batch_dependence(const ComparePlan& plan, const std::vector<RunResult>& results,
                                            const std::vector<GroupSummary>& groups,
                                            const std::function<bool()>& stop_requested = {});

// One section of the report: the Markdown and the HTML renderer draw the same list.
struct ReportSection {
  std::string title, text;
  std::vector<std::string> bullets;
  std::vector<std::pair<std::string, std::string>> charts;  // file name (no extension), SVG
  std::string table_html, table_md;
};
// The report before it is rendered: what report.md, report.html and summary.json say.
struct ReportModel {
  std::string title;
  std::vector<std::string> intro;       // paragraphs before the first section
  std::vector<ReportSection> sections;  // Answer, Setup, Findings, Summary, the charts' sections
  nlohmann::json summary;               // summary.json
};
// Computes every section from the runs; throws ReportStopped when stop_requested() turns true
// (polled between charts). Writes nothing.
ReportModel build_report(const ComparePlan& plan, const std::vector<RunResult>& results,
                         const std::function<bool()>& stop_requested = {});
std::string render_markdown(const ReportModel& report);  // report.md
// What a caller adds to the page (`normlab serve`: its run table and update script); none in report.html.
struct HtmlExtras {
  std::string head;             // inside <head>, after the style
  std::string before_sections;  // after the intro, before the Answer
  std::string before_end;       // before </body>
};
std::string render_html(const ReportModel& report, const HtmlExtras& extras = {});  // report.html
// runs.csv (one row per run) and curves.csv (every training and evaluation point).
std::string runs_csv(const ComparePlan& plan, const std::vector<RunResult>& results);
std::string curves_csv(const std::vector<RunResult>& results);

// Thrown by write_report when stop_requested() turns true while it draws.
struct ReportStopped {};

// Writes DIR/report.html (self-contained, inline SVG), DIR/report.md, DIR/runs.csv, DIR/curves.csv,
// DIR/charts/*.svg and DIR/summary.json: build_report rendered. stop_requested is polled between charts.
// Returns the Answer's sentences (also in summary.json), for the CLI to print.
std::vector<std::string> write_report(const ComparePlan& plan, const std::vector<RunResult>& results, const std::string& out_dir,
                  const std::function<bool()>& stop_requested = {});

}  // namespace normlab::study
