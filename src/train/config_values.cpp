// One config value checked against its Field (config_fields.hpp): the one-line InputError
// "WHERE: section.key: what", or the value to store.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "config_fields.hpp"
#include "normlab/io/suggest.hpp"
#include "normlab/io/text.hpp"

namespace normlab::train::config_fields {

namespace fs = std::filesystem;

InputError unknown_key(const std::string& where, const std::string& section, const std::string& key) {
  const std::string full = section + "." + key;
  auto suggest = [&](const std::string& path) {
    return InputError(fmt::format("{}: {}: unknown key (did you mean '{}'?)", io::escape_control(where),
                                  io::escape_control(full), path));
  };
  for (const Field& field : fields()) {
    if (field.key == key && field.section != section) return suggest(field.path());
  }
  std::vector<std::string> paths, section_paths;
  for (const Field& field : fields()) {
    paths.push_back(field.path());
    if (field.section == section) section_paths.push_back(field.path());
  }
  // What users type for our keys, in any section: "optim.learning_rate" -> 'optim.lr'.
  if (const std::string aliased = io::alias_of(full, paths); !aliased.empty()) return suggest(aliased);
  return suggest(io::closest(full, section_paths));
}

InputError unknown_section(const std::string& where, const std::string& section) {
  return InputError(fmt::format("{}: {}: unknown section (did you mean '{}'? sections: model, task, optim, train)",
                                io::escape_control(where), io::escape_control(section),
                                io::closest(section, section_names())));
}

std::string shown(const json& value) {
  // Replace invalid UTF-8 rather than throw: the value is being reported as wrong anyway.
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

namespace {

std::string format_bound(double value, Kind kind) {
  return kind == Kind::integer ? fmt::format("{}", static_cast<int64_t>(value)) : fmt::format("{}", value);
}

std::string range_text(const Field& field) {
  return fmt::format("{}{}, {}{}", field.range.lo_open ? "(" : "[", format_bound(field.range.lo, field.kind),
                     format_bound(field.range.hi, field.kind), field.range.hi_open ? ")" : "]");
}

bool in_range(double value, const Range& range) {
  bool above = range.lo_open ? value > range.lo : value >= range.lo;
  bool below = range.hi_open ? value < range.hi : value <= range.hi;
  return above && below;
}

bool valid_utf8(const std::string& text) { return io::invalid_utf8_at(text) == std::string::npos; }

// Each check below takes a value of the field's kind and the message prefix ("WHERE: section.key");
// it returns the value to store or throws the one-line InputError.

json validated_integer(const Field& field, const json& value, const std::string& prefix, const char* or_null) {
  // 1e3 or 1000.0 name an integer exactly (JSON and --set alike); 1.5 does not.
  if (value.is_number_float() && std::isfinite(value.get<double>()) &&
      std::trunc(value.get<double>()) == value.get<double>() && std::fabs(value.get<double>()) <= 9007199254740992.0) {
    return validated_integer(field, json(static_cast<int64_t>(value.get<double>())), prefix, or_null);
  }
  bool ok = value.is_number_integer();
  double as_double =
      ok ? (value.is_number_unsigned() ? double(value.get<uint64_t>()) : double(value.get<int64_t>())) : 0.0;
  if (!ok || !in_range(as_double, field.range) ||
      (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))) {
    throw InputError(
        fmt::format("{}: must be an integer in {}{}, got {}", prefix, range_text(field), or_null, shown(value)));
  }
  return value;
}

json validated_number(const Field& field, const json& value, const std::string& prefix, const char* or_null) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || !in_range(value.get<double>(), field.range)) {
    throw InputError(
        fmt::format("{}: must be a number in {}{}, got {}", prefix, range_text(field), or_null, shown(value)));
  }
  // Every number is used as a float32: check the value the code will compute with. 1e-46 is 0
  // there, 0.99999999999 is 1, and a subnormal loses its precision (and underflows under a
  // schedule factor).
  const double wanted = value.get<double>();
  const float used = static_cast<float>(wanted);
  if (!in_range(double(used), field.range) || (wanted != 0.0 && std::fabs(used) < std::numeric_limits<float>::min())) {
    throw InputError(
        fmt::format("{}: must be a number in {}{}, got {}, which is {} in float32, the precision "
                    "normlab computes in",
                    prefix, range_text(field), or_null, shown(value), double(used)));
  }
  return json(wanted);
}

