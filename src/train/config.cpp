#include "normlab/train/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>
#include <type_traits>

#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/names.hpp"
#include "normlab/train/data_defaults.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/io/suggest.hpp"
#include "normlab/io/text.hpp"

namespace normlab::train {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kMaxConfigBytes = size_t{1} << 20;
// Largest integer every JSON reader holds exactly (doubles): seeds stay portable to Python/JS.
constexpr int64_t kMaxSeed = (int64_t{1} << 53) - 1;
constexpr int64_t kMaxSteps = 100'000'000;

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

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T>
void assign(T& target, const json& value) {
  if constexpr (is_optional<T>::value) {
    if (value.is_null()) {
      target.reset();
    } else {
      typename T::value_type inner{};
      assign(inner, value);
      target = inner;
    }
  } else if constexpr (std::is_same_v<T, int64_t>) {
    target = value.is_number_unsigned() ? static_cast<int64_t>(value.get<uint64_t>()) : value.get<int64_t>();
  } else {
    target = value.get<T>();
  }
}

template <class T>
json read(const T& source) {
  if constexpr (is_optional<T>::value) {
    return source ? json(*source) : json(nullptr);
  } else {
    return json(source);
  }
}

template <class S, class T>
Field make_field(const char* section, S RunConfig::*part, const char* key, T S::*member, Kind kind, Range range = {},
                 std::vector<std::string> choices = {}) {
  Field field;
  field.section = section;
  field.key = key;
  field.kind = kind;
  field.range = range;
  field.choices = std::move(choices);
  field.nullable = is_optional<T>::value;
  field.set = [part, member](RunConfig& config, const json& value) { assign((config.*part).*member, value); };
  field.get = [part, member](const RunConfig& config) { return read((config.*part).*member); };
  return field;
}

// A choice stored as a T (an enum, a registry entry): validated as one of `choices` like any
// choice, then parsed once here; written back as its name.
template <class S, class T>
Field make_parsed_field(const char* section, S RunConfig::*part, const char* key, T S::*member,
                        std::vector<std::string> choices, std::function<T(const std::string&)> parse,
                        std::function<std::string(const T&)> name) {
  Field field;
  field.section = section;
  field.key = key;
  field.kind = Kind::choice;
  field.choices = std::move(choices);
  field.set = [part, member, parse](RunConfig& config, const json& value) {
    (config.*part).*member = parse(value.get<std::string>());
  };
  field.get = [part, member, name](const RunConfig& config) { return json(name((config.*part).*member)); };
  return field;
}

// The same for an enum with a name table {{E::a, "a"}, ...} (kPlacementNames, kOptimizerNames, ...).
template <class S, class E, size_t N>
Field make_enum_field(const char* section, S RunConfig::*part, const char* key, E S::*member,
                      const std::pair<E, const char*> (&table)[N]) {
  std::vector<std::string> choices;
  for (const auto& [value, text] : table) choices.emplace_back(text);
  // The text was validated against the choices, so value_named finds it.
  auto parse = [&table](const std::string& text) { return value_named(table, text).value_or(table[0].first); };
  auto name = [&table](const E& value) { return std::string(name_in(table, value)); };
  return make_parsed_field<S, E>(section, part, key, member, std::move(choices), parse, name);
}

// model.norm: a norm registry entry, or a residual scheme's old spelling as a norm ("rezero"), which
// sets model.norm "none" and that scheme as model.residual. The choices list keeps the order users
// knew: the norms with a layer, the schemes' spellings, then "none".
Field model_norm_field() {
  std::vector<std::string> choices, without_layer;
  for (const nn::NormEntry& entry : nn::norm_registry())
    (entry.spec.make ? choices : without_layer).push_back(entry.spec.name);
  for (const nn::ResidualEntry& entry : nn::residual_registry())
    if (!entry.norm_spelling.empty()) choices.push_back(entry.norm_spelling);
  choices.insert(choices.end(), without_layer.begin(), without_layer.end());
  Field field = make_parsed_field<ModelConfig, nn::NormKind>(
      "model", &RunConfig::model, "norm", &ModelConfig::norm, choices,
      [](const std::string& name) { return nn::NormKind(name); }, [](const nn::NormKind& kind) { return kind.name(); });
  field.set = [](RunConfig& config, const json& value) {
    const std::string name = value.get<std::string>();
    if (const nn::ResidualEntry* scheme = nn::residual_spelled_as_norm(name)) {
      config.model.norm = "none";
      config.model.residual = scheme->spec.name;
    } else {
      config.model.norm = name;
    }
  };
  return field;
}

Range closed(double lo, double hi) { return {lo, hi, false, false}; }
Range open_closed(double lo, double hi) { return {lo, hi, true, false}; }
Range closed_open(double lo, double hi) { return {lo, hi, false, true}; }

// The model section's keys, in documentation order.
void add_model_fields(std::vector<Field>& f) {
  using R = RunConfig;
  f.push_back(make_field("model", &R::model, "d_model", &ModelConfig::d_model, Kind::integer, closed(1, 4096)));
  f.push_back(make_field("model", &R::model, "heads", &ModelConfig::num_heads, Kind::integer, closed(1, 64)));
  f.push_back(make_field("model", &R::model, "layers", &ModelConfig::num_layers, Kind::integer, closed(1, 64)));
  f.push_back(make_field("model", &R::model, "ffn", &ModelConfig::dim_feedforward, Kind::integer, closed(1, 16384)));
  f.push_back(make_field("model", &R::model, "dropout", &ModelConfig::dropout, Kind::number, closed_open(0, 1)));
  f.push_back(
      make_field("model", &R::model, "activation", &ModelConfig::activation, Kind::choice, {}, {"relu", "gelu"}));
  f.push_back(model_norm_field());
  // data-parallel: BatchNorm statistics per rank or over all ranks (docs/scaling.md)
  f.push_back(make_field("model", &R::model, "batchnorm_stats", &ModelConfig::batchnorm_stats, Kind::choice, {},
                         {"local", "sync"}));
  f.push_back(make_enum_field("model", &R::model, "placement", &ModelConfig::placement, nn::kPlacementNames));
  f.push_back(make_parsed_field<ModelConfig, nn::ResidualKind>(
      "model", &R::model, "residual", &ModelConfig::residual, nn::residual_names(),
      [](const std::string& name) { return nn::ResidualKind(name); },
      [](const nn::ResidualKind& kind) { return kind.name(); }));
  f.push_back(make_field("model", &R::model, "final_norm", &ModelConfig::final_norm, Kind::boolean));
  f.push_back(make_field("model", &R::model, "norm_eps", &ModelConfig::norm_eps, Kind::number, open_closed(0, 1)));
  f.push_back(make_enum_field("model", &R::model, "qk_norm", &ModelConfig::qk_norm, nn::kQkNormNames));
  f.push_back(make_field("model", &R::model, "positional", &ModelConfig::positional, Kind::choice, {},
                         {"sinusoidal", "learned"}));
  f.push_back(make_field("model", &R::model, "max_len", &ModelConfig::max_len, Kind::integer, closed(1, 4096)));
  f.push_back(make_field("model", &R::model, "vocab_size", &ModelConfig::vocab_size, Kind::integer, closed(1, 65536)));
  f.push_back(
      make_field("model", &R::model, "num_classes", &ModelConfig::num_classes, Kind::integer, closed(1, 65536)));
}

// The own-data keys of the task section (data/formats.hpp, data/task.hpp), after random_prob.
void add_own_data_fields(std::vector<Field>& f) {
  using R = RunConfig;
  // own data: file formats and text normalization (data/formats.hpp)
  f.push_back(make_field("task", &R::task, "format", &TaskConfig::format, Kind::choice, {},
                         {"auto", "jsonl", "csv", "tsv", "conll"}));
  f.push_back(make_field("task", &R::task, "text_field", &TaskConfig::text_field, Kind::text));
  f.push_back(make_field("task", &R::task, "label_field", &TaskConfig::label_field, Kind::text));
  f.push_back(make_field("task", &R::task, "lowercase", &TaskConfig::lowercase, Kind::boolean));
  f.push_back(make_field("task", &R::task, "split_punctuation", &TaskConfig::split_punctuation, Kind::boolean));
  f.push_back(
      make_field("task", &R::task, "min_count", &TaskConfig::min_count, Kind::integer, closed(1, 1'000'000'000)));
  f.push_back(make_field("task", &R::task, "max_file_mb", &TaskConfig::max_file_mb, Kind::integer, closed(1, 1 << 20)));
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = [] {
    using R = RunConfig;
    std::vector<Field> f;
    add_model_fields(f);
    // task
    f.push_back(make_enum_field("task", &R::task, "name", &TaskConfig::name, data::kTaskNames));
    f.push_back(make_field("task", &R::task, "label", &TaskConfig::label, Kind::text));
    f.push_back(make_field("task", &R::task, "train_file", &TaskConfig::train_file, Kind::path));
    f.push_back(make_field("task", &R::task, "valid_file", &TaskConfig::valid_file, Kind::path));
    f.push_back(make_field("task", &R::task, "min_len", &TaskConfig::min_len, Kind::integer, closed(1, 4096)));
    f.push_back(make_field("task", &R::task, "max_len", &TaskConfig::max_len, Kind::integer, closed(1, 4096)));
    f.push_back(
        make_field("task", &R::task, "eval_max_len", &TaskConfig::eval_max_len, Kind::integer, closed(1, 4096)));
    f.push_back(
        make_field("task", &R::task, "eval_examples", &TaskConfig::eval_examples, Kind::integer, closed(1, 1'000'000)));
    f.push_back(
        make_field("task", &R::task, "bucket_width", &TaskConfig::bucket_width, Kind::integer, closed(0, 4096)));
    f.push_back(
        make_enum_field("task", &R::task, "length_regime", &TaskConfig::length_regime, data::kLengthRegimeNames));
    f.push_back(make_field("task", &R::task, "select_prob", &TaskConfig::select_prob, Kind::number, open_closed(0, 1)));
    f.push_back(make_field("task", &R::task, "mask_prob", &TaskConfig::mask_prob, Kind::number, closed(0, 1)));
    f.push_back(make_field("task", &R::task, "random_prob", &TaskConfig::random_prob, Kind::number, closed(0, 1)));
    add_own_data_fields(f);
    // optim
    f.push_back(make_enum_field("optim", &R::optim, "name", &OptimConfig::name, optim::kOptimizerNames));
    f.push_back(make_field("optim", &R::optim, "lr", &OptimConfig::lr, Kind::number, open_closed(0, 10)));
    f.push_back(make_field("optim", &R::optim, "beta1", &OptimConfig::beta1, Kind::number, closed_open(0, 1)));
    f.push_back(make_field("optim", &R::optim, "beta2", &OptimConfig::beta2, Kind::number, closed_open(0, 1)));
    f.push_back(make_field("optim", &R::optim, "eps", &OptimConfig::eps, Kind::number, open_closed(0, 1)));
    f.push_back(make_field("optim", &R::optim, "momentum", &OptimConfig::momentum, Kind::number, closed_open(0, 1)));
    f.push_back(
        make_field("optim", &R::optim, "weight_decay", &OptimConfig::weight_decay, Kind::number, closed(0, 10)));
    f.push_back(make_field("optim", &R::optim, "decay_all", &OptimConfig::decay_all, Kind::boolean));
    f.push_back(make_enum_field("optim", &R::optim, "schedule", &OptimConfig::schedule, optim::kScheduleNames));
    f.push_back(make_field("optim", &R::optim, "warmup_steps", &OptimConfig::warmup_steps, Kind::integer,
                           closed(0, kMaxSteps)));
    f.push_back(make_field("optim", &R::optim, "min_lr_ratio", &OptimConfig::min_lr_ratio, Kind::number, closed(0, 1)));
    f.push_back(
        make_field("optim", &R::optim, "clip_grad_norm", &OptimConfig::clip_grad_norm, Kind::number, closed(0, 1e6)));
    f.push_back(make_field("optim", &R::optim, "z_loss", &OptimConfig::z_loss, Kind::number, closed(0, 10)));
    // train
    f.push_back(make_field("train", &R::train, "steps", &TrainConfig::steps, Kind::integer, closed(1, kMaxSteps)));
    f.push_back(make_field("train", &R::train, "batch_size", &TrainConfig::batch_size, Kind::integer, closed(1, 4096)));
    f.push_back(make_field("train", &R::train, "seed", &TrainConfig::seed, Kind::integer, closed(0, double(kMaxSeed))));
    f.push_back(
        make_field("train", &R::train, "eval_every", &TrainConfig::eval_every, Kind::integer, closed(0, kMaxSteps)));
    f.push_back(
        make_field("train", &R::train, "log_every", &TrainConfig::log_every, Kind::integer, closed(1, kMaxSteps)));
    f.push_back(make_field("train", &R::train, "diagnostics_every", &TrainConfig::diagnostics_every, Kind::integer,
                           closed(0, kMaxSteps)));
    f.push_back(make_field("train", &R::train, "checkpoint_every", &TrainConfig::checkpoint_every, Kind::integer,
                           closed(0, kMaxSteps)));
    f.push_back(make_field("train", &R::train, "threads", &TrainConfig::threads, Kind::integer, closed(0, 1024)));
    f.push_back(make_enum_field("train", &R::train, "keep_best", &TrainConfig::keep_best, kKeepBestNames));
    f.push_back(make_field("train", &R::train, "early_stopping_patience", &TrainConfig::early_stopping_patience,
                           Kind::integer, closed(0, kMaxSteps)));
    f.push_back(make_field("train", &R::train, "early_stopping_min_delta", &TrainConfig::early_stopping_min_delta,
                           Kind::number, closed(0, 1e6)));
    // data-parallel: replaced by the launch's process count (mpirun -np N); recorded for resume
    f.push_back(
        make_field("train", &R::train, "world_size", &TrainConfig::world_size, Kind::integer, closed(1, 65536)));
    return f;
  }();
  return table;
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = {"model", "task", "optim", "train"};
  return names;
}

const Field* find_field(const std::string& section, const std::string& key) {
  for (const Field& field : fields()) {
    if (field.section == section && field.key == key) return &field;
  }
  return nullptr;
}

// "model.d_modle: unknown key (did you mean 'd_model'?)"; a key that exists in another section is
// suggested with its section ("model.lr" -> 'optim.lr').
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

// Checks one value against its field; returns the value to store (paths made absolute).
json validated(const Field& field, const json& value, const std::string& where, const fs::path& base_dir,
               bool require_files = true) {
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

// The own-data keys: only a data-defined task reads them, and some fit only one of the two tasks.
void check_own_data_options(const TaskConfig& t, const std::string& where) {
  auto fail = [&](const std::string& key, const std::string& what) {
    throw InputError(fmt::format("{}: {}: {}", where, key, what));
  };
  if (!data::is_data_task(t.name)) {
    const TaskConfig defaults;
    for (const auto& [key, changed] :
         {std::pair{"task.format", t.format != defaults.format}, std::pair{"task.text_field", t.text_field.has_value()},
          std::pair{"task.label_field", t.label_field.has_value()}, std::pair{"task.lowercase", t.lowercase},
          std::pair{"task.split_punctuation", t.split_punctuation}, std::pair{"task.min_count", t.min_count != 1}})
      if (changed)
        fail(key, fmt::format("applies to your own data (sequence_classification, token_classification), not to the "
                              "{} task",
                              data::to_string(t.name)));
    return;
  }
  if (t.split_punctuation && t.name == data::TaskKind::token_classification)
    fail("task.split_punctuation",
         "a token_classification file gives one target per written token; splitting "
         "punctuation would change the token count (split it in the file instead)");
  if (t.format == "conll" && t.name == data::TaskKind::sequence_classification)
    fail("task.format",
         "a CoNLL file holds one tag per token: use token_classification, or csv/tsv/jsonl for one "
         "label per line");
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

void check_overridden_config(const RunConfig& before, const RunConfig& after, const std::string& file,
                             const std::vector<std::string>& overrides) {
  if (overrides.empty()) return check_config(after, file);
  bool file_alone_ok = true;
  try {
    check_config(before, file);
  } catch (const InputError&) {
    file_alone_ok = false;
  }
  // The file passes on its own: what broke the rules came in through --set.
  check_config(after, file_alone_ok ? fmt::format("--set {}", fmt::join(overrides, " --set ")) : file);
}

std::string to_string(KeepBest keep_best) { return name_in(kKeepBestNames, keep_best); }

void check_config(const RunConfig& config, const std::string& where) {
  const ModelConfig& m = config.model;
  const TaskConfig& t = config.task;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw InputError(fmt::format("{}: {}: {}", where, key, what));
  };
  if (m.d_model % m.num_heads != 0) {
    fail("model.d_model", fmt::format("must be divisible by model.heads (got {} and {})", m.d_model, m.num_heads));
  }
  if (config.train.early_stopping_patience > 0 && config.train.eval_every == 0) {
    fail("train.early_stopping_patience", "counts evaluations: needs train.eval_every > 0");
  }
  if (t.max_len < t.min_len) {
    fail("task.max_len", fmt::format("must be >= task.min_len (got {} and {})", t.max_len, t.min_len));
  }
  if (t.eval_max_len < t.min_len) {
    fail("task.eval_max_len", fmt::format("must be >= task.min_len (got {} and {})", t.eval_max_len, t.min_len));
  }
  if (t.max_len > m.max_len) {
    fail("task.max_len", fmt::format("must be <= model.max_len (got {} and {})", t.max_len, m.max_len));
  }
  if (t.eval_max_len > m.max_len) {
    fail("task.eval_max_len", fmt::format("must be <= model.max_len (got {} and {})", t.eval_max_len, m.max_len));
  }
  if (t.mask_prob + t.random_prob > 1.0 || static_cast<float>(t.mask_prob) + static_cast<float>(t.random_prob) > 1.0f) {
    fail("task.random_prob",
         fmt::format("task.mask_prob + task.random_prob must be <= 1 (got {} + {})", t.mask_prob, t.random_prob));
  }
  if (t.length_regime == data::LengthRegime::bucketed && t.bucket_width == 0) {
    fail("task.bucket_width",
         "the bucketed length regime draws each batch from one bucket: needs task.bucket_width > 0");
  }
  if (t.length_regime != data::LengthRegime::mixed && t.train_file) {
    fail("task.length_regime", fmt::format("\"{}\" applies to generated training batches; a task.train_file is read in "
                                           "shuffled batches of train.batch_size sequences (use \"mixed\")",
                                           data::to_string(t.length_regime)));
  }
  check_own_data_options(t, where);
  if (t.name == data::TaskKind::mlm_text) {
    if (!t.train_file)
      fail("task.train_file", "the mlm_text task has no generator: give a JSONL file of {\"text\": ...} lines");
    if (!t.valid_file)
      fail("task.valid_file", "the mlm_text task has no generator: give a JSONL file of {\"text\": ...} lines");
  } else if (data::is_data_task(t.name)) {
    const char* shape = t.name == data::TaskKind::sequence_classification
                            ? "{\"tokens\": \"w1 w2 ...\", \"label\": \"L\"}"
                            : "{\"tokens\": \"w1 w2 ...\", \"targets\": \"L1 L2 ...\"}";
    const std::string what =
        fmt::format("the {} task learns from your data: give a JSONL file of {} lines", data::to_string(t.name), shape);
    if (!t.train_file) fail("task.train_file", what);
    if (!t.valid_file) fail("task.valid_file", what);
  } else {
    data::Task task = data::make_task(t.name);
    if (m.vocab_size && *m.vocab_size < task.input_vocab_size()) {
      fail("model.vocab_size", fmt::format("must be at least the {} task's {} input symbols (got {})", task.name,
                                           task.input_vocab_size(), *m.vocab_size));
    }
    if (m.num_classes && *m.num_classes < task.num_classes()) {
      fail("model.num_classes", fmt::format("must be at least the {} task's {} classes (got {})", task.name,
                                            task.num_classes(), *m.num_classes));
    }
  }
}

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
