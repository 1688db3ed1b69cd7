// Which runs already on disk were trained with the config the grid asks for now. A run is reused
// only when its resolved config equals the requested one and its data files (data.json) have the
// content they have now, so a report never shows old numbers under new settings or new data.
#include "normlab/study/reuse.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/data_fingerprint.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<std::string>& reuse_ignored_keys() {
  static const std::vector<std::string> keys{"train.log_every", "train.checkpoint_every"};
  return keys;
}

namespace {

std::string shown(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// The differences between the run's stored config.json and the requested config, or one line
// saying why the stored one cannot be read.
std::vector<std::string> differences(const fs::path& run_dir, const train::RunConfig& requested_config) {
  const fs::path stored_path = run_dir / "config.json";
  if (!fs::exists(stored_path)) return {"config.json is missing"};
  train::RunConfig stored;
  try {
    const std::string text = io::read_file(stored_path.string(), 1 << 20);
    if (io::json_nesting_depth(text) > io::kMaxJsonDepth) return {"config.json is not a config"};
    const json parsed = json::parse(text, nullptr, false);
    if (parsed.is_discarded()) return {"config.json is not valid JSON"};
    stored = train::config_from_json(parsed, stored_path.string(), ".", false);
  } catch (const InputError& e) {
    return {fmt::format("config.json is not a valid config ({})", e.what())};
  }
  std::vector<std::string> changes;
  for (const std::string& key : train::config_keys()) {
    if (std::find(reuse_ignored_keys().begin(), reuse_ignored_keys().end(), key) != reuse_ignored_keys().end())
      continue;
    const json a = train::config_value(stored, key), b = train::config_value(requested_config, key);
    if (a != b) changes.push_back(fmt::format("{}: {} -> {}", key, shown(a), shown(b)));
  }
  return changes;
}

// The data files whose content is not the one the run recorded in its data.json, or one line saying
// why the record cannot be read. `digests` caches each file's hash (the runs of a grid share files).
std::vector<std::string> data_differences(const fs::path& run_dir, const train::RunConfig& requested,
                                          std::map<std::string, train::DataFile>& digests) {
  train::DataFingerprint current;
  for (const auto& [key, path] : train::data_file_paths(requested)) {
    if (digests.count(path) == 0) digests[path] = train::fingerprint_data_file(key, path);
    current.push_back(digests.at(path));
    current.back().key = key;
  }
  if (current.empty()) return {};
  std::optional<train::DataRecord> record;
  try {
    record = train::read_data_record(run_dir.string());
  } catch (const InputError& e) {
    return {fmt::format("data.json is not a data record ({})", e.what())};
  }
  if (!record) return {"data.json is missing: it records no fingerprint of its data files"};
  std::vector<std::string> changes;
  for (const train::DataChange& change : train::changed_data(record->files, current))
    changes.push_back(change.describe());
  return changes;
}

}  // namespace

std::vector<ChangedRun> changed_runs(const ComparePlan& plan, const std::string& out_dir) {
  std::vector<ChangedRun> out;
  std::map<std::string, train::DataFile> digests;
  for (const RunSpec& run : plan.runs) {
    const fs::path dir = fs::path(out_dir) / "runs" / run.name;
    // A directory without a checkpoint or summary is restarted from scratch anyway.
    if (!fs::exists(dir / "summary.json") && !fs::exists(dir / "checkpoint.safetensors")) continue;
    std::vector<std::string> changes = differences(dir, run.config);
    const bool data = changes.empty();
    if (data) changes = data_differences(dir, run.config, digests);
    if (!changes.empty()) out.push_back({run.name, std::move(changes), data});
  }
  return out;
}

std::string changed_runs_message(const std::vector<ChangedRun>& changed, const std::string& out_dir) {
  const ChangedRun& first = changed.front();
  std::string keys;
  for (size_t i = 0; i < first.changes.size() && i < 4; ++i) keys += (i ? ", " : "") + first.changes[i];
  if (first.changes.size() > 4) keys += fmt::format(", and {} more", first.changes.size() - 4);
  return fmt::format(
      "{}: was trained {} than the compare config asks for now ({}); {} started run(s) differ. "
      "Nothing was trained. Use another --out, or add --retrain-changed to retrain exactly the changed runs "
      "and keep the others",
      (fs::path(out_dir) / "runs" / first.name).string(), first.data ? "on other data" : "with another config", keys,
      changed.size());
}

}  // namespace normlab::study
