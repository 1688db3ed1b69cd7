// `normlab report RUN_DIR...`: any run directories (trained by hand or by compare) as the runs of
// one report, labelled by what differs between them.
#include "normlab/study/run_dirs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "common.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/study/reuse.hpp"
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

std::vector<std::string> run_subdirectories(const std::string& dir,
                                            const std::function<bool(const std::string&)>& keep) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_directory() && entry.path().filename().string()[0] != '.' && keep(entry.path().string()))
      out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// A folder of runs, as `normlab train --out runs/NAME` leaves them: a directory without a
// config.json of its own whose subdirectories (not hidden) have one. Empty when DIR is not that.
std::vector<std::string> folder_runs(const std::string& dir) {
  if (!fs::is_directory(dir) || fs::exists(fs::path(dir) / "config.json")) return {};
  return run_subdirectories(dir, [](const std::string& sub) { return fs::exists(fs::path(sub) / "config.json"); });
}

// The run directories DIR stands for: a compare output directory's runs/, a folder's runs, or DIR.
std::vector<std::string> runs_of(const std::string& dir) {
  if (is_compare_dir(dir)) {
    std::vector<std::string> runs = compare_dir_runs(dir);
    if (runs.empty()) throw InputError(fmt::format("{}: a compare output directory with no runs in runs/", dir));
    return runs;
  }
  if (std::vector<std::string> runs = folder_runs(dir); !runs.empty()) return runs;
  return {dir};
}

// The run's config, as the trainer wrote it, parsed and validated (its data files may have moved).
train::RunConfig read_run_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  if (!fs::is_directory(dir)) throw InputError(fmt::format("{}: not a directory", dir));
  if (!fs::exists(path))
    throw InputError(
        fmt::format("{}: no config.json: not a run directory (nor a folder of run directories, nor a "
                    "compare output directory with runs/)",
                    dir));
  const std::string text = io::read_file(path.string(), 1 << 20);
  io::require_json_depth(text, path.string());
  const json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object())
    throw InputError(fmt::format("{}: not a JSON object", path.string()));
  return train::config_from_json(parsed, path.string(), ".", false);
}

std::string canonical(const std::string& dir) { return fs::weakly_canonical(fs::absolute(dir)).string(); }

// The run directories the arguments name (a compare output directory stands for its runs/, a
// folder of runs for the runs in it, in name order), and each labelled run's label by its
// canonical path. InputError for an empty compare directory, an empty label, or a label naming a
// directory that is not an argument.
struct LabelledRuns {
  std::vector<std::string> dirs;
  std::map<std::string, std::string> label_of;  // canonical run dir -> label
};

LabelledRuns expand_run_dirs(const std::vector<std::string>& dirs,
                             const std::vector<std::pair<std::string, std::string>>& labels) {
  LabelledRuns runs;
  std::set<std::string> inputs;
  for (const std::string& dir : dirs) {
    inputs.insert(canonical(dir));
    const std::vector<std::string> dir_runs = runs_of(dir);
    runs.dirs.insert(runs.dirs.end(), dir_runs.begin(), dir_runs.end());
  }
  for (const auto& [label, dir] : labels) {
    if (label.empty()) throw InputError(fmt::format("--label ={}: the label is empty", dir));
    if (!inputs.count(canonical(dir)))
      throw InputError(fmt::format("--label {}={}: {} is not one of the run directories given", label, dir, dir));
    for (const std::string& run : runs_of(dir)) runs.label_of[canonical(run)] = label;
  }
  return runs;
}

// Each run's resolved config; InputError naming two runs of different tasks.
std::vector<train::RunConfig> read_run_configs(const std::vector<std::string>& run_dirs) {
  std::vector<train::RunConfig> configs;
  for (const std::string& dir : run_dirs) configs.push_back(read_run_config(dir));
  auto quoted = [](data::TaskKind kind) { return json(data::to_string(kind)).dump(); };
  for (size_t i = 1; i < configs.size(); ++i)
    if (configs[i].task.name != configs[0].task.name)
      throw InputError(
          fmt::format("{} trains task {} but {} trains task {}: a report compares runs of one task; "
                      "make one report per task",
                      run_dirs[0], quoted(configs[0].task.name), run_dirs[i], quoted(configs[i].task.name)));
  return configs;
}

