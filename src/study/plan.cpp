// The compare grid: variants, the compare config, its expansion into runs. load_compare_plan is
// parse -> axes -> expand -> run specs, each step's input checked before the next:
//   parse_compare_config   the file, its base run config and "set", the grid's keys
//   read_*_axes            each axis's values (fill_missing_axes: the base's value for an absent one)
//   expand_grid            the settings (layers x warmup x config-key axes), in grid order
//   make_run_spec          one run per setting, lr, variant and seed: its name and full config
#include "normlab/study/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>

#include "common.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/io/suggest.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/nn/norm_registry.hpp"
#include "normlab/study/search.hpp"
#include "normlab/study/sensitivity.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/memory.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;
using detail::fail;
using detail::format_lr;
using detail::set_path;

// The compare grid's variant names: every registry entry's (nn/norm_registry.hpp), in its order.
const std::vector<Variant>& known_variants() {
  static const std::vector<Variant> variants = [] {
    std::vector<Variant> all;
    for (const nn::NormSpec& spec : nn::norm_registry())
      for (const nn::NormVariant& v : spec.variants) all.push_back({v.name, spec.name, v.placement, v.description, v.color});
    return all;
  }();
  return variants;
}

const Variant* find_variant(const std::string& name) {
  for (const Variant& v : known_variants())
    if (v.name == name) return &v;
  return nullptr;
}

std::string variant_of(const std::string& norm, const std::string& placement) {
  const nn::NormSpec* spec = nn::find_norm(norm);
  const bool placement_moot = spec != nullptr && spec->residual != nn::Residual::normalized;
  for (const Variant& v : known_variants())
    if (v.norm == norm && (v.placement == placement || placement_moot)) return v.name;
  return "";
}

std::string variant_of(const train::ModelConfig& model) {
  return variant_of(model.norm.name(), nn::to_string(model.placement));
}

std::string block_formula(const std::string& norm, const std::string& placement, bool final_norm) {
  if (nn::find_norm(norm) == nullptr) return "";
  return nn::block_formula(norm, placement == "post" ? nn::Placement::post : nn::Placement::pre, final_norm);
}

ConfigKind config_kind(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path, 1 << 20);
  } catch (const InputError&) {
    return ConfigKind::unknown;  // the loader reports it
  }
  if (io::json_nesting_depth(text) > io::kMaxJsonDepth) return ConfigKind::unknown;
  const json root = json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) return ConfigKind::unknown;
  bool run = false, compare = false, base = false;
  for (const auto& [key, value] : root.items()) {
    run = run || key == "model" || key == "task" || key == "optim" || key == "train";
    compare = compare || key == "set" || key == "grid" || key == "search" || key == "equivalence";
    base = base || key == "base";
  }
  // "base" alone is a compare config; with sections it is a run config built on another.
  if (base && !run) compare = true;
  if (run == compare) return ConfigKind::unknown;
  return run ? ConfigKind::run : ConfigKind::compare;
}

namespace {

template <typename T>
std::vector<T> read_axis(const json& grid, const std::string& key, const std::string& where,
                         const std::function<T(const json&)>& convert,
                         const std::function<std::string(const T&)>& name_of) {
  std::vector<T> out;
  if (!grid.contains(key)) return out;
  const json& list = grid.at(key);
  if (!list.is_array() || list.empty() || list.size() > 64)
    fail(where, "grid." + key, "must be a non-empty list of at most 64 values");
  std::vector<std::string> names;
  for (const json& item : list) {
    T value = convert(item);
    const std::string name = name_of(value);
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name)
        fail(where, "grid." + key,
             fmt::format("{} and {} are the same setting (both name runs '{}'): remove one", list[i].dump(),
                         item.dump(), name));
    names.push_back(name);
    out.push_back(std::move(value));
  }
  return out;
}

