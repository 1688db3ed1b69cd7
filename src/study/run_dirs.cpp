// `normlab report RUN_DIR...`: any run directories (trained by hand or by compare) as the runs of
// one report, labelled by what differs between them.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "common.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/study/compare.hpp"
#include "normlab/train/config.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_compare_dir(const std::string& dir) {
  return fs::is_directory(fs::path(dir) / "runs") && !fs::exists(fs::path(dir) / "checkpoint.safetensors") &&
         !fs::exists(fs::path(dir) / "config.json");
}

std::vector<std::string> compare_dir_runs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "runs", ec))
    if (entry.is_directory()) out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The run's resolved config, as the trainer wrote it.
json read_run_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  if (!fs::is_directory(dir)) throw InputError(fmt::format("{}: not a directory", dir));
  if (!fs::exists(path))
    throw InputError(fmt::format("{}: no config.json: not a run directory (nor a compare output directory with runs/)", dir));
  const std::string text = io::read_file(path.string(), 1 << 20);
  io::require_json_depth(text, path.string());
  const json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) throw InputError(fmt::format("{}: not a JSON object", path.string()));
  return train::to_json(train::config_from_json(parsed, path.string(), ".", false));
}

const json& at_key(const json& config, const std::string& key) {
  const auto dot = key.find('.');
  return config.at(key.substr(0, dot)).at(key.substr(dot + 1));
}

}  // namespace

ComparePlan plan_from_run_dirs(const std::vector<std::string>& dirs,
                               const std::vector<std::pair<std::string, std::string>>& labels) {
  if (dirs.empty()) throw InputError("report: give at least one run directory");
  std::vector<std::string> run_dirs;
  std::map<std::string, std::string> label_of;  // canonical run dir -> label
  auto canonical = [](const std::string& d) { return fs::weakly_canonical(fs::absolute(d)).string(); };
  std::set<std::string> inputs;
  for (const std::string& dir : dirs) {
    inputs.insert(canonical(dir));
    if (is_compare_dir(dir)) {
      const std::vector<std::string> runs = compare_dir_runs(dir);
      if (runs.empty()) throw InputError(fmt::format("{}: a compare output directory with no runs in runs/", dir));
      run_dirs.insert(run_dirs.end(), runs.begin(), runs.end());
    } else {
      run_dirs.push_back(dir);
    }
  }
  for (const auto& [label, dir] : labels) {
    if (label.empty()) throw InputError(fmt::format("--label ={}: the label is empty", dir));
    if (!inputs.count(canonical(dir)))
      throw InputError(fmt::format("--label {}={}: {} is not one of the run directories given", label, dir, dir));
    if (is_compare_dir(dir)) {
      for (const std::string& run : compare_dir_runs(dir)) label_of[canonical(run)] = label;
    } else {
      label_of[canonical(dir)] = label;
    }
  }

  std::vector<json> configs;
  for (const std::string& dir : run_dirs) configs.push_back(read_run_config(dir));
  for (size_t i = 1; i < configs.size(); ++i)
    if (configs[i]["task"]["name"] != configs[0]["task"]["name"])
      throw InputError(fmt::format("{} trains task {} but {} trains task {}: a report compares runs of one task; "
                                   "make one report per task",
                                   run_dirs[0], configs[0]["task"]["name"].dump(), run_dirs[i],
                                   configs[i]["task"]["name"].dump()));

  // The keys that differ between the runs name them (seed and learning rate have their own axes).
  std::vector<std::string> differing;
  for (const std::string& key : train::config_keys()) {
    if (key == "train.seed" || key == "optim.lr" || key == "train.threads") continue;
    if (std::find(reuse_ignored_keys().begin(), reuse_ignored_keys().end(), key) != reuse_ignored_keys().end())
      continue;
    for (const json& c : configs)
      if (at_key(c, key) != at_key(configs[0], key)) {
        differing.push_back(key);
        break;
      }
  }

  ComparePlan plan;
  plan.title = "normlab report";
  plan.base = configs[0];
  plan.source = run_dirs.size() == 1 ? run_dirs[0] : fmt::format("{} run directories", run_dirs.size());
  plan.settings = {""};
  std::set<std::string> names;
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    const json& c = configs[i];
    RunSpec spec;
    spec.dir = run_dirs[i];
    spec.config = c;
    spec.lr = c["optim"]["lr"].get<double>();
    spec.seed = c["train"]["seed"].get<uint64_t>();
    spec.layers = c["model"]["layers"].get<int64_t>();
    spec.warmup = c["optim"]["warmup_steps"].get<int64_t>() > 0;
    std::string name = fs::path(run_dirs[i]).lexically_normal().filename().string();
    if (name.empty()) name = fs::path(run_dirs[i]).lexically_normal().parent_path().filename().string();
    for (int k = 2; names.count(name); ++k) name = fmt::format("{}-{}", fs::path(run_dirs[i]).filename().string(), k);
    names.insert(name);
    spec.name = name;
    if (auto it = label_of.find(canonical(run_dirs[i])); it != label_of.end()) {
      spec.variant = it->second;
    } else {
      std::string label;
      for (const std::string& key : differing)
        label += fmt::format("{}{}={}", label.empty() ? "" : ", ", key, detail::value_text(at_key(c, key)));
      if (label.empty()) label = variant_of(c["model"]["norm"], c["model"]["placement"]);
      spec.variant = label.empty() ? "run" : label;
    }
    if (std::find(plan.variants.begin(), plan.variants.end(), spec.variant) == plan.variants.end())
      plan.variants.push_back(spec.variant);
    if (std::find(plan.lrs.begin(), plan.lrs.end(), spec.lr) == plan.lrs.end()) plan.lrs.push_back(spec.lr);
    if (std::find(plan.seeds.begin(), plan.seeds.end(), spec.seed) == plan.seeds.end()) plan.seeds.push_back(spec.seed);
    if (std::find(plan.layers.begin(), plan.layers.end(), spec.layers) == plan.layers.end())
      plan.layers.push_back(spec.layers);
    if (std::find(plan.warmups.begin(), plan.warmups.end(), spec.warmup) == plan.warmups.end())
      plan.warmups.push_back(spec.warmup);
    plan.runs.push_back(std::move(spec));
  }
  std::sort(plan.lrs.begin(), plan.lrs.end());
  return plan;
}

}  // namespace normlab::study