json validated_choice(const Field& field, const json& value, const std::string& prefix) {
  std::string list;
  for (const std::string& choice : field.choices) list += (list.empty() ? "\"" : ", \"") + choice + "\"";
  if (!value.is_string()) throw InputError(fmt::format("{}: must be one of {}, got {}", prefix, list, shown(value)));
  const std::string text = value.get<std::string>();
  if (std::find(field.choices.begin(), field.choices.end(), text) == field.choices.end()) {
    throw InputError(fmt::format("{}: must be one of {}, got {} (did you mean '{}'?)", prefix, list, shown(value),
                                 io::closest(text, field.choices)));
  }
  return value;
}

json validated_text(const json& value, const std::string& prefix, const char* or_null) {
  const std::string text = value.is_string() ? value.get<std::string>() : std::string();
  if (!value.is_string() || text.empty() || text.size() > 200 || !valid_utf8(text) ||
      std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
    throw InputError(fmt::format("{}: must be a non-empty line of text (UTF-8, at most 200 bytes){}, got {}", prefix,
                                 or_null, shown(value)));
  }
  return value;
}

// A path is stored absolute: relative to base_dir (the config file's directory).
json validated_path(const json& value, const std::string& prefix, const char* or_null, const fs::path& base_dir,
                    bool require_files) {
  if (!value.is_string() || value.get<std::string>().empty() || !valid_utf8(value.get<std::string>())) {
    throw InputError(
        fmt::format("{}: must be a file path (a non-empty UTF-8 string){}, got {}", prefix, or_null, shown(value)));
  }
  // The system ends a path at a NUL byte: "data/train.jsonl\u0000x" would open data/train.jsonl.
  if (value.get<std::string>().find('\0') != std::string::npos) {
    throw InputError(fmt::format("{}: a file path cannot contain a NUL byte (\\u0000), got {}", prefix, shown(value)));
  }
  fs::path path(value.get<std::string>());
  if (path.is_relative()) path = base_dir / path;
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec).lexically_normal();
  if (ec) absolute = path.lexically_normal();
  if (require_files && !fs::is_regular_file(absolute, ec)) {
    // A directory or a FIFO exists: "no such file" would send the user looking for a typo.
    const fs::file_status status = fs::status(absolute, ec);
    if (!ec && fs::exists(status)) {
      const char* kind = fs::is_directory(status) ? "a directory" : fs::is_fifo(status) ? "a FIFO" : "a special file";
      throw InputError(fmt::format("{}: not a regular file ({}): {}", prefix, kind, absolute.string()));
    }
    throw InputError(fmt::format("{}: no such file: {}", prefix, absolute.string()));
  }
  return json(absolute.string());
}

}  // namespace

json validated(const Field& field, const json& value, const std::string& where, const fs::path& base_dir,
               bool require_files) {
  const std::string prefix = fmt::format("{}: {}", where, field.path());
  const char* or_null = field.nullable ? " or null" : "";
  if (value.is_null() && field.nullable) return value;
  switch (field.kind) {
    case Kind::integer: return validated_integer(field, value, prefix, or_null);
    case Kind::number: return validated_number(field, value, prefix, or_null);
    case Kind::boolean:
      if (!value.is_boolean()) throw InputError(fmt::format("{}: must be true or false, got {}", prefix, shown(value)));
      return value;
    case Kind::choice: return validated_choice(field, value, prefix);
    case Kind::text: return validated_text(value, prefix, or_null);
    case Kind::path: return validated_path(value, prefix, or_null, base_dir, require_files);
  }
  return value;
}

}  // namespace normlab::train::config_fields
