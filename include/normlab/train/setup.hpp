#pragma once
// From a validated RunConfig to the objects a run needs: the task, the model's options, and the
// training / validation data (each loader throws io::StopRequested on a stop request). Shared by the trainer, `normlab
// eval`, `normlab predict` and `normlab bench step`, so all of them read a config the same way.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "normlab/data/dataset.hpp"
#include "normlab/data/task.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/train/config.hpp"

namespace normlab::train {

// Longest sequence a data file may hold when it is read; shorter limits are applied afterwards as
// filters (training lengths) or as errors naming the line (evaluation files).
inline constexpr int32_t kMaxFileSequence = 4096;

// The generated validation set is drawn per train.seed (valid_seed): a seed's spread then covers
// the held-out sample too, while two runs of one seed (a paired comparison) see the same examples.
// Masked-LM validation masks are fixed by kValidMaskSeed.
inline constexpr uint64_t kValidSeed = 0x76616c6964ULL;      // "valid"
inline constexpr uint64_t kValidMaskSeed = 0x6d61736b73ULL;  // "masks"
// The generator seed of the validation set of a run with this train.seed.
inline uint64_t valid_seed(const RunConfig& config) {
  return data::derive_seed(kValidSeed, static_cast<uint64_t>(config.train.seed));
}

// The task the config names. mlm_text: the character vocabulary is read from task.train_file; a
// data-defined task: its tokens and labels likewise (InputError "FILE: ..." naming what is wrong).
data::Task build_task(const RunConfig& config, io::StopFlag stop = nullptr);
// The config's text and file options on a task (task.lowercase, task.split_punctuation,
// task.format, task.text_field, task.label_field, task.max_file_mb, task.min_count): a task loaded
// back from a checkpoint reads text as its training did.
void apply_task_options(data::Task& task, const TaskConfig& t);
// mlm_text rebuilt from the UTF-8 bytes of its characters (saved in a checkpoint), so a run can be
// evaluated and queried without its training file.
data::Task build_text_task(const std::vector<uint8_t>& characters);
// The characters of an mlm_text task's vocabulary, concatenated as UTF-8 bytes (without the special
// tokens); for ASCII text, one byte a character.
std::vector<uint8_t> text_task_characters(const data::Task& task);

// The model a config describes for this task. InputError if model.vocab_size / model.num_classes
// are smaller than the task needs.
nn::ModelOptions build_model_options(const RunConfig& config, const data::Task& task);

data::MaskConfig build_mask_config(const RunConfig& config);

// The task's name for people: task.label when given; for a data-defined task its training file's
// folder and name ("sentiment/train.jsonl"); otherwise task.name. Logs, eval, predict and reports
// use it.
std::string task_title(const RunConfig& config);

// How many lines of a data file a run uses, and why the others were left out.
struct FileUse {
  int64_t lines = 0, used = 0;
  int64_t shorter = 0, longer = 0, beyond_count = 0;  // below min_len, above max_len, past count_limit
  int64_t reserved = 0, unknown = 0;  // tokens written as [PAD]/[UNK]; tokens read as [UNK] (data::LoadStats)
  int64_t min_len = 0, max_len = 0, count_limit = 0;
  std::string max_key;  // "task.max_len" or "task.eval_max_len"
  // "used all 2000 lines" or "used 1034 of 2000 lines: 966 longer than task.max_len 16"
  std::string describe() const;
};

// Training examples from task.train_file whose length is in [task.min_len, task.max_len] (file
// order kept); std::nullopt when training data is generated. InputError if none is left. `use`
// (optional) receives the counts.
std::optional<data::Dataset> load_train_set(const RunConfig& config, const data::Task& task,
                                            io::StopFlag stop = nullptr, FileUse* use = nullptr);

// The validation set: the first task.eval_examples examples of task.valid_file whose length is at
// most task.eval_max_len, or task.eval_examples generated examples with lengths uniform in
// [task.min_len, task.eval_max_len] from valid_seed(config).
data::Dataset load_valid_set(const RunConfig& config, const data::Task& task, io::StopFlag stop = nullptr,
                             FileUse* use = nullptr);

// A user's evaluation file (`normlab eval --data`): every line, in order, except the sequences
// longer than model.max_len, skipped and counted as in training and validation (`use`).
data::Dataset load_eval_file(const std::string& path, const RunConfig& config, const data::Task& task,
                             FileUse* use = nullptr);

// The longest training sequence: task.max_len for generated data, the longest kept line otherwise.
int32_t train_max_length(const RunConfig& config, const std::optional<data::Dataset>& train_set);

// The training data's most frequent label (ties: the lowest id), for the majority-class baseline:
// counted over the training file's targets (mlm_text: its characters, the targets masking draws),
// or over a fixed sample of generated training sequences. -1 if there is no target at all.
int32_t majority_label(const RunConfig& config, const data::Task& task, const std::optional<data::Dataset>& train_set);

// Evaluation batches in file order; masked LM gets the fixed validation masks.
std::vector<data::Batch> evaluation_batches(const data::Dataset& dataset, const RunConfig& config,
                                            io::StopFlag stop = nullptr);

}  // namespace normlab::train
