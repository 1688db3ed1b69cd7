// The compare config (docs/compare.md): read, its "base" chain resolved, its base run config,
// "set", grid keys, search and equivalence margins checked, each error naming the file and key.
#include "compare_config.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/io/suggest.hpp"
#include "normlab/study/search.hpp"
#include "normlab/train/data_defaults.hpp"

namespace normlab::study::detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The built-in axes own these keys; a grid key naming one is refused with the axis to use.
std::string owning_axis(const std::string& key) {
  if (key == "model.norm" || key == "model.placement" || key == "model.residual") return "grid.variants";
  if (key == "optim.lr") return "grid.lr";
  if (key == "train.seed") return "grid.seeds";
  if (key == "model.layers") return "grid.layers";
  return "";
}

// The data file paths of a run config (task.train_file, task.valid_file) made absolute against
// the directory of the file that names them: the runs' configs live elsewhere. A null path is
// dropped (the key's default).
void make_data_paths_absolute(json& config, const fs::path& relative_to) {
  if (!config.contains("task") || !config["task"].is_object()) return;
  for (const char* key : {"train_file", "valid_file"}) {
    if (!config["task"].contains(key)) continue;
    json& v = config["task"][key];
    if (v.is_string() && fs::path(v.get<std::string>()).is_relative())
      v = fs::absolute(relative_to / v.get<std::string>()).lexically_normal().string();
    if (v.is_null()) config["task"].erase(key);
  }
}

// The compare config's top-level object; its kind and keys checked.
json read_compare_root(const std::string& path) {
  const json root = io::parse_strict(io::read_file(path, 1 << 20), path);
  if (!root.is_object()) throw InputError(fmt::format("{}: must be a JSON object", path));
  if (config_kind(path) == ConfigKind::run)
    throw InputError(
        fmt::format("{}: is a run config (model, task, optim, train), not a compare config; train it "
                    "with: normlab train --config {} (or compare with a config whose \"base\" is it)",
                    path, path));
  for (const auto& [key, value] : root.items())
    if (key != "base" && key != "set" && key != "grid" && key != "search" && key != "equivalence")
      fail(path, key, "unknown key (expected base, set, grid, search, equivalence)");
  if (!root.contains("base")) fail(path, "base", "missing (a run config path or object)");
  return root;
}

// A compare config's paths made absolute against its directory `dir`, so that its sections can
// be merged into a config that lives elsewhere: the base path (or an inline base's data files),
// and data-file values in "set" and in the grid.
void make_compare_paths_absolute(json& root, const fs::path& dir) {
  json& base = root["base"];
  if (base.is_string() && fs::path(base.get<std::string>()).is_relative())
    base = fs::absolute(dir / base.get<std::string>()).lexically_normal().string();
  if (base.is_object()) make_data_paths_absolute(base, dir);
  const auto absolute = [&](json& v) {
    if (v.is_string() && fs::path(v.get<std::string>()).is_relative())
      v = fs::absolute(dir / v.get<std::string>()).lexically_normal().string();
  };
  for (const char* key : {"task.train_file", "task.valid_file"}) {
    if (root.contains("set") && root["set"].is_object() && root["set"].contains(key)) absolute(root["set"][key]);
    if (root.contains("grid") && root["grid"].is_object() && root["grid"].contains(key) && root["grid"][key].is_array())
      for (json& v : root["grid"][key]) absolute(v);
  }
}

// A compare config whose "base" is another compare config: that study rerun with this file's
// keys over it. "set" merges key by key (this file's value wins); each grid axis given here
// replaces the base's axis; "search" replaces the base's search and drops its grid.lr, and a
// grid.lr given here drops the base's search. `depth` bounds a chain (and a cycle) of bases.
json resolve_compare_root(const std::string& path, int depth) {
  json root = read_compare_root(path);
  const json& base = root.at("base");
  if (!base.is_string()) return root;
  const fs::path base_path = fs::path(path).parent_path() / base.get<std::string>();
  if (config_kind(base_path.string()) != ConfigKind::compare) return root;
  if (depth >= 8) fail(path, "base", "compare configs built on each other more than 8 deep (a cycle?)");
  json merged = resolve_compare_root(base_path.string(), depth + 1);
  make_compare_paths_absolute(merged, base_path.parent_path());
  if (root.contains("set")) {
    if (!root.at("set").is_object()) fail(path, "set", "must be an object of \"section.key\": value");
    if (!merged.contains("set") || !merged["set"].is_object()) merged["set"] = json::object();
    for (const auto& [key, value] : root.at("set").items()) merged["set"][key] = value;
  }
  if (root.contains("grid")) {
    if (!root.at("grid").is_object()) fail(path, "grid", "must be an object");
    if (!merged.contains("grid") || !merged["grid"].is_object()) merged["grid"] = json::object();
    for (const auto& [key, value] : root.at("grid").items()) merged["grid"][key] = value;
    if (root.at("grid").contains("lr")) merged.erase("search");
  }
  if (root.contains("search")) {
    merged["search"] = root.at("search");
    if (merged.contains("grid") && merged["grid"].is_object() &&
        !(root.contains("grid") && root["grid"].contains("lr")))
      merged["grid"].erase("lr");
  }
  return merged;
}