// An axis of integers in [lo, hi]; a value outside is refused with `rule`, and runs are named
// name_prefix + value ("s3", "L4").
template <typename T>
std::vector<T> read_integer_axis(const json& grid, const std::string& key, const std::string& where, int64_t lo,
                                 int64_t hi, const char* rule, const char* name_prefix) {
  return read_axis<T>(
      grid, key, where,
      [&](const json& v) {
        if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
          fail(where, "grid." + key, fmt::format("{}, got {}", rule, v.dump()));
        return v.get<T>();
      },
      [&](const T& value) { return fmt::format("{}{}", name_prefix, value); });
}

// A value as a directory-name part: characters outside [A-Za-z0-9._+-] become '_'.
std::string name_part(const json& value) {
  std::string text = detail::value_text(value);
  for (char& c : text)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '+' && c != '-') c = '_';
  return text;
}

// The built-in axes own these keys; a grid key naming one is refused with the axis to use.
std::string owning_axis(const std::string& key) {
  if (key == "model.norm" || key == "model.placement") return "grid.variants";
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

// A compare config read and checked, ready to expand: the base run config and the grid object.
struct CompareConfig {
  std::string path;
  fs::path dir;                   // the compare config's directory: its relative paths start here
  json base;                      // the base run config with "set" applied, data paths absolute
  train::RunConfig base_config;   // the same, validated
  json grid;                      // the "grid" object ({} when absent)
  std::vector<std::string> keys;  // the grid's config-key axes ("train.batch_size"), in grid order
  LrSearchSpec search;            // the learning-rate search (search.points == 0: none)
  EquivalenceMargins equivalence;
};

// The compare config's top-level object; its kind and keys checked.
json read_compare_root(const std::string& path) {
  const json root = io::parse_strict(io::read_file(path, 1 << 20), path);
  if (!root.is_object()) throw InputError(fmt::format("{}: must be a JSON object", path));
  if (config_kind(path) == ConfigKind::run)
    throw InputError(fmt::format("{}: is a run config (model, task, optim, train), not a compare config; train it "
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
    if (merged.contains("grid") && merged["grid"].is_object() && !(root.contains("grid") && root["grid"].contains("lr")))
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
                                base.is_string() ? (config.dir / base.get<std::string>()).string() : path + ": base", ".");
  if (root.contains("set")) {
    const json& set = root.at("set");
    if (!set.is_object()) fail(path, "set", "must be an object of \"section.key\": value");
    for (const auto& [key, value] : set.items()) set_path(config.base, key, value, path);
    make_data_paths_absolute(config.base, config.dir);
  }
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
  if (!section.is_object()) fail(path, "equivalence", "must be an object such as {\"loss\": 0.05, \"accuracy_auc\": 0.02}");
  margins.from_config = true;
  for (const auto& [key, value] : section.items()) {
    double* into = key == "loss" ? &margins.loss : key == "accuracy_auc" ? &margins.accuracy_auc
                                 : key == "accuracy"                    ? &margins.accuracy
                                                                        : nullptr;
    if (!into) fail(path, "equivalence." + key, "unknown key (expected loss, accuracy_auc, accuracy)");
    const double upper = key == "loss" ? 10.0 : 1.0;  // a loss margin in nats; accuracies are fractions
    if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > upper)
      fail(path, "equivalence." + key, fmt::format("must be a number in (0, {:g}], got {}", upper, value.dump()));
    *into = value.get<double>();
  }
  return margins;
}

// Reads a compare config: its top level, the base run config and the grid's keys, all checked.
// Every error is an InputError naming the file and key.
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

// The built-in axes' values (variants, lr, seeds, layers, warmup) from the grid into plan, each
// checked; an axis the grid leaves out stays empty here.
void read_builtin_axes(const json& grid, const std::string& path, ComparePlan& plan) {
  plan.variants = read_axis<std::string>(
      grid, "variants", path,
      [&](const json& v) {
        if (!v.is_string() || !find_variant(v.get<std::string>())) {
          std::string names;
          for (const Variant& k : known_variants()) names += (names.empty() ? "" : ", ") + k.name;
          fail(path, "grid.variants", fmt::format("unknown variant {} (choose from {})", v.dump(), names));
        }
        return v.get<std::string>();
      },
      [](const std::string& v) { return v; });
  plan.lrs = read_axis<double>(
      grid, "lr", path,
      [&](const json& v) {
        if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 10)
          fail(path, "grid.lr", fmt::format("each learning rate must be a number in (0, 10], got {}", v.dump()));
        return v.get<double>();
      },
      [](const double& lr) { return "lr" + format_lr(lr); });
  plan.seeds = read_integer_axis<uint64_t>(grid, "seeds", path, 0, std::numeric_limits<int64_t>::max(),
                                          "each seed must be a non-negative integer", "s");
  plan.layers = read_integer_axis<int64_t>(grid, "layers", path, 1, 64, "each depth must be an integer in [1, 64]", "L");
  plan.warmups = read_axis<bool>(
      grid, "warmup", path,
      [&](const json& v) {
        if (!v.is_boolean()) fail(path, "grid.warmup", fmt::format("must be a list of true/false, got {}", v.dump()));
        return v.get<bool>();
      },
      [](const bool& w) { return w ? "warmup" : "nowarmup"; });
}

