// A run's config read: files and their "base" chains, --set overrides, the own-data defaults, and the
// resolved config written back as JSON; each key's checks are config_values.cpp's, the cross-field
// rules config_check.cpp's.
#include "normlab/train/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "config_fields.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/io/suggest.hpp"
#include "normlab/io/text.hpp"
#include "normlab/names.hpp"
#include "normlab/train/data_defaults.hpp"

namespace normlab::train {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using config_fields::Field;
using config_fields::fields;
using config_fields::find_field;
using config_fields::section_names;
using config_fields::shown;
using config_fields::unknown_key;
using config_fields::unknown_section;
using config_fields::validated;

constexpr size_t kMaxConfigBytes = size_t{1} << 20;

// Every key of the file checked on its own; the cross-field rules come after the overrides.
RunConfig parse_sections(const json& config_json, const std::string& where, const std::string& base_dir,
                         bool require_files = true) {
  if (!config_json.is_object()) {
    throw InputError(fmt::format("{}: a config must be a JSON object with sections model, task, optim, train (got {})",
                                 where, shown(config_json)));
  }
  RunConfig config;
  for (const auto& [section, body] : config_json.items()) {
    if (std::find(section_names().begin(), section_names().end(), section) == section_names().end()) {
      throw unknown_section(where, section);
    }
    if (!body.is_object())
      throw InputError(fmt::format("{}: {}: must be a JSON object, got {}", where, section, shown(body)));
    for (const auto& [key, value] : body.items()) {
      const Field* field = find_field(section, key);
      if (!field) throw unknown_key(where, section, key);
      field->set(config, validated(*field, value, where, fs::path(base_dir), require_files));
    }
  }
  return config;
}

}  // namespace

RunConfig parse_config_keys(const json& config_json, const std::string& where, const std::string& base_dir,
                            bool require_files) {
  return parse_sections(config_json, where, base_dir, require_files);
}

RunConfig config_from_json(const json& config_json, const std::string& where, const std::string& base_dir,
                           bool require_files) {
  RunConfig config = parse_sections(config_json, where, base_dir, require_files);
  check_config(config, where);
  return config;
}

void apply_override(RunConfig& config, const std::string& assignment) {
  if (assignment.find('\0') != std::string::npos)
    throw InputError(fmt::format("--set {}: contains a NUL byte", io::escape_control(assignment)));
  io::require_utf8(assignment, "--set " + assignment);  // config strings are UTF-8, as a JSON file's are
  const std::string where = "--set " + io::escape_control(assignment);
  const size_t equals = assignment.find('=');
  if (equals == std::string::npos) {
    throw InputError(fmt::format("{}: expected section.key=value, e.g. optim.lr=0.0003", where));
  }
  const std::string name = assignment.substr(0, equals);
  const std::string text = assignment.substr(equals + 1);
  const size_t dot = name.find('.');
  if (dot == std::string::npos || name.find('.', dot + 1) != std::string::npos) {
    std::vector<std::string> paths;
    for (const Field& field : fields()) paths.push_back(field.path());
    throw InputError(
        fmt::format("{}: {}: expected section.key (did you mean '{}'?)", where, name, io::closest(name, paths)));
  }
  const std::string section = name.substr(0, dot), key = name.substr(dot + 1);
  if (std::find(section_names().begin(), section_names().end(), section) == section_names().end()) {
    throw unknown_section(where, section);
  }
  const Field* field = find_field(section, key);
  if (!field) throw unknown_key(where, section, key);
  // JSON when it parses (numbers, true/false, null, quoted strings), otherwise the raw text.
  json value = io::json_nesting_depth(text) > io::kMaxJsonDepth
                   ? json(json::value_t::discarded)
                   : json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = json(text);
  field->set(config, validated(*field, value, where, fs::current_path()));
}

