// Examples written back as JSONL: the inverse of the line parser (jsonl_parse.cpp).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "normlab/data/jsonl.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"

namespace normlab::data {

std::string example_to_jsonl(const Example& example, const Task& task) {
  nlohmann::ordered_json object;
  if (task.is_masked_lm()) {
    object["text"] = task.input_vocab.decode(example.tokens, "");
    return object.dump();
  }
  nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
  for (int32_t id : example.tokens) tokens.push_back(task.input_vocab.token(id));
  object["tokens"] = std::move(tokens);
  if (task.target_kind == TargetKind::per_sequence) {
    if (example.targets.size() != 1) {
      throw UsageError(fmt::format("example_to_jsonl: {} targets for a per-sequence task", example.targets.size()));
    }
    object["label"] = task.output_vocab.token(example.targets[0]);
    return object.dump();
  }
  if (example.targets.size() != example.tokens.size()) {
    throw UsageError(
        fmt::format("example_to_jsonl: {} targets for {} tokens", example.targets.size(), example.tokens.size()));
  }
  nlohmann::ordered_json targets = nlohmann::ordered_json::array();
  for (int32_t id : example.targets) {
    if (id == -1) {
      targets.push_back(nullptr);
    } else {
      targets.push_back(task.output_vocab.token(id));
    }
  }
  object["targets"] = std::move(targets);
  return object.dump();
}

void write_jsonl(const std::string& path, const std::vector<Example>& examples, const Task& task) {
  std::string contents;
  for (const Example& example : examples) {
    contents += example_to_jsonl(example, task);
    contents += '\n';
  }
  io::write_file_atomic(path, contents);
}

}  // namespace normlab::data
