#include "normlab/data/splits.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "normlab/data/jsonl.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/text.hpp"

namespace normlab::data {

namespace {

// FNV-1a, 64-bit: a stable hash of a task name (std::hash is not the same everywhere).
uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

void make_directory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw InputError(fmt::format("{}: cannot create directory: {}", dir, error.message()));
}

}  // namespace

std::vector<std::string> write_task_splits(const Task& task, const std::string& out_dir,
                                           const TaskSplitsConfig& config) {
  if (!task.has_generator()) throw UsageError(fmt::format("write_task_splits: task {} has no generator", task.name));
  make_directory(out_dir);
  const uint64_t task_seed = derive_seed(config.seed, fnv1a(task.name));
  std::vector<std::string> paths;
  for (size_t i = 0; i < config.splits.size(); ++i) {
    const SplitSpec& split = config.splits[i];
    std::vector<Example> examples =
        generate_examples(task, split.count, split.min_len, split.max_len, derive_seed(task_seed, i));
    std::string path = (std::filesystem::path(out_dir) / (split.name + ".jsonl")).string();
    write_jsonl(path, examples, task);
    paths.push_back(path);
  }
  return paths;
}

std::vector<std::string> write_text_splits(const std::string& verses_path, const std::string& out_dir,
                                           const TextSplitsConfig& config) {
  if (config.min_chars < 1 || config.max_chars < config.min_chars || config.block < 1 || config.train_per_block < 0 ||
      config.valid_per_block < 0 || config.train_per_block + config.valid_per_block > config.block) {
    throw UsageError("write_text_splits: inconsistent TextSplitsConfig");
  }
  const std::string contents = io::read_file(verses_path, static_cast<size_t>(kMaxJsonlBytes));
  io::require_utf8_lines(contents, verses_path);
  std::string train, valid, test;
  int64_t kept = 0;
  int64_t line_number = 0;
  size_t start = 0;
  while (start < contents.size()) {
    const std::string_view line = io::next_line(contents, start);
    ++line_number;
    size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos) {
      throw InputError(fmt::format("{}:{}: expected \"REFERENCE TEXT\" (e.g. \"Ge1:1 In the beginning...\")",
                                   verses_path, line_number));
    }
    std::string_view text = line.substr(space + 1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\r' || text.back() == '\t')) text.remove_suffix(1);
    if (text.size() < static_cast<size_t>(config.min_chars) || text.size() > static_cast<size_t>(config.max_chars)) {
      continue;
    }
    nlohmann::ordered_json object;
    object["text"] = std::string(text);
    const int64_t slot = kept % config.block;
    std::string& split = slot < config.train_per_block                            ? train
                         : slot < config.train_per_block + config.valid_per_block ? valid
                                                                                  : test;
    split += object.dump();
    split += '\n';
    ++kept;
  }
  make_directory(out_dir);
  std::vector<std::string> paths;
  for (auto [name, split] :
       {std::pair<const char*, const std::string*>{"train", &train}, {"valid", &valid}, {"test", &test}}) {
    std::string path = (std::filesystem::path(out_dir) / (std::string(name) + ".jsonl")).string();
    io::write_file_atomic(path, *split);
    paths.push_back(path);
  }
  return paths;
}

}  // namespace normlab::data
