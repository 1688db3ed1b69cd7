// A compare output directory's plan from its own files, named as compare names its runs.
#include "normlab/study/compare_dir.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "common.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/config.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Keys that are axes of their own (variant, lr, seed, depth, warmup) or never change the numbers.
bool own_axis(const std::string& key) {
  static const std::set<std::string> axes{"model.norm", "model.placement", "model.layers", "optim.warmup_steps",
                                          "optim.lr",   "train.seed",      "train.threads"};
  const auto& ignored = reuse_ignored_keys();
  return axes.count(key) || std::find(ignored.begin(), ignored.end(), key) != ignored.end();
}

// A small JSON file of the output directory, or discarded when it is missing, unreadable, not a
// regular file (a FIFO there must not hang the report) or not JSON.
json parsed_or_discarded(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path, size_t{1} << 20);
  } catch (const InputError&) {
    return json(json::value_t::discarded);
  }
  if (io::json_nesting_depth(text) > io::kMaxJsonDepth) return json(json::value_t::discarded);
  return json::parse(text, nullptr, false);
}

// Every planned run's config by name: configs/NAME.json, a started run's own config.json over it.
// A planned config the trainer would refuse is left out (its run's row says why).
std::map<std::string, train::RunConfig> planned_configs(const std::string& dir, const ComparePlan& started) {
  std::map<std::string, train::RunConfig> configs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "configs", ec)) {
    if (entry.path().extension() != ".json") continue;
    const json parsed = parsed_or_discarded(entry.path().string());
    if (!parsed.is_object()) continue;
    try {
      configs[entry.path().stem().string()] = train::config_from_json(parsed, entry.path().string(), dir, false);
    } catch (const InputError&) {
    }
  }
  for (const RunSpec& spec : started.runs) configs[fs::path(spec.dir).filename().string()] = spec.config;
  return configs;
}

// The config keys (not an axis of their own) whose value differs between the runs.
std::vector<std::string> extra_axis_keys(const std::map<std::string, train::RunConfig>& configs) {
  std::vector<std::string> keys;
  if (configs.empty()) return keys;
  const train::RunConfig& first = configs.begin()->second;
  for (const std::string& key : train::config_keys()) {
    if (own_axis(key)) continue;
    for (const auto& [name, c] : configs) {
      if (train::config_value(c, key) != train::config_value(first, key)) {
        keys.push_back(key);
        break;
      }
    }
  }
  return keys;
}

// One run as compare's plan has it: variant name, setting label and the values of the extra axes.
void name_as_compare(RunSpec& spec, const std::vector<std::string>& extra_keys) {
  const train::RunConfig& c = spec.config;
  spec.variant = variant_of(c.model);
  if (spec.variant.empty())
    spec.variant =
        fmt::format("model.norm={}, model.placement={}", c.model.norm.name(), nn::to_string(c.model.placement));
  spec.setting = fmt::format("{} layers, {}", spec.layers(), spec.warmup() ? "warmup" : "no warmup");
  spec.extra.clear();
  for (const std::string& key : extra_keys) {
    const std::string text = detail::value_text(train::config_value(c, key));
    spec.setting += fmt::format(", {}={}", key, text);
    spec.extra.emplace_back(key, text);
  }
}

template <typename T>
void append_unique(std::vector<T>& values, const T& value) {
  if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
}

