// The compare grid: variants, the compare config, its expansion into runs.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "common.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/io/suggest.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/study/compare.hpp"
#include "normlab/train/config.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;
using detail::fail;
using detail::format_lr;
using detail::set_path;

const std::vector<Variant>& known_variants() {
  static const std::vector<Variant> variants{
      {"none", "none", "pre", "no normalization: x + f(x)", "#000000"},
      {"post-ln", "layernorm", "post", "LayerNorm after the residual sum (original Transformer)", "#D55E00"},
      {"pre-ln", "layernorm", "pre", "LayerNorm on each sublayer's input, plus a final LayerNorm", "#0072B2"},
      {"rmsnorm", "rmsnorm", "pre", "RMSNorm (no centering), pre placement", "#009E73"},
      {"batchnorm", "batchnorm", "pre", "BatchNorm over the batch's real tokens, pre placement", "#CC79A7"},
      {"rezero", "rezero", "pre", "no normalization: x + alpha * f(x), alpha = 0 at init", "#E69F00"},
      {"dyt", "dyt", "pre", "Dynamic Tanh gamma * tanh(a x) + beta in place of each norm, pre placement", "#56B4E9"},
      {"post-rmsnorm", "rmsnorm", "post", "RMSNorm, post placement", "#117733"},
      {"post-batchnorm", "batchnorm", "post", "BatchNorm, post placement", "#882255"},
      {"post-dyt", "dyt", "post", "Dynamic Tanh, post placement", "#999999"},
  };
  return variants;
}

const Variant* find_variant(const std::string& name) {
  for (const Variant& v : known_variants())
    if (v.name == name) return &v;
  return nullptr;
}

std::string variant_of(const std::string& norm, const std::string& placement) {
  for (const Variant& v : known_variants())
    if (v.norm == norm && (v.placement == placement || norm == "none" || norm == "rezero")) return v.name;
  return "";
}

std::string block_formula(const std::string& norm, const std::string& placement, bool final_norm) {
  if (norm == "none") return "x = x + f(x) (no normalization)";
  if (norm == "rezero") return "x = x + alpha * f(x) (ReZero, alpha = 0 at init; no normalization)";
  const std::string n = norm == "layernorm"   ? "LN"
                        : norm == "rmsnorm"   ? "RMSNorm"
                        : norm == "batchnorm" ? "BN"
                        : norm == "dyt"       ? "DyT"
                                              : norm;
  if (placement == "post") return fmt::format("x = {}(x + f(x)) (post-norm)", n);
  return fmt::format("x = x + f({}(x)) (pre-norm{})", n, final_norm ? fmt::format(", final {} after the stack", n) : "");
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
    compare = compare || key == "set" || key == "grid";
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

}  // namespace