json load_config_json(const std::string& path, int depth) {
  if (depth > 8) throw InputError(fmt::format("{}: base: more than 8 levels of \"base\" (a cycle?)", path));
  json parsed = io::parse_strict(io::read_file(path, kMaxConfigBytes), path);
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!parsed.is_object()) return parsed;  // parse_sections reports it
  // Data paths are relative to the file that names them: make them absolute before merging.
  if (parsed.contains("task") && parsed["task"].is_object()) {
    for (const char* key : {"train_file", "valid_file"}) {
      if (!parsed["task"].contains(key)) continue;
      json& v = parsed["task"][key];
      if (v.is_string() && !v.get<std::string>().empty() && v.get<std::string>().find('\0') == std::string::npos &&
          fs::path(v.get<std::string>()).is_relative())
        v = fs::absolute(dir / v.get<std::string>()).lexically_normal().string();
    }
  }
  if (!parsed.contains("base")) return parsed;
  const json base_name = parsed.at("base");
  if (!base_name.is_string() || base_name.get<std::string>().empty())
    throw InputError(fmt::format("{}: base: must be the path of another run config, got {}", path, shown(base_name)));
  const std::string base_path = (dir / base_name.get<std::string>()).string();
  json merged;
  try {
    merged = load_config_json(base_path, depth + 1);
  } catch (const InputError& e) {
    // Say which file named it: the base's own message starts with the base's path.
    throw InputError(fmt::format("{}: base \"{}\": {}", path, base_name.get<std::string>(), e.what()));
  }
  if (!merged.is_object()) throw InputError(fmt::format("{}: must be a JSON object", base_path));
  merged.erase("base");
  // Section by section: this file's keys replace the base's.
  for (const auto& [section, body] : parsed.items()) {
    if (section == "base") continue;
    if (!body.is_object() || !merged.contains(section) || !merged[section].is_object()) {
      merged[section] = body;
      continue;
    }
    for (const auto& [key, value] : body.items()) merged[section][key] = value;
  }
  return merged;
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  const json parsed = load_config_json(path, 0);
  fs::path base = fs::path(path).parent_path();
  if (base.empty()) base = ".";
  RunConfig from_file = parse_sections(parsed, path, base.string());
  RunConfig config = from_file;
  for (const std::string& assignment : overrides) apply_override(config, assignment);
  // Own data: the keys neither the file nor --set gives come from the data (train/data_defaults.hpp).
  const DataShape shape = measure_data(config);
  apply_data_defaults(from_file, given_keys(parsed), shape);
  apply_data_defaults(config, given_keys(parsed, overrides), shape);
  check_overridden_config(from_file, config, path, overrides);
  return config;
}

std::string to_string(KeepBest keep_best) { return name_in(kKeepBestNames, keep_best); }

json to_json(const RunConfig& config) {
  json out = json::object();
  for (const std::string& section : section_names()) out[section] = json::object();
  for (const Field& field : fields()) out[field.section][field.key] = field.get(config);
  return out;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const Field& field : fields()) keys.push_back(field.path());
  return keys;
}

json config_value(const RunConfig& config, const std::string& key) {
  const size_t dot = key.find('.');
  const Field* field = dot == std::string::npos ? nullptr : find_field(key.substr(0, dot), key.substr(dot + 1));
  if (!field) throw std::invalid_argument(fmt::format("config_value: {} is not a config key", key));
  return field->get(config);
}

const std::vector<std::string>& resume_mutable_keys() {
  static const std::vector<std::string> keys = {"train.steps",
                                                "train.eval_every",
                                                "train.log_every",
                                                "train.diagnostics_every",
                                                "train.checkpoint_every",
                                                "train.threads",
                                                "train.early_stopping_patience",
                                                "train.early_stopping_min_delta",
                                                "task.label"};
  return keys;
}

void check_resume_compatible(const RunConfig& stored, const RunConfig& requested, const std::string& where) {
  for (const Field& field : fields()) {
    const std::string path = field.path();
    if (std::find(resume_mutable_keys().begin(), resume_mutable_keys().end(), path) != resume_mutable_keys().end()) {
      continue;
    }
    json a = field.get(stored), b = field.get(requested);
    if (a != b) {
      throw InputError(fmt::format("{}: {}: cannot change on resume (the run has {}, requested {}); only {} may change",
                                   where, path, shown(a), shown(b), fmt::join(resume_mutable_keys(), ", ")));
    }
  }
}

}  // namespace normlab::train