// The plan's axes from its runs: variants in the study's order (known variants first), rates and
// seeds ascending, settings by depth, warmup first, then the extra axes' values.
void fill_axes(ComparePlan& plan, const std::vector<std::string>& extra_keys) {
  for (const Variant& v : known_variants())
    for (const RunSpec& r : plan.runs)
      if (r.variant == v.name) {
        plan.variants.push_back(v.name);
        break;
      }
  std::vector<RunSpec> by_setting = plan.runs;
  std::stable_sort(by_setting.begin(), by_setting.end(), [](const RunSpec& a, const RunSpec& b) {
    return std::tuple(a.layers(), b.warmup(), a.extra) < std::tuple(b.layers(), a.warmup(), b.extra);
  });
  for (const RunSpec& r : by_setting) {
    append_unique(plan.variants, r.variant);
    append_unique(plan.lrs, r.lr());
    append_unique(plan.seeds, r.seed());
    append_unique(plan.layers, r.layers());
    append_unique(plan.warmups, r.warmup());
    append_unique(plan.settings, r.setting);
  }
  std::sort(plan.lrs.begin(), plan.lrs.end());
  std::sort(plan.seeds.begin(), plan.seeds.end());
  for (size_t k = 0; k < extra_keys.size(); ++k) {
    std::vector<std::string> values;
    for (const RunSpec& r : by_setting) append_unique(values, r.extra[k].second);
    plan.extra_axes.emplace_back(extra_keys[k], values);
  }
}

// The plan of the compare config DIR/compare-source.json names, each run's directory in DIR/runs/;
// nullopt when there is none, it no longer loads, or it does not plan a run that was started.
std::optional<ComparePlan> recorded_plan(const std::string& dir, const std::vector<std::string>& started) {
  const json source = parsed_or_discarded((fs::path(dir) / "compare-source.json").string());
  if (!source.is_object() || !source.contains("config") || !source["config"].is_string()) return std::nullopt;
  ComparePlan plan;
  try {
    plan = load_compare_plan(source["config"].get<std::string>(), dir);
  } catch (const InputError&) {
    return std::nullopt;
  }
  std::set<std::string> names;
  for (RunSpec& spec : plan.runs) {
    spec.dir = (fs::path(dir) / "runs" / spec.name).string();
    names.insert(spec.name);
  }
  for (const std::string& run : started)
    if (!names.count(fs::path(run).filename().string())) return std::nullopt;
  return plan;
}

}  // namespace

void record_compare_source(const std::string& dir, const std::string& config_path) {
  const json source = {{"config", fs::absolute(config_path).lexically_normal().string()}};
  io::write_file_atomic((fs::path(dir) / "compare-source.json").string(), source.dump(2) + "\n");
}

ComparePlan plan_from_compare_dir(const std::string& dir, const std::vector<std::string>& started) {
  if (std::optional<ComparePlan> plan = recorded_plan(dir, started)) return *plan;
  ComparePlan read = plan_from_run_dirs(started, {});
  const std::map<std::string, train::RunConfig> configs = planned_configs(dir, read);
  const std::vector<std::string> extra_keys = extra_axis_keys(configs);
  ComparePlan plan;
  plan.title = "normlab compare report";
  plan.source = dir;
  plan.base = read.base;
  std::set<std::string> started_names;
  for (RunSpec spec : read.runs) {
    name_as_compare(spec, extra_keys);
    started_names.insert(fs::path(spec.dir).filename().string());
    plan.runs.push_back(std::move(spec));
  }
  for (const auto& [name, config] : configs) {
    if (started_names.count(name)) continue;
    RunSpec spec;
    spec.name = name;
    spec.dir = (fs::path(dir) / "runs" / name).string();
    spec.config = config;
    name_as_compare(spec, extra_keys);
    plan.runs.push_back(std::move(spec));
  }
  fill_axes(plan, extra_keys);
  // compare's order: setting, then learning rate, variant, seed (runs.csv and the tables follow it).
  auto rank = [&](const RunSpec& r) {
    const auto at = [](const auto& values, const auto& value) {
      return size_t(std::find(values.begin(), values.end(), value) - values.begin());
    };
    return std::tuple(at(plan.settings, r.setting), r.lr(), at(plan.variants, r.variant), r.seed(), r.name);
  };
  std::stable_sort(plan.runs.begin(), plan.runs.end(),
                   [&](const RunSpec& a, const RunSpec& b) { return rank(a) < rank(b); });
  // The setup's "warmup N steps where on" reads the base config: one of a run with warmup on.
  for (const RunSpec& r : read.runs)
    if (r.warmup()) {
      plan.base = r.config;
      break;
    }
  return plan;
}

}  // namespace normlab::study
