#pragma once
// Defaults a data-defined task (sequence_classification, token_classification) takes from its own
// files when the config does not give the key (a "base" config giving it counts as given):
//
//   task.max_len        the training file's longest example (in tokens, as the task reads text), at
//                       most model.max_len when that is given: no training line is dropped
//   task.eval_max_len   the validation file's longest example, at least task.max_len (likewise capped)
//   model.max_len       128, or task.eval_max_len when that is longer
//   task.eval_examples  every line of the validation file
//   task.bucket_width   0: no length buckets (one group of every length: accuracy, macro-F1, per-class)
//   train.steps         kDefaultEpochs passes over the training file, in batches of train.batch_size
//   train.eval_every    twice an epoch (a multiple of 10)
//
// The built-in tasks keep their fixed defaults (docs/config.md). The resolved config (config.json)
// records the values used, so a resume, `eval` and a compare's reuse check see plain numbers.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "normlab/io/stop.hpp"
#include "normlab/train/config.hpp"

namespace normlab::train {

inline constexpr int64_t kDefaultEpochs = 10;

// "section.key" of every key above.
const std::vector<std::string>& data_default_keys();

// What the defaults are computed from: a pass over each file without keeping its examples.
struct DataShape {
  int64_t train_lines = 0, train_longest = 0;
  int64_t valid_lines = 0, valid_longest = 0;
};
// InputError "FILE:LINE: ..." as the loaders say it when a file cannot be read.
DataShape measure_data(const RunConfig& config, io::StopFlag stop = nullptr);

// Sets the keys of data_default_keys() that are not in `given` ("section.key"), for a data-defined
// task with both files; any other config is left as it is.
void apply_data_defaults(RunConfig& config, const std::set<std::string>& given, const DataShape& shape);

// The keys a config's JSON gives (every "section.key" present), plus the names of --set overrides.
std::set<std::string> given_keys(const nlohmann::json& config_json, const std::vector<std::string>& overrides = {});

// A config's JSON (its base chain resolved) with the data defaults written in for the keys it does
// not give: what a compare grid starts from. Unchanged for a config that is not a data-defined task.
nlohmann::json with_data_defaults(const nlohmann::json& config_json, const std::string& where);

}  // namespace normlab::train