// The config-key axes' values: each validated as `--set` validates it (on the base, so a path is
// relative to the compare config like the base's paths). Their texts in run names go to
// plan.extra_axes; returned are the values as set in the runs' configs, one list per axis.
std::vector<std::vector<json>> read_config_key_axes(const CompareConfig& config, ComparePlan& plan) {
  std::vector<std::vector<json>> axis_values;
  for (const std::string& key : config.keys) {
    std::vector<json> values = read_axis<json>(
        config.grid, key, config.path,
        [&](const json& v) {
          json value = v;
          if ((key == "task.train_file" || key == "task.valid_file") && v.is_string() &&
              fs::path(v.get<std::string>()).is_relative())
            value = fs::absolute(config.dir / v.get<std::string>()).lexically_normal().string();
          json probe = config.base;
          set_path(probe, key, value, config.path);
          train::config_from_json(probe, fmt::format("{}: grid.{} = {}", config.path, key, v.dump()), ".");
          return value;
        },
        [&](const json& v) { return key + "=" + name_part(v); });
    std::vector<std::string> texts;
    for (const json& v : values) texts.push_back(name_part(v));
    plan.extra_axes.emplace_back(key, texts);
    axis_values.push_back(std::move(values));
  }
  return axis_values;
}

// A built-in axis the grid leaves out holds the base config's value; then the grid's size is checked.
void fill_missing_axes(const CompareConfig& config, const std::vector<std::vector<json>>& key_axis_values,
                       ComparePlan& plan) {
  const train::RunConfig& base = config.base_config;
  if (plan.variants.empty()) {
    const std::string norm = base.model.norm.name(), placement = nn::to_string(base.model.placement);
    const std::string name = variant_of(norm, placement);
    plan.variants.push_back(name.empty() ? norm + "-" + placement : name);
  }
  if (plan.lrs.empty()) plan.lrs.push_back(base.optim.lr);
  if (plan.seeds.empty()) plan.seeds.push_back(uint64_t(base.train.seed));
  if (plan.layers.empty()) plan.layers.push_back(base.model.num_layers);
  if (plan.warmups.empty()) plan.warmups.push_back(base.optim.warmup_steps > 0);
  if (std::find(plan.warmups.begin(), plan.warmups.end(), true) != plan.warmups.end() &&
      base.optim.warmup_steps == 0 && config.grid.contains("warmup"))
    fail(config.path, "grid.warmup", "contains true but the base config has optim.warmup_steps = 0");

  double total = double(plan.variants.size() * plan.lrs.size() * plan.seeds.size() * plan.layers.size() *
                        plan.warmups.size());
  for (const auto& values : key_axis_values) total *= double(values.size());
  if (total > 5000) fail(config.path, "grid", fmt::format("{:.0f} runs is more than the limit of 5000", total));
}

