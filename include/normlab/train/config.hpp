#pragma once
// A run's configuration: one JSON file with four sections, validated strictly before anything runs.
// Settings that are choices (model.activation, model.norm, model.placement, model.residual, model.qk_norm,
// model.positional, optim.name, optim.schedule, task.name, task.length_regime, train.keep_best) are parsed
// here once, into a registry entry or an enum; the JSON keeps their names.
//
//   {"model": {...}, "task": {...}, "optim": {...}, "train": {...}}
//
// Every key has a default (docs/config.md lists them all with their ranges), so a file only needs
// the keys it changes. Validation is strict because a typo must not silently train the wrong model:
// an unknown key, a duplicate key, a wrong type, a value out of range or an inconsistent
// combination is an InputError "<where>: <section.key>: <what>", e.g.
//   "configs/x.json: model.d_modle: unknown key (did you mean 'd_model'?)"
//   "configs/x.json: optim.lr: must be a number in (0, 10], got -1"
//   "--set optim.lr=abc: optim.lr: must be a number in (0, 10], got \"abc\""
//   "configs/x.json: model.d_model: must be divisible by model.heads (got 65 and 4)"
//
// File paths inside a config file are relative to the file's directory; paths given with --set
// are relative to the working directory. The resolved config stores them absolute.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/data/regime.hpp"
#include "normlab/data/task.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/nn/norm_registry.hpp"
#include "normlab/nn/residual_registry.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/optim/schedule.hpp"

