#pragma once
// A compare config read and checked (not a public interface): the base run config with "set"
// applied, the grid object and its config-key axes, the search and the equivalence margins.
// src/study/plan.cpp expands it into runs.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/study/plan.hpp"
#include "normlab/train/config.hpp"

namespace normlab::study::detail {

// A compare config read and checked, ready to expand: the base run config and the grid object.
struct CompareConfig {
  std::string path;
  std::filesystem::path dir;      // the compare config's directory: its relative paths start here
  nlohmann::json base;            // the base run config with "set" applied, data paths absolute
  train::RunConfig base_config;   // the same, validated
  nlohmann::json grid;            // the "grid" object ({} when absent)
  std::vector<std::string> keys;  // the grid's config-key axes ("train.batch_size"), in grid order
  LrSearchSpec search;            // the learning-rate search (search.points == 0: none)
  EquivalenceMargins equivalence;
};

// Reads a compare config: its top level (a "base" that is another compare config resolved under
// it), the base run config and "set", the grid's keys, the search and the equivalence margins.
// Every error is an InputError naming the file and key.
CompareConfig parse_compare_config(const std::string& path);

}  // namespace normlab::study::detail