// One setting of the grid: every axis but variant, lr and seed fixed.
struct Setting {
  int64_t layers = 0;
  bool warmup = false;
  std::vector<size_t> key_values;  // an index into each config-key axis's values
  std::string label;               // "4 layers, no warmup, train.batch_size=4"
  std::string name_suffix;         // "_train.batch_size=4", the config-key axes' part of a run name
  std::vector<std::pair<std::string, std::string>> extra;  // config-key axes: key, value as in the name
};

// Every setting of the plan's axes, in grid order: layers slowest, then warmup, then each
// config-key axis (the first slowest).
std::vector<Setting> expand_grid(const ComparePlan& plan) {
  std::vector<std::vector<size_t>> combos{{}};
  for (const auto& [key, texts] : plan.extra_axes) {
    std::vector<std::vector<size_t>> next;
    for (const auto& c : combos)
      for (size_t i = 0; i < texts.size(); ++i) {
        next.push_back(c);
        next.back().push_back(i);
      }
    combos = std::move(next);
  }
  std::vector<Setting> settings;
  for (int64_t layers : plan.layers)
    for (bool warmup : plan.warmups)
      for (const std::vector<size_t>& combo : combos) {
        Setting setting{layers, warmup, combo, fmt::format("{} layers, {}", layers, warmup ? "warmup" : "no warmup"),
                        "", {}};
        for (size_t a = 0; a < combo.size(); ++a) {
          const std::string& key = plan.extra_axes[a].first;
          const std::string& text = plan.extra_axes[a].second[combo[a]];
          setting.label += fmt::format(", {}={}", key, text);
          setting.name_suffix += fmt::format("_{}={}", key, text);
          setting.extra.emplace_back(key, text);
        }
        settings.push_back(std::move(setting));
      }
  return settings;
}

// One run of the grid: the base config with the run's axis values set, validated as a whole.
RunSpec make_run_spec(const CompareConfig& config, const std::vector<std::vector<json>>& key_axis_values,
                      const ComparePlan& plan, const Setting& setting, double lr, const std::string& variant_name,
                      uint64_t seed) {
  const std::string& path = config.path;
  const Variant* variant = find_variant(variant_name);
  RunSpec spec;
  spec.variant = variant_name;
  spec.lr = lr;
  spec.layers = setting.layers;
  spec.warmup = setting.warmup;
  spec.seed = seed;
  spec.extra = setting.extra;
  spec.setting = setting.label;
  spec.name = fmt::format("{}_lr{}_L{}_{}{}_s{}", variant_name, format_lr(lr), setting.layers,
                          setting.warmup ? "warmup" : "nowarmup", setting.name_suffix, seed);
  json& file = spec.config_file;
  file = config.base;
  if (variant) {
    set_path(file, "model.norm", variant->norm, path);
    set_path(file, "model.placement", variant->placement, path);
  }
  set_path(file, "optim.lr", lr, path);
  set_path(file, "model.layers", setting.layers, path);
  if (config.grid.contains("warmup"))
    set_path(file, "optim.warmup_steps", setting.warmup ? config.base_config.optim.warmup_steps : 0, path);
  for (size_t a = 0; a < setting.key_values.size(); ++a)
    set_path(file, plan.extra_axes[a].first, key_axis_values[a][setting.key_values[a]], path);
  set_path(file, "train.seed", seed, path);
  set_path(file, "train.threads", 1, path);
  const std::string where = fmt::format("{}: run {}", path, spec.name);
  spec.config = train::config_from_json(file, where, ".");
  try {  // refused here, before any run of the grid starts, as the trainer would refuse it
    (void)train::fits_in_memory(spec.config);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", where, e.what()));
  }
  return spec;
}