namespace normlab::train {

// Members carry PyTorch's names (nn.TransformerEncoderLayer, nn.MultiheadAttention), the same as
// nn::EncoderOptions', so a setting keeps one name from here down to the model; the JSON key users
// type stays short where it differs (in comments: "key").
struct ModelConfig {
  int64_t d_model = 64;
  int64_t num_heads = 4;          // "heads"
  int64_t num_layers = 2;         // "layers"
  int64_t dim_feedforward = 256;  // "ffn"
  double dropout = 0.0;
  nn::Activation activation = nn::Activation::relu;  // relu | gelu
  nn::NormKind norm = "layernorm";                   // a registry entry (nn/norm_registry.hpp): `normlab help norms`;
                                                     // "rezero" reads as "none" with residual "rezero"
  std::string batchnorm_stats = "local";             // data-parallel BatchNorm: local (per rank) | sync (global)
  nn::Placement placement = nn::Placement::pre;      // pre | post
  nn::ResidualKind residual = "plain";  // a residual scheme (nn/residual_registry.hpp): plain | rezero | layerscale
  bool final_norm = true;               // pre placement: a norm after the last block
  double norm_eps = 1e-12;
  nn::QkNorm qk_norm = nn::QkNorm::none;                   // none | layernorm | rmsnorm: each head's queries and keys
                                                           // normalized before the dot product (eps: norm_eps)
  nn::Positional positional = nn::Positional::sinusoidal;  // sinusoidal | learned
  int64_t max_len = 128;                                   // longest sequence the model accepts
  std::optional<int64_t> vocab_size;                       // embedding rows; null: the task's input vocabulary
  std::optional<int64_t> num_classes;                      // head outputs; null: the task's classes
  bool operator==(const ModelConfig&) const = default;
};

struct TaskConfig {
  data::TaskKind name = data::TaskKind::reverse;  // reverse | sort | brackets | majority | mlm_text |
                                                  // sequence_classification | token_classification
  std::optional<std::string> label;       // the task's name in logs and reports (null: from the task / data file)
  std::optional<std::string> train_file;  // null: generate training batches on the fly
  std::optional<std::string> valid_file;  // null: generate eval_examples validation examples
  int64_t min_len = 1;                    // training lengths (generated, or a filter on train_file)
  int64_t max_len = 32;
  int64_t eval_max_len = 64;    // validation lengths go up to here
  int64_t eval_examples = 512;  // validation set size (a file: its first N usable lines)
  int64_t bucket_width = 8;     // lengths per bucket in the evaluation report (and bucketed batches);
                                // 0: no length buckets (one group of every length, no "unseen")
  data::LengthRegime length_regime = data::LengthRegime::mixed;  // generated training batches: mixed | single |
                                                                 // bucketed (data/regime.hpp)
  double select_prob = 0.15;                                     // mlm_text: fraction of positions with a target
  double mask_prob = 0.8;                                        // mlm_text: of those, replaced by [MASK]
  double random_prob = 0.1;                                      // mlm_text: of those, replaced by a random character
  // Own data (sequence_classification, token_classification; data/formats.hpp, data/task.hpp):
  std::string format = "auto";             // auto (by extension) | jsonl | csv | tsv | conll
  std::optional<std::string> text_field;   // JSONL key / CSV column of the text (null: tokens / text)
  std::optional<std::string> label_field;  // ... of the label or tags (null: label / targets / tags)
  bool lowercase = false;                  // ASCII letters lower-cased, in files and at predict time
  bool split_punctuation = false;          // ASCII punctuation split off as words (sequence_classification)
  int64_t min_count = 1;                   // rarer training tokens are read as [UNK]
  int64_t max_file_mb = 64;                // every data file: larger ones are refused (MiB)
  bool operator==(const TaskConfig&) const = default;
};

struct OptimConfig {
  optim::OptimizerKind name = optim::OptimizerKind::adamw;  // sgd | adam | adamw
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;  // sgd only
  double weight_decay = 0.01;
  bool decay_all = false;                                             // false: no decay on biases, norms, embeddings
  optim::ScheduleKind schedule = optim::ScheduleKind::warmup_cosine;  // constant | warmup | warmup_cosine
  int64_t warmup_steps = 100;
  double min_lr_ratio = 0.0;
  double clip_grad_norm = 1.0;  // 0: no clipping
  double z_loss = 0.0;          // coefficient of log(Z)^2 added to the loss (PaLM: 1e-4); 0: off
  bool operator==(const OptimConfig&) const = default;
};

// train.keep_best: which held-out metric best.safetensors keeps (beside checkpoint.safetensors, the
// last state). automatic ("auto"): loss for a data-defined task (its files can be overfitted), none
// for generated data (fresh every batch). The metric is the trained-length group's, as best_valid's.
enum class KeepBest { automatic, none, loss, accuracy, macro_f1 };
inline constexpr std::pair<KeepBest, const char*> kKeepBestNames[] = {{KeepBest::automatic, "auto"},
                                                                      {KeepBest::none, "none"},
                                                                      {KeepBest::loss, "loss"},
                                                                      {KeepBest::accuracy, "accuracy"},
                                                                      {KeepBest::macro_f1, "macro_f1"}};
std::string to_string(KeepBest keep_best);

struct TrainConfig {
  int64_t steps = 1000;
  int64_t batch_size = 32;
  int64_t seed = 0;
  int64_t eval_every = 100;  // 0: evaluate only at the end
  int64_t log_every = 10;
  int64_t diagnostics_every = 50;  // 0: never
  int64_t checkpoint_every = 200;  // 0: only at the end
  int64_t threads = 1;             // 0: OMP_NUM_THREADS or all cores
  KeepBest keep_best = KeepBest::automatic;
  // Stop when this many evaluations in a row have not improved the kept metric (loss when keep_best
  // keeps none) by more than early_stopping_min_delta; 0: never.
  int64_t early_stopping_patience = 0;
  double early_stopping_min_delta = 0.0;
  int64_t world_size = 1;  // data-parallel: set from the launch (mpirun -np N)
  bool operator==(const TrainConfig&) const = default;
};

struct RunConfig {
  ModelConfig model;
  TaskConfig task;
  OptimConfig optim;
  TrainConfig train;
  bool operator==(const RunConfig&) const = default;
};

// A run config file as JSON with its "base" chain resolved: {"base": "other.json", ...} starts from
// other.json (relative to this file; itself resolved the same way) and replaces the keys this file
// sets, section by section. Data paths come back absolute. InputError naming the file otherwise.
nlohmann::json load_config_json(const std::string& path, int depth = 0);

// Reads and validates a config file (its "base" chain first), then applies "--set section.key=value" overrides (the
// value is parsed as JSON when it is valid JSON, else taken as a string), fills in an own-data task's defaults from its
// files for the keys neither gives (train/data_defaults.hpp) and checks the result as a whole.
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The same validation on an already-parsed object; `where` prefixes errors, relative paths are
// resolved against `base_dir`. require_files = false skips the check that data files exist (to
// evaluate a saved run whose training data has moved).
RunConfig config_from_json(const nlohmann::json& json, const std::string& where, const std::string& base_dir = ".",
                           bool require_files = true);

// Every key of `json` checked on its own, without the cross-field rules: a config whose data
// defaults (train/data_defaults.hpp) are still to be filled in.
RunConfig parse_config_keys(const nlohmann::json& json, const std::string& where, const std::string& base_dir = ".",
                            bool require_files = true);

// One "--set section.key=value" applied to `config` (validated like a file value). Call
// check_config afterwards for the cross-field rules.
void apply_override(RunConfig& config, const std::string& assignment);

// Cross-field rules (divisibility, length ranges, memory bound, ...). `where` prefixes errors.
void check_config(const RunConfig& config, const std::string& where);
// check_config on `after` = `before` (read from `file`) with `overrides` applied. The error names
// the --set assignments when the file passes on its own, else the file.
void check_overridden_config(const RunConfig& before, const RunConfig& after, const std::string& file,
                             const std::vector<std::string>& overrides);

// The resolved config: every key, in documentation order.
nlohmann::json to_json(const RunConfig& config);

// "section.key" for every key, in documentation order (docs/config.md documents each one).
std::vector<std::string> config_keys();

// One key's value as to_json writes it, e.g. config_value(c, "train.batch_size") == 32: for code that
// goes over keys (which keys differ between runs, a grid's config-key axes); code that wants one
// setting reads the member. `key` is one of config_keys(); another is a bug (std::invalid_argument).
nlohmann::json config_value(const RunConfig& config, const std::string& key);

// Keys a resumed run may change: how long to train and how often to report. Everything else would
// make the checkpoint describe a different run.
const std::vector<std::string>& resume_mutable_keys();

// InputError "<where>: <key>: cannot change on resume (checkpoint has X, requested Y)" for the
// first key outside resume_mutable_keys() whose value differs.
void check_resume_compatible(const RunConfig& stored, const RunConfig& requested, const std::string& where);

}  // namespace normlab::train
