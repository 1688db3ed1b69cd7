#pragma once
// The shipped data files (data/<task>/{train,valid,test}.jsonl, data/kjv/...) are made by these
// functions, so anyone can regenerate them byte for byte (scripts/data/make_data.sh; data/README.md).
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/data/task.hpp"

namespace normlab::data {

struct SplitSpec {
  std::string name;  // file name without ".jsonl"
  int64_t count = 0;
  int32_t min_len = 1;
  int32_t max_len = 1;
};

// Train lengths 1..32; valid and test go to 64 to measure length generalization.
struct TaskSplitsConfig {
  std::vector<SplitSpec> splits = {{"train", 2000, 1, 32}, {"valid", 500, 1, 64}, {"test", 500, 1, 64}};
  uint64_t seed = 1729;
};

// Generates every split of an algorithmic task into out_dir/<split>.jsonl (creating out_dir).
// Split i of task T is drawn from Rng(derive_seed(derive_seed(seed, fnv1a(T)), i)), so the splits
// and tasks are independent of each other. Returns the paths written.
std::vector<std::string> write_task_splits(const Task& task, const std::string& out_dir,
                                           const TaskSplitsConfig& config = {});

// Verses of 16..160 characters; of every 100 consecutive kept verses, the first 80 go to train, the
// next 10 to valid, the last 10 to test (contiguous blocks keep neighbouring verses, which often
// repeat each other, mostly on one side of the split).
struct TextSplitsConfig {
  int32_t min_chars = 16;
  int32_t max_chars = 160;
  int32_t block = 100;
  int32_t train_per_block = 80;
  int32_t valid_per_block = 10;  // the rest of each block is test
};

// Reads one verse per line in the format of `bible -f Ge1:1-De34:12` ("Ge1:1 In the beginning..."),
// drops the reference before the first space and trailing whitespace, keeps verses whose length is
// in [min_chars, max_chars], and writes out_dir/{train,valid,test}.jsonl as {"text": ...} lines.
// InputError "PATH:LINE: ..." for a line without a reference. Returns the paths written.
std::vector<std::string> write_text_splits(const std::string& verses_path, const std::string& out_dir,
                                           const TextSplitsConfig& config = {});

}  // namespace normlab::data
