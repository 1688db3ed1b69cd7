#pragma once
// What the config's files share (src/train/config*.cpp): the table of keys, one Field a key with its
// kind, range or choices and how it reads and writes its RunConfig member, and the check of one value
// against its Field. Not a public interface: include/normlab/train/config.hpp is.
//   config_fields.cpp  the table (fields(), in documentation order)
//   config_values.cpp  one value checked against its Field; unknown keys and sections
//   config_check.cpp   the cross-field rules (check_config)
//   config.cpp         files, "base" chains, --set overrides, to_json and resume rules
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/train/config.hpp"

namespace normlab::train::config_fields {

using nlohmann::json;

enum class Kind { integer, number, boolean, choice, path, text };

struct Range {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
};

struct Field {
  std::string section, key;
  Kind kind = Kind::integer;
  Range range;
  std::vector<std::string> choices;
  bool nullable = false;
  std::function<void(RunConfig&, const json&)> set;  // the value is already validated
  std::function<json(const RunConfig&)> get;
  std::string path() const { return section + "." + key; }
};

// Every key, in documentation order; its choices and ranges are the validation's.
const std::vector<Field>& fields();
// "model", "task", "optim", "train": the sections, in to_json's order.
const std::vector<std::string>& section_names();
// nullptr when section.key is no key.
const Field* find_field(const std::string& section, const std::string& key);

// "WHERE: model.d_modle: unknown key (did you mean 'model.d_model'?)"; a key that exists in another
// section is suggested with its section ("model.lr" -> 'optim.lr').
InputError unknown_key(const std::string& where, const std::string& section, const std::string& key);
InputError unknown_section(const std::string& where, const std::string& section);
// A value as an error message shows it: JSON, at most 60 bytes, invalid UTF-8 replaced.
std::string shown(const json& value);
// Checks one value against its field ("WHERE: section.key: ..." otherwise); returns the value to
// store (paths made absolute against base_dir; require_files: they must be regular files).
json validated(const Field& field, const json& value, const std::string& where, const std::filesystem::path& base_dir,
               bool require_files = true);

}  // namespace normlab::train::config_fields