// One variant and setting of a search: its rounds after round 0, each from the outcomes of the
// rounds before it, as far as finished runs in out_dir allow. Each pass adds the refinement round's
// midpoints (while rounds remain) and the convergence gate's extension (a rate past the range's
// edge where the lowest mean held-out loss sits, up to search.lr.min / max). New runs are appended
// to plan.runs.
LrSearchSpec::Block expand_search_block(const CompareConfig& config, const std::vector<std::vector<json>>& key_axis_values,
                                        ComparePlan& plan, const Setting& setting, const std::string& variant,
                                        const std::string& out_dir) {
  LrSearchSpec::Block block{variant, setting.label, 1, false, ""};
  std::vector<double> rates = initial_rates(config.search);
  int rounds = 0;  // refinement rounds run
  bool refining = config.search.rounds > 0;
  for (;;) {
    std::vector<RateOutcome> tested, tested_strict;
    std::vector<RunResult> results;
    results.reserve(rates.size() * plan.seeds.size());
    for (double lr : rates) {
      for (uint64_t seed : plan.seeds) {
        const RunSpec spec = make_run_spec(config, key_axis_values, plan, setting, lr, variant, seed);
        const fs::path dir = fs::path(out_dir) / "runs" / spec.name;
        if (out_dir.empty() || !fs::exists(dir / "summary.json")) {
          // Nothing more is known; with no round left and no extension possible, this block is settled.
          if (!refining && config.search.min >= config.search.from && config.search.max <= config.search.to) {
            block.settled = true;
            return block;
          }
          block.waiting_on = spec.name;
          return block;
        }
        results.push_back(read_run(spec, dir.string()));
      }
    }
    std::vector<const RunResult*> all;
    for (const RunResult& r : results) all.push_back(&r);
    for (double lr : rates) {
      std::vector<const RunResult*> runs;
      for (const RunResult* r : all)
        if (r->spec.lr == lr) runs.push_back(r);
      tested.push_back(rate_outcome(lr, runs));
      tested_strict.push_back(rate_outcome(lr, runs, LearnedRule::strict));
    }
    std::vector<double> next = extension_rates(rates, loss_curve(variant, setting.label, all).best_lr(), config.search);
    if (refining) {
      // Where either rule's learned fractions change: the strict rule's pairs first (the report's
      // boundary), then the slow-inclusive rule's, at most max_new in all.
      std::vector<double> mid = refine_rates(tested_strict, config.search.max_new);
      for (double lr : refine_rates(tested, config.search.max_new))
        if (int(mid.size()) < config.search.max_new && std::find(mid.begin(), mid.end(), lr) == mid.end()) mid.push_back(lr);
      if (mid.empty() || ++rounds >= config.search.rounds) refining = false;
      next.insert(next.end(), mid.begin(), mid.end());
    }
    if (next.empty()) break;  // the outcomes no longer change between neighbouring rates, the optimum is inside
    std::sort(next.begin(), next.end());
    for (double lr : next)
      for (uint64_t seed : plan.seeds)
        plan.runs.push_back(make_run_spec(config, key_axis_values, plan, setting, lr, variant, seed));
    rates.insert(rates.end(), next.begin(), next.end());
    std::sort(rates.begin(), rates.end());
    ++block.rounds_known;
  }
  block.settled = true;
  return block;
}