// Fills config.base and config.base_config from "base" (a file next to the compare config, or
// inline) and "set". The base is validated alone first, so a mistake in it is reported against it
// and one in "set" against "set".
void resolve_base(const json& root, CompareConfig& config) {
  const std::string& path = config.path;
  const json& base = root.at("base");
  fs::path base_dir = config.dir;
  if (base.is_string()) {
    const fs::path base_path = config.dir / base.get<std::string>();
    base_dir = base_path.parent_path();
    // A run config may itself build on another ("base"): resolved here, its paths made absolute.
    config.base = train::load_config_json(base_path.string());
  } else if (base.is_object()) {
    config.base = base;
  } else {
    fail(path, "base", "must be a path (string) or a run config (object)");
  }
  make_data_paths_absolute(config.base, base_dir);
  (void)train::config_from_json(config.base,
                                base.is_string() ? (config.dir / base.get<std::string>()).string() : path + ": base",
                                ".");
  if (root.contains("set")) {
    const json& set = root.at("set");
    if (!set.is_object()) fail(path, "set", "must be an object of \"section.key\": value");
    for (const auto& [key, value] : set.items()) set_path(config.base, key, value, path);
    make_data_paths_absolute(config.base, config.dir);
  }
  // Own data: the keys neither the base nor "set" gives come from the data files (train/data_defaults.hpp).
  config.base = train::with_data_defaults(config.base, root.contains("set") ? path + ": set" : path);
  config.base_config = train::config_from_json(config.base, root.contains("set") ? path + ": set" : path, ".");
}

// The grid's keys other than the built-in axes: each must be a config key no built-in axis owns.
std::vector<std::string> config_key_axes(const json& grid, const std::string& path) {
  const std::vector<std::string> all_keys = train::config_keys();
  std::vector<std::string> keys;
  for (const auto& [key, value] : grid.items()) {
    if (key == "variants" || key == "lr" || key == "seeds" || key == "layers" || key == "warmup") continue;
    if (std::find(all_keys.begin(), all_keys.end(), key) == all_keys.end()) {
      // Suggest only what the grid accepts: the built-in axes and the keys they do not own.
      std::vector<std::string> accepted = {"variants", "lr", "seeds", "layers", "warmup"};
      for (const std::string& k : all_keys)
        if (owning_axis(k).empty() && k != "train.threads" && k != "train.world_size") accepted.push_back(k);
      const std::string closest = io::closest(key, accepted);
      fail(path, "grid." + key,
           fmt::format("unknown axis (the built-in axes are variants, lr, seeds, layers, warmup; any other axis is a "
                       "config key \"section.key\"{})",
                       closest.empty() ? "" : fmt::format("; did you mean '{}'?", closest)));
    }
    if (const std::string axis = owning_axis(key); !axis.empty()) fail(path, "grid." + key, "use " + axis);
    if (key == "train.threads") fail(path, "grid." + key, "compare runs every run single-threaded; not an axis");
    if (key == "optim.warmup_steps" && grid.contains("warmup"))
      fail(path, "grid." + key, "grid.warmup sets it too: use one of the two");
    keys.push_back(key);
  }
  return keys;
}

// "equivalence": {"loss": 0.05, "accuracy_auc": 0.02, "accuracy": 0.02}, each key optional: the
// margins within which the report calls a difference none (defaults in EquivalenceMargins).
EquivalenceMargins read_equivalence_margins(const json& root, const std::string& path) {
  EquivalenceMargins margins;
  if (!root.contains("equivalence")) return margins;
  const json& section = root.at("equivalence");
  if (!section.is_object())
    fail(path, "equivalence", "must be an object such as {\"loss\": 0.05, \"accuracy_auc\": 0.02}");
  margins.from_config = true;
  for (const auto& [key, value] : section.items()) {
    double* into = key == "loss"           ? &margins.loss
                   : key == "accuracy_auc" ? &margins.accuracy_auc
                   : key == "accuracy"     ? &margins.accuracy
                                           : nullptr;
    if (!into) fail(path, "equivalence." + key, "unknown key (expected loss, accuracy_auc, accuracy)");
    const double upper = key == "loss" ? 10.0 : 1.0;  // a loss margin in nats; accuracies are fractions
    if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > upper)
      fail(path, "equivalence." + key, fmt::format("must be a number in (0, {:g}], got {}", upper, value.dump()));
    *into = value.get<double>();
  }
  return margins;
}

}  // namespace

CompareConfig parse_compare_config(const std::string& path) {
  CompareConfig config;
  config.path = path;
  config.dir = fs::path(path).parent_path();
  const json root = resolve_compare_root(path, 0);
  resolve_base(root, config);
  config.grid = root.contains("grid") ? root.at("grid") : json::object();
  if (!config.grid.is_object()) fail(path, "grid", "must be an object");
  config.keys = config_key_axes(config.grid, path);
  if (root.contains("search")) {
    config.search = parse_lr_search(root.at("search"), path);
    if (config.grid.contains("lr")) fail(path, "grid.lr", "search.lr sets the learning rates: use one of the two");
  }
  config.equivalence = read_equivalence_margins(root, path);
  return config;
}

}  // namespace normlab::study::detail
