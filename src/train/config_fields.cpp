// The config's keys, one Field each, in documentation order: its kind, range or choices, and how it
// reads and writes its RunConfig member. Choices that are enums or registry entries are parsed here
// once and written back by name.
#include <fmt/format.h>

#include <optional>
#include <type_traits>

#include "config_fields.hpp"
#include "normlab/names.hpp"

namespace normlab::train::config_fields {

namespace {

// Largest integer every JSON reader holds exactly (doubles): seeds stay portable to Python/JS.
constexpr int64_t kMaxSeed = (int64_t{1} << 53) - 1;
constexpr int64_t kMaxSteps = 100'000'000;

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
  f.push_back(make_enum_field("model", &R::model, "activation", &ModelConfig::activation, nn::kActivationNames));
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
  f.push_back(make_enum_field("model", &R::model, "positional", &ModelConfig::positional, nn::kPositionalNames));
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

}  // namespace

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

}  // namespace normlab::train::config_fields