// A search plan: round 0 like a grid over its rates, then each variant and setting's later rounds.
void expand_search(const CompareConfig& config, const std::vector<std::vector<json>>& key_axis_values,
                   ComparePlan& plan, const std::string& out_dir) {
  plan.search = config.search;
  const std::vector<Setting> settings = expand_grid(plan);
  // The gate's extension adds at most one rate per round-0 step between from and min, and to and max.
  const double step = std::log(config.search.to / config.search.from) / double(config.search.points - 1);
  const double extensions = std::ceil(std::log(config.search.from / config.search.min) / step - 1e-9) +
                            std::ceil(std::log(config.search.max / config.search.to) / step - 1e-9);
  const double most = double(settings.size() * plan.variants.size() * plan.seeds.size()) *
                      double(config.search.points + config.search.rounds * config.search.max_new + extensions);
  if (most > 5000)
    fail(config.path, "search.lr", fmt::format("up to {:.0f} runs is more than the limit of 5000", most));
  for (const Setting& setting : settings) {
    plan.settings.push_back(setting.label);
    for (double lr : plan.lrs)
      for (const std::string& variant_name : plan.variants)
        for (uint64_t seed : plan.seeds)
          plan.runs.push_back(make_run_spec(config, key_axis_values, plan, setting, lr, variant_name, seed));
  }
  plan.search.first_round_runs = plan.runs.size();
  for (const Setting& setting : settings)
    for (const std::string& variant_name : plan.variants)
      plan.search.blocks.push_back(expand_search_block(config, key_axis_values, plan, setting, variant_name, out_dir));
  std::set<double> rates;
  for (const RunSpec& run : plan.runs) rates.insert(run.lr);
  plan.lrs.assign(rates.begin(), rates.end());
}

}  // namespace

// parse (the config and its axes) -> expand (the settings) -> one run spec per setting, lr,
// variant and seed, in that order. A search plan adds the later rounds that out_dir's finished
// runs determine.
ComparePlan load_compare_plan(const std::string& path, const std::string& out_dir) {
  const CompareConfig config = parse_compare_config(path);
  ComparePlan plan;
  plan.source = path;
  plan.base = config.base_config;
  plan.equivalence = config.equivalence;
  read_builtin_axes(config.grid, path, plan);
  if (config.search.enabled()) plan.lrs = initial_rates(config.search);
  const std::vector<std::vector<json>> key_axis_values = read_config_key_axes(config, plan);
  fill_missing_axes(config, key_axis_values, plan);
  if (config.search.enabled()) {
    expand_search(config, key_axis_values, plan, out_dir);
    return plan;
  }
  for (const Setting& setting : expand_grid(plan)) {
    plan.settings.push_back(setting.label);
    for (double lr : plan.lrs)
      for (const std::string& variant_name : plan.variants)
        for (uint64_t seed : plan.seeds)
          plan.runs.push_back(make_run_spec(config, key_axis_values, plan, setting, lr, variant_name, seed));
  }
  return plan;
}

std::string plan_size_sentence(const ComparePlan& plan) {
  std::string extra;
  for (const auto& [key, values] : plan.extra_axes) extra += fmt::format(" × {} values of {}", values.size(), key);
  if (!plan.search.enabled())
    return fmt::format("Grid: {} variants × {} learning rates × {} seeds × {} depths × {} warmup settings{} = {} runs.",
                       plan.variants.size(), plan.lrs.size(), plan.seeds.size(), plan.layers.size(),
                       plan.warmups.size(), extra, plan.runs.size());
  const size_t first = plan.search.first_round_runs, later = plan.runs.size() - first;
  return fmt::format(
      "Search: {} variants × {} settings × {} seeds: round 0 at {} rates from {} to {} ({} runs){} = {} runs at {} "
      "distinct rates.",
      plan.variants.size(), plan.settings.size(), plan.seeds.size(), first / std::max<size_t>(1, plan.variants.size() * plan.settings.size() * plan.seeds.size()),
      format_lr(plan.search.from), format_lr(plan.search.to), first,
      later == 0 ? "" : fmt::format(", then {} runs at the rates each variant and setting's later rounds chose", later),
      plan.runs.size(), plan.lrs.size());
}

bool in_shard(const ComparePlan& plan, size_t run_index, size_t shard_index, size_t shard_count) {
  if (!plan.search.enabled() || run_index < plan.search.first_round_runs) return run_index % shard_count == shard_index;
  // A later round's runs are known only once earlier rounds finish, so their index is not stable:
  // the run name decides (FNV-1a), the same in every shard.
  uint64_t hash = 14695981039346656037ULL;
  for (unsigned char ch : plan.runs[run_index].name) hash = (hash ^ ch) * 1099511628211ULL;
  return hash % shard_count == shard_index;
}

}  // namespace normlab::study
