#include "normlab/train/data_defaults.hpp"

#include <algorithm>

#include "normlab/data/jsonl.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::train {

namespace {

constexpr int64_t kModelMaxLen = 128;  // model.max_len's default for every task

bool needs_defaults(const RunConfig& config) {
  return data::is_data_task(config.task.name) && config.task.train_file && config.task.valid_file;
}

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

const std::vector<std::string>& data_default_keys() {
  static const std::vector<std::string> keys = {"model.max_len",      "task.max_len",      "task.eval_max_len",
                                                "task.eval_examples", "task.bucket_width", "train.steps",
                                                "train.eval_every"};
  return keys;
}

DataShape measure_data(const RunConfig& config, io::StopFlag stop) {
  DataShape shape;
  if (!needs_defaults(config)) return shape;
  // Only the shape matters for measuring lines (as in build_task).
  data::Task schema = data::make_data_task(config.task.name, {"w"}, {"l"}, kMaxFileSequence);
  apply_task_options(schema, config.task);
  const data::LoadStats train = data::measure_file(*config.task.train_file, schema, stop);
  const data::LoadStats valid = data::measure_file(*config.task.valid_file, schema, stop);
  shape.train_lines = train.lines;
  shape.train_longest = train.longest;
  shape.valid_lines = valid.lines;
  shape.valid_longest = valid.longest;
  return shape;
}

void apply_data_defaults(RunConfig& config, const std::set<std::string>& given, const DataShape& shape) {
  if (!needs_defaults(config) || shape.train_lines == 0) return;
  auto open = [&](const char* key) { return given.count(key) == 0; };
  TaskConfig& t = config.task;
  const int64_t longest = std::max<int64_t>({1, t.min_len, shape.train_longest});
  const int64_t eval_longest = std::max(longest, shape.valid_longest);
  if (open("model.max_len")) config.model.max_len = std::min<int64_t>(4096, std::max(kModelMaxLen, eval_longest));
  if (open("task.max_len")) t.max_len = std::min(longest, config.model.max_len);
  if (open("task.eval_max_len")) t.eval_max_len = std::min(std::max(eval_longest, t.max_len), config.model.max_len);
  if (open("task.eval_examples")) t.eval_examples = std::clamp<int64_t>(shape.valid_lines, 1, 1'000'000);
  if (open("task.bucket_width")) t.bucket_width = 0;
  const int64_t epoch =
      std::max<int64_t>(1, (shape.train_lines + config.train.batch_size - 1) / config.train.batch_size);
  if (open("train.steps")) config.train.steps = std::min<int64_t>(kDefaultEpochs * epoch, 100'000'000);
  if (open("train.eval_every")) config.train.eval_every = round_up(std::max<int64_t>(1, epoch / 2), 10);
}

std::set<std::string> given_keys(const nlohmann::json& config_json, const std::vector<std::string>& overrides) {
  std::set<std::string> keys;
  if (config_json.is_object())
    for (const auto& [section, body] : config_json.items())
      if (body.is_object())
        for (const auto& [key, value] : body.items()) keys.insert(section + "." + key);
  for (const std::string& assignment : overrides) keys.insert(assignment.substr(0, assignment.find('=')));
  return keys;
}

nlohmann::json with_data_defaults(const nlohmann::json& config_json, const std::string& where) {
  RunConfig config = parse_config_keys(config_json, where, ".");
  if (!needs_defaults(config)) return config_json;
  const std::set<std::string> given = given_keys(config_json);
  apply_data_defaults(config, given, measure_data(config));
  const nlohmann::json resolved = to_json(config);
  nlohmann::json out = config_json;
  for (const std::string& key : data_default_keys()) {
    if (given.count(key)) continue;
    const size_t dot = key.find('.');
    const std::string section = key.substr(0, dot), name = key.substr(dot + 1);
    out[section][name] = resolved.at(section).at(name);
  }
  (void)config_from_json(out, where, ".");  // the cross-field rules, on the filled-in config
  return out;
}

}  // namespace normlab::train
