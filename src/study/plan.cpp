// The compare grid: variants, the compare config, its expansion into runs. load_compare_plan is
// parse -> axes -> expand -> run specs, each step's input checked before the next:
//   parse_compare_config   the file, its base run config and "set", the grid's keys (compare_config.cpp)
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
#include "compare_config.hpp"
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
using detail::CompareConfig;
using detail::fail;
using detail::format_lr;
using detail::parse_compare_config;
using detail::set_path;
using nlohmann::json;

// The variant a model config trains: nn::variant_of on its norm, placement and residual scheme.
std::string variant_of(const train::ModelConfig& model) {
  return nn::variant_of(model.norm.name(), nn::to_string(model.placement), model.residual.name());
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
  plan.layers =
      read_integer_axis<int64_t>(grid, "layers", path, 1, 64, "each depth must be an integer in [1, 64]", "L");
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
    const std::string name = variant_of(norm, placement, base.model.residual.name());
    plan.variants.push_back(name.empty() ? norm + "-" + placement : name);
  }
  if (plan.lrs.empty()) plan.lrs.push_back(base.optim.lr);
  if (plan.seeds.empty()) plan.seeds.push_back(uint64_t(base.train.seed));
  if (plan.layers.empty()) plan.layers.push_back(base.model.num_layers);
  if (plan.warmups.empty()) plan.warmups.push_back(base.optim.warmup_steps > 0);
  if (std::find(plan.warmups.begin(), plan.warmups.end(), true) != plan.warmups.end() && base.optim.warmup_steps == 0 &&
      config.grid.contains("warmup"))
    fail(config.path, "grid.warmup", "contains true but the base config has optim.warmup_steps = 0");

  double total =
      double(plan.variants.size() * plan.lrs.size() * plan.seeds.size() * plan.layers.size() * plan.warmups.size());
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
                        "",     {}};
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
  spec.extra = setting.extra;
  spec.setting = setting.label;
  spec.name = fmt::format("{}_lr{}_L{}_{}{}_s{}", variant_name, format_lr(lr), setting.layers,
                          setting.warmup ? "warmup" : "nowarmup", setting.name_suffix, seed);
  json& file = spec.config_file;
  file = config.base;
  if (variant) {
    set_path(file, "model.norm", variant->norm, path);
    set_path(file, "model.placement", variant->placement, path);
    // Only where it matters, so that a grid of plain-sum variants writes the configs it always wrote.
    if (variant->residual != "plain" || config.base_config.model.residual.name() != "plain")
      set_path(file, "model.residual", variant->residual, path);
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
LrSearchSpec::Block expand_search_block(const CompareConfig& config,
                                        const std::vector<std::vector<json>>& key_axis_values, ComparePlan& plan,
                                        const Setting& setting, const std::string& variant,
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
        if (r->spec.lr() == lr) runs.push_back(r);
      tested.push_back(rate_outcome(lr, runs));
      tested_strict.push_back(rate_outcome(lr, runs, LearnedRule::strict));
    }
    std::vector<double> next = extension_rates(rates, loss_curve(variant, setting.label, all).best_lr(), config.search);
    if (refining) {
      // Where either rule's learned fractions change: the strict rule's pairs first (the report's
      // boundary), then the slow-inclusive rule's, at most max_new in all.
      std::vector<double> mid = refine_rates(tested_strict, config.search.max_new);
      for (double lr : refine_rates(tested, config.search.max_new))
        if (int(mid.size()) < config.search.max_new && std::find(mid.begin(), mid.end(), lr) == mid.end())
          mid.push_back(lr);
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
  for (const RunSpec& run : plan.runs) rates.insert(run.lr());
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
      plan.variants.size(), plan.settings.size(), plan.seeds.size(),
      first / std::max<size_t>(1, plan.variants.size() * plan.settings.size() * plan.seeds.size()),
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