ComparePlan load_compare_plan(const std::string& path) {
  ComparePlan plan;
  plan.source = path;
  const json root = io::parse_strict(io::read_file(path, 1 << 20), path);
  if (!root.is_object()) throw InputError(fmt::format("{}: must be a JSON object", path));
  if (config_kind(path) == ConfigKind::run)
    throw InputError(fmt::format("{}: is a run config (model, task, optim, train), not a compare config; train it "
                                 "with: normlab train --config {} (or compare with a config whose \"base\" is it)",
                                 path, path));
  for (const auto& [key, value] : root.items())
    if (key != "base" && key != "set" && key != "grid") fail(path, key, "unknown key (expected base, set, grid)");
  if (!root.contains("base")) fail(path, "base", "missing (a run config path or object)");

  // The base run config: a file next to the compare config, or inline.
  const fs::path dir = fs::path(path).parent_path();
  const json& base = root.at("base");
  fs::path base_dir = dir;
  if (base.is_string()) {
    const fs::path base_path = dir / base.get<std::string>();
    base_dir = base_path.parent_path();
    // A run config may itself build on another ("base"): resolved here, its paths made absolute.
    plan.base = train::load_config_json(base_path.string());
  } else if (base.is_object()) {
    plan.base = base;
  } else {
    fail(path, "base", "must be a path (string) or a run config (object)");
  }
  // Data file paths are relative to the file that names them; the runs' configs live elsewhere, so
  // make them absolute now.
  auto absolute_paths = [](json& config, const fs::path& relative_to) {
    if (!config.contains("task") || !config["task"].is_object()) return;
    for (const char* key : {"train_file", "valid_file"}) {
      if (!config["task"].contains(key)) continue;
      json& v = config["task"][key];
      if (v.is_string() && fs::path(v.get<std::string>()).is_relative())
        v = fs::absolute(relative_to / v.get<std::string>()).lexically_normal().string();
      if (v.is_null()) config["task"].erase(key);
    }
  };
  absolute_paths(plan.base, base_dir);
  // The base alone first, so a mistake in it is reported against it and one in "set" against "set".
  (void)train::config_from_json(plan.base, base.is_string() ? (dir / base.get<std::string>()).string() : path + ": base",
                                ".");
  if (root.contains("set")) {
    const json& set = root.at("set");
    if (!set.is_object()) fail(path, "set", "must be an object of \"section.key\": value");
    for (const auto& [key, value] : set.items()) set_path(plan.base, key, value, path);
    absolute_paths(plan.base, dir);
  }
  // Validate the base once, so a typo is reported against the file the user wrote.
  const train::RunConfig base_config = train::config_from_json(plan.base, root.contains("set") ? path + ": set" : path, ".");

  const json grid = root.contains("grid") ? root.at("grid") : json::object();
  if (!grid.is_object()) fail(path, "grid", "must be an object");
  const std::vector<std::string> all_keys = train::config_keys();
  std::vector<std::string> extra_keys;
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
    extra_keys.push_back(key);
  }

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
  plan.seeds = read_axis<uint64_t>(
      grid, "seeds", path,
      [&](const json& v) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
          fail(path, "grid.seeds", fmt::format("each seed must be a non-negative integer, got {}", v.dump()));
        return v.get<uint64_t>();
      },
      [](const uint64_t& s) { return fmt::format("s{}", s); });
  plan.layers = read_axis<int64_t>(
      grid, "layers", path,
      [&](const json& v) {
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 64)
          fail(path, "grid.layers", fmt::format("each depth must be an integer in [1, 64], got {}", v.dump()));
        return v.get<int64_t>();
      },
      [](const int64_t& l) { return fmt::format("L{}", l); });
  plan.warmups = read_axis<bool>(
      grid, "warmup", path,
      [&](const json& v) {
        if (!v.is_boolean()) fail(path, "grid.warmup", fmt::format("must be a list of true/false, got {}", v.dump()));
        return v.get<bool>();
      },
      [](const bool& w) { return w ? "warmup" : "nowarmup"; });

  // Any other config key: each value validated as `--set` validates it (on the base, so a path is
  // relative to this file like the base's paths).
  std::vector<std::vector<json>> extra_values;
  for (const std::string& key : extra_keys) {
    std::vector<json> values = read_axis<json>(
        grid, key, path,
        [&](const json& v) {
          json value = v;
          if ((key == "task.train_file" || key == "task.valid_file") && v.is_string() &&
              fs::path(v.get<std::string>()).is_relative())
            value = fs::absolute(dir / v.get<std::string>()).lexically_normal().string();
          json probe = plan.base;
          set_path(probe, key, value, path);
          train::config_from_json(probe, fmt::format("{}: grid.{} = {}", path, key, v.dump()), ".");
          return value;
        },
        [&](const json& v) { return key + "=" + name_part(v); });
    std::vector<std::string> texts;
    for (const json& v : values) texts.push_back(name_part(v));
    plan.extra_axes.emplace_back(key, texts);
    extra_values.push_back(std::move(values));
  }

  // Missing axes keep the base config's value.
  if (plan.variants.empty()) {
    const std::string name = variant_of(base_config.model.norm, base_config.model.placement);
    plan.variants.push_back(name.empty() ? base_config.model.norm + "-" + base_config.model.placement : name);
  }
  if (plan.lrs.empty()) plan.lrs.push_back(base_config.optim.lr);
  if (plan.seeds.empty()) plan.seeds.push_back(uint64_t(base_config.train.seed));
  if (plan.layers.empty()) plan.layers.push_back(base_config.model.layers);
  if (plan.warmups.empty()) plan.warmups.push_back(base_config.optim.warmup_steps > 0);
  const int64_t base_warmup = base_config.optim.warmup_steps;
  if (std::find(plan.warmups.begin(), plan.warmups.end(), true) != plan.warmups.end() && base_warmup == 0 &&
      grid.contains("warmup"))
    fail(path, "grid.warmup", "contains true but the base config has optim.warmup_steps = 0");

  double total = double(plan.variants.size() * plan.lrs.size() * plan.seeds.size() * plan.layers.size() *
                        plan.warmups.size());
  for (const auto& values : extra_values) total *= double(values.size());
  if (total > 5000) fail(path, "grid", fmt::format("{:.0f} runs is more than the limit of 5000", total));

  // Every combination of the extra axes, first axis slowest.
  std::vector<std::vector<size_t>> combos{{}};
  for (const auto& values : extra_values) {
    std::vector<std::vector<size_t>> next;
    for (const auto& c : combos)
      for (size_t i = 0; i < values.size(); ++i) {
        next.push_back(c);
        next.back().push_back(i);
      }
    combos = std::move(next);
  }

  const bool explicit_warmup = grid.contains("warmup");
  for (int64_t layers : plan.layers)
    for (bool warmup : plan.warmups)
      for (const std::vector<size_t>& combo : combos) {
        std::string setting = fmt::format("{} layers, {}", layers, warmup ? "warmup" : "no warmup");
        std::string extra_name;
        std::vector<std::pair<std::string, std::string>> extra;
        for (size_t a = 0; a < combo.size(); ++a) {
          const std::string& key = plan.extra_axes[a].first;
          const std::string& text = plan.extra_axes[a].second[combo[a]];
          setting += fmt::format(", {}={}", key, text);
          extra_name += fmt::format("_{}={}", key, text);
          extra.emplace_back(key, text);
        }
        plan.settings.push_back(setting);
        for (double lr : plan.lrs)
          for (const std::string& variant_name : plan.variants)
            for (uint64_t seed : plan.seeds) {
              const Variant* variant = find_variant(variant_name);
              RunSpec spec;
              spec.variant = variant_name;
              spec.lr = lr;
              spec.layers = layers;
              spec.warmup = warmup;
              spec.seed = seed;
              spec.extra = extra;
              spec.setting = setting;
              spec.name = fmt::format("{}_lr{}_L{}_{}{}_s{}", variant_name, format_lr(lr), layers,
                                      warmup ? "warmup" : "nowarmup", extra_name, seed);
              spec.config = plan.base;
              if (variant) {
                set_path(spec.config, "model.norm", variant->norm, path);
                set_path(spec.config, "model.placement", variant->placement, path);
              }
              set_path(spec.config, "optim.lr", lr, path);
              set_path(spec.config, "model.layers", layers, path);
              if (explicit_warmup) set_path(spec.config, "optim.warmup_steps", warmup ? base_warmup : 0, path);
              for (size_t a = 0; a < combo.size(); ++a)
                set_path(spec.config, plan.extra_axes[a].first, extra_values[a][combo[a]], path);
              set_path(spec.config, "train.seed", seed, path);
              set_path(spec.config, "train.threads", 1, path);
              train::config_from_json(spec.config, fmt::format("{}: run {}", path, spec.name), ".");
              plan.runs.push_back(std::move(spec));
            }
      }
  return plan;
}

}  // namespace normlab::study
