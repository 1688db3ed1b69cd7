#pragma once
// From a validated RunConfig to the objects a run needs: the task, the model's options, and the
// training / validation data (each loader throws io::StopRequested on a stop request). Shared by the trainer, `normlab eval`, `normlab predict` and
// `normlab bench step`, so all of them read a config the same way.
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

// The generated validation set does not depend on train.seed: runs with different seeds are
// compared on the same examples. Masked-LM validation masks are fixed the same way.
inline constexpr uint64_t kValidSeed = 0x76616c6964ULL;      // "valid"
inline constexpr uint64_t kValidMaskSeed = 0x6d61736b73ULL;  // "masks"

// The task the config names. mlm_text: the character vocabulary is read from task.train_file.
data::Task build_task(const RunConfig& config, io::StopFlag stop = nullptr);
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

// Training examples from task.train_file whose length is in [task.min_len, task.max_len] (file
// order kept); std::nullopt when training data is generated. InputError if none is left.
std::optional<data::Dataset> load_train_set(const RunConfig& config, const data::Task& task,
                                            io::StopFlag stop = nullptr);

// The validation set: the first task.eval_examples examples of task.valid_file whose length is at
// most task.eval_max_len, or task.eval_examples generated examples with lengths uniform in
// [task.min_len, task.eval_max_len] from kValidSeed.
data::Dataset load_valid_set(const RunConfig& config, const data::Task& task, io::StopFlag stop = nullptr);

// A user's evaluation file (`normlab eval --data`): every line, in order. A sequence longer than
// model.max_len is an InputError "PATH:LINE: ...".
data::Dataset load_eval_file(const std::string& path, const RunConfig& config, const data::Task& task);

// The longest training sequence: task.max_len for generated data, the longest kept line otherwise.
int32_t train_max_length(const RunConfig& config, const std::optional<data::Dataset>& train_set);

// Evaluation batches in file order; masked LM gets the fixed validation masks.
std::vector<data::Batch> evaluation_batches(const data::Dataset& dataset, const RunConfig& config,
                                           io::StopFlag stop = nullptr);

}  // namespace normlab::train
