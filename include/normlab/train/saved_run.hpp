#pragma once
// A run saved in its directory: its config for a resume, or the run loaded back for `normlab eval`
// and `normlab predict`: the config and vocabulary
// come from the checkpoint's metadata (so the training file is not needed), the weights from its
// tensors.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "normlab/data/task.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/train/baseline.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/data_fingerprint.hpp"
#include "normlab/train/evaluate.hpp"
#include "normlab/train/run_dir.hpp"

namespace normlab::train {

// The config for `normlab train --resume`: DIR/config.json with `overrides` applied, or, when
// config_path is given, that file with `overrides`, which must agree with DIR/config.json except in
// resume_mutable_keys() (InputError naming the first key that differs).
RunConfig resume_config(const std::string& dir, const std::optional<std::string>& config_path,
                        const std::vector<std::string>& overrides);

// Before anything is built for a resume: the checkpoint's header (not its tensors) must describe
// the run `config` asks for, up to resume_mutable_keys(), so an edited config.json cannot make the
// trainer allocate a different (larger) model first. InputError naming the checkpoint otherwise.
// Returns the checkpoint's step.
int64_t check_resume_checkpoint(const std::string& dir, const RunConfig& config);

// The steps a finished run made (it has summary.json), or std::nullopt if it has not finished.
std::optional<int64_t> finished_steps(const std::string& dir);

// Which of a run's checkpoints to load: checkpoint.safetensors (the last state) or best.safetensors
// (the best evaluation, train.keep_best); automatic: the best when the run kept one, else the last.
enum class CheckpointChoice { automatic, best, last };

struct LoadedRun {
  RunPaths paths;
  std::string checkpoint;  // the file loaded: paths.checkpoint or paths.best
  bool is_best = false;    // checkpoint is best.safetensors
  RunConfig config;
  data::Task task;
  std::unique_ptr<nn::EncoderModel> model;  // in eval mode
  int64_t step = 0;
  int32_t train_max_len = 0;
  Baselines baselines;         // K and the training data's majority label (checkpoint metadata)
  DataFingerprint trained_on;  // the data files the checkpoint recorded (none before fingerprints)
};

// InputError "<dir>: ..." if the directory or its checkpoint is missing or does not match its config.
LoadedRun load_run(const std::string& dir, CheckpointChoice choice = CheckpointChoice::last);
// "best (step 1500, held-out loss 0.6120)" or "last (step 3000)": what eval and predict say they loaded.
std::string describe_checkpoint(const LoadedRun& run);

struct RunEvaluation {
  std::string data;         // what was evaluated: a file path, or a description of the generated set
  std::string data_sha256;  // the evaluated file's SHA-256 (sha256sum's digits); empty for generated data
  // The run's own validation file whose content is not the one the checkpoint recorded.
  std::optional<DataChange> changed_since_training;
  EvalMetrics metrics;
};

// The run's validation set (as in training), or every line of `data_file`, with buckets of
// task.bucket_width up to the longest sequence evaluated.
RunEvaluation evaluate_run(LoadedRun& run, const std::optional<std::string>& data_file);

// How `normlab eval` batches and normalizes. The defaults are evaluation as in training:
// train.batch_size sequences a batch, BatchNorm with its running averages.
struct EvalSettings {
  std::optional<int64_t> batch_size;  // sequences per evaluation batch
  // BatchNorm normalizes with the statistics of the evaluation batch itself (as in training)
  // instead of its running averages. LayerNorm, RMSNorm and DyT have no such mode: their
  // statistics are per token, so the result does not depend on the batch at all.
  bool batch_statistics = false;
  // Only the sequences no longer than the longest training sequence (summary.json's
  // train_max_len): batches of trained lengths alone. InputError if none is left.
  bool trained_lengths_only = false;
};
RunEvaluation evaluate_run(LoadedRun& run, const std::optional<std::string>& data_file, const EvalSettings& settings);

// `normlab eval`'s figures: evaluate_run's, and for own data (a data-defined task whose
// evaluation has classes) the model's held-out accuracy and macro-F1 with 95% intervals and, for
// sequence_classification when `with_baseline`, the bag-of-words baseline fitted on the run's
// training file and scored on the same examples: the figure to beat.
struct ScoredEvaluation {
  RunEvaluation evaluation;
  bool own_data = false;
  HeldOutScore model;                     // own_data only
  std::optional<BaselineScore> baseline;  // nullopt: not asked, another task, or the training file is gone
};
ScoredEvaluation score_run(LoadedRun& run, const std::optional<std::string>& data_file, const EvalSettings& settings,
                           bool with_baseline = true);

struct Prediction {
  std::vector<int32_t> tokens;                   // the encoded input
  std::vector<int32_t> predicted;                // per token: one class per position; per sequence: one class
  std::vector<float> probability;                // softmax probability of each predicted class
  std::optional<std::vector<int32_t>> expected;  // the task's rule, for the algorithmic tasks
};

// Encodes `input` with the task's vocabulary (InputError naming an unknown symbol, or a sequence
// longer than model.max_len) and runs the model on it.
Prediction predict(LoadedRun& run, const std::string& input);

}  // namespace normlab::train