// The config keys whose value differs between the runs, in config key order; seed and learning
// rate have their own axes, and keys that never change the numbers are left out.
std::vector<std::string> differing_keys(const std::vector<train::RunConfig>& configs) {
  std::vector<std::string> differing;
  for (const std::string& key : train::config_keys()) {
    if (key == "train.seed" || key == "optim.lr" || key == "train.threads") continue;
    if (std::find(reuse_ignored_keys().begin(), reuse_ignored_keys().end(), key) != reuse_ignored_keys().end())
      continue;
    for (const train::RunConfig& c : configs)
      if (train::config_value(c, key) != train::config_value(configs[0], key)) {
        differing.push_back(key);
        break;
      }
  }
  return differing;
}

// The series a run belongs to: its --label, else its values of the differing keys
// ("model.norm=rmsnorm, train.batch_size=4"), else its variant name, else "run".
std::string series_of(const std::string& run_dir, const train::RunConfig& config, const LabelledRuns& runs,
                      const std::vector<std::string>& differing) {
  if (auto it = runs.label_of.find(canonical(run_dir)); it != runs.label_of.end()) return it->second;
  std::string label;
  for (const std::string& key : differing)
    label +=
        fmt::format("{}{}={}", label.empty() ? "" : ", ", key, detail::value_text(train::config_value(config, key)));
  if (label.empty()) label = variant_of(config.model);
  return label.empty() ? "run" : label;
}

// The run's directory name, made unique among `names` (taken) with "-2", "-3", ...
std::string unique_name(const std::string& run_dir, std::set<std::string>& names) {
  std::string base = fs::path(run_dir).lexically_normal().filename().string();
  if (base.empty()) base = fs::path(run_dir).lexically_normal().parent_path().filename().string();  // "dir/"
  std::string name = base;
  for (int k = 2; names.count(name); ++k) name = fmt::format("{}-{}", base, k);
  names.insert(name);
  return name;
}

template <typename T>
void add_unique(std::vector<T>& values, const T& value) {
  if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
}

}  // namespace

ComparePlan plan_from_run_dirs(const std::vector<std::string>& dirs,
                               const std::vector<std::pair<std::string, std::string>>& labels) {
  if (dirs.empty()) throw InputError("report: give at least one run directory");
  const LabelledRuns runs = expand_run_dirs(dirs, labels);
  const std::vector<train::RunConfig> configs = read_run_configs(runs.dirs);
  const std::vector<std::string> differing = differing_keys(configs);

  ComparePlan plan;
  plan.title = "normlab report";
  plan.base = configs[0];
  plan.source = runs.dirs.size() == 1 ? runs.dirs[0] : fmt::format("{} run directories", runs.dirs.size());
  plan.settings = {""};
  std::set<std::string> names;
  for (size_t i = 0; i < runs.dirs.size(); ++i) {
    const train::RunConfig& c = configs[i];
    RunSpec spec;
    spec.dir = runs.dirs[i];
    spec.config = c;
    spec.name = unique_name(runs.dirs[i], names);
    spec.variant = series_of(runs.dirs[i], c, runs, differing);
    add_unique(plan.variants, spec.variant);
    add_unique(plan.lrs, spec.lr());
    add_unique(plan.seeds, spec.seed());
    add_unique(plan.layers, spec.layers());
    add_unique(plan.warmups, spec.warmup());
    plan.runs.push_back(std::move(spec));
  }
  std::sort(plan.lrs.begin(), plan.lrs.end());
  return plan;
}

}  // namespace normlab::study
