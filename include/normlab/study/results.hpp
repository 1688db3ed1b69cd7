#pragma once
// What a run left in its directory (metrics.jsonl, summary.json), read strictly: its training curves,
// held-out evaluations on trained and unseen lengths, and per-block diagnostics.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/study/plan.hpp"
#include "normlab/train/class_metrics.hpp"

namespace normlab::study {

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
// The same when only the lengths shortest..longest were trained (a single-length regime): a bucket
// counts as trained when it lies inside that range, as unseen when it lies outside, else in neither.
HeldOut held_out_of(const std::vector<BucketResult>& buckets, bool unseen, int64_t shortest, int64_t longest);
// One validation record: trained lengths (up to task.max_len), unseen lengths (beyond it), all.
struct EvalPoint {
  int64_t step = 0;
  HeldOut trained, unseen, all;
  double top_prediction_share = NAN;     // trained lengths: share of the most frequent prediction (NaN: not logged)
  train::Confusion trained_confusion{};  // trained lengths: targets against answers (empty: not logged)
  std::vector<std::string> labels{};     // class names by id (empty: not logged)
};
// One diagnostics step record: per block, the residual stream's RMS after it and its parameters'
// gradient norm; the attention and update figures and the output's log Z (train/records.hpp; empty /
// NaN in records written before they were logged).
struct Diagnostics {
  int64_t step = 0;
  std::vector<double> residual_rms, layer_grad_norms;                                                    // (layers)
  std::vector<double> attention_max_logit, attention_entropy_mean, attention_entropy_min, update_ratio;  // (layers)
  double log_z_mean = NAN, log_z_max_abs = NAN;
};
// What guessing achieves on the task's held-out data.
struct Baseline {
  double uniform_loss = NAN, uniform_accuracy = NAN;  // ln K and 1/K over the K labels
  double majority_accuracy = NAN;  // always the training data's most frequent label (trained lengths)
  // The accuracy "at chance" is measured against: the better of the two guesses (0 if unknown).
  double chance_accuracy() const;
};
inline constexpr double kSpikeFactor = 2.0;    // a loss spike: loss > 2x the median of the previous
inline constexpr size_t kSpikeWindow = 20;     //   20 steps and more than 0.05x the first step's loss
inline constexpr double kSpikeMinRise = 0.05;  //   above it; consecutive spike steps count once
struct RunResult {
  RunSpec spec;
  bool finished = false;  // summary.json present
  bool diverged = false;
  int64_t diverged_at = -1;
  int64_t threads = 0;                                        // summary.json's thread count (0: unknown)
  std::vector<double> steps, loss, grad_norm, accuracy;       // per training step
  double final_train_loss = NAN;                              // mean over the last 10% of steps
  double final_valid_loss = NAN, final_valid_accuracy = NAN;  // last evaluation, every length
  std::vector<BucketResult> buckets;                          // last evaluation
  std::vector<EvalPoint> evals;                               // every evaluation, in step order
  std::vector<Diagnostics> diagnostics;                       // every diagnostics record, in step order
  int64_t planned_steps = 0;                                  // the config's train.steps (0: unknown)
  // The lengths the training batches held (the step records' shortest and longest; 0: not logged)
  // and the sequences in a typical (median) batch. A single-length regime (task.length_regime
  // "single") trains on max_len alone: its trained group is then exactly these lengths, and every
  // other length counts as unseen (a bucket holding both is in neither group).
  int64_t shortest_trained = 0, longest_trained = 0;
  bool single_length = false;
  std::vector<int64_t> batch_sequences;     // per step record
  int64_t typical_batch_sequences() const;  // median of batch_sequences (0: not logged)
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
  double peak_grad_norm() const;   // the largest finite global gradient norm (NaN if none)
  int64_t loss_spikes() const;     // see kSpikeFactor
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
double chance_loss(const train::RunConfig& config);

}  // namespace normlab::study
