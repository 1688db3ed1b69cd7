#include "normlab/train/saved_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/metrics.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::train {

RunConfig resume_config(const std::string& dir, const std::optional<std::string>& config_path,
                        const std::vector<std::string>& overrides) {
  RunPaths paths(dir);
  if (!std::filesystem::is_regular_file(paths.config)) {
    throw InputError(fmt::format("{}: no config.json: not a run directory", dir));
  }
  RunConfig stored = load_config(paths.config);
  if (config_path) {
    RunConfig requested = load_config(*config_path, overrides);
    // data-parallel: the launch sets world_size; Trainer::load_checkpoint compares it to the checkpoint's.
    requested.train.world_size = stored.train.world_size;
    check_resume_compatible(stored, requested, fmt::format("{} (vs {})", *config_path, paths.config));
    return requested;
  }
  RunConfig requested = stored;
  for (const std::string& assignment : overrides) apply_override(requested, assignment);
  check_overridden_config(stored, requested, paths.config, overrides);
  check_resume_compatible(stored, requested, paths.config);
  return requested;
}

int64_t check_resume_checkpoint(const std::string& dir, const RunConfig& config) {
  const RunPaths paths(dir);
  if (!std::filesystem::is_regular_file(paths.checkpoint)) {
    throw InputError(fmt::format("{}: no checkpoint.safetensors to resume from", dir));
  }
  const io::SafetensorsFile header = io::read_safetensors_header(paths.checkpoint);
  const auto format = header.metadata.find("format");
  if (format == header.metadata.end() || format->second != kCheckpointFormat) {
    throw InputError(fmt::format("{}: not a normlab checkpoint (metadata 'format' is not \"{}\")", paths.checkpoint,
                                 kCheckpointFormat));
  }
  const RunConfig saved =
      config_from_json(metadata_json(header, "config"), paths.checkpoint + ": metadata 'config'", ".", false);
  check_resume_compatible(saved, config, paths.checkpoint);
  return metadata_int(header, "step");
}

std::optional<int64_t> finished_steps(const std::string& dir) {
  const RunPaths paths(dir);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(paths.summary, ec)) return std::nullopt;
  try {
    const nlohmann::json summary = io::parse_strict(io::read_file(paths.summary, size_t{1} << 20), paths.summary);
    if (summary.is_object() && summary.contains("steps") && summary.at("steps").is_number_integer()) {
      return summary.at("steps").get<int64_t>();
    }
  } catch (const InputError&) {
  }
  return std::nullopt;  // unreadable: not a finished run we can vouch for; the resume checks the rest
}

namespace {

// A data-defined task from the vocabulary and labels in the checkpoint's metadata (the training
// file is not needed). InputError naming the checkpoint if they are malformed.
data::Task saved_data_task(const io::SafetensorsFile& file, const RunConfig& config, const std::string& checkpoint) {
  const nlohmann::json vocabulary = metadata_json(file, "vocabulary");
  const nlohmann::json labels = metadata_json(file, "labels");
  auto strings = [&](const nlohmann::json& list, const char* key, size_t skip) {
    std::vector<std::string> out;
    if (!list.is_array() || list.size() <= skip)
      throw InputError(fmt::format("{}: metadata '{}' must be a non-empty array of strings", checkpoint, key));
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string())
        throw InputError(fmt::format("{}: metadata '{}' must be a non-empty array of strings", checkpoint, key));
      if (i >= skip) out.push_back(list[i].get<std::string>());
    }
    return out;
  };
  if (!vocabulary.is_array() || vocabulary.size() < 2 || vocabulary[0] != data::kPadToken ||
      vocabulary[1] != data::kUnkToken) {
    throw InputError(fmt::format("{}: metadata 'vocabulary' must start with \"[PAD]\", \"[UNK]\"", checkpoint));
  }
  // Read before the try: their messages name the checkpoint already.
  std::vector<std::string> tokens = strings(vocabulary, "vocabulary", 2), label_names = strings(labels, "labels", 0);
  try {
    return data::make_data_task(config.task.name, std::move(tokens), std::move(label_names), kMaxFileSequence);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: metadata: {}", checkpoint, e.what()));
  }
}

// The mlm_text task from the characters in the checkpoint's metadata.
data::Task saved_text_task(const io::SafetensorsFile& file, const std::string& checkpoint) {
  nlohmann::json characters = metadata_json(file, "task_characters");
  if (!characters.is_array()) {
    throw InputError(fmt::format("{}: metadata 'task_characters' must be an array of bytes", checkpoint));
  }
  std::vector<uint8_t> bytes;
  for (const nlohmann::json& c : characters) {
    if (!c.is_number_unsigned() || c.get<uint64_t>() > 255) {
      throw InputError(fmt::format("{}: metadata 'task_characters' must be an array of bytes", checkpoint));
    }
    bytes.push_back(static_cast<uint8_t>(c.get<uint64_t>()));
  }
  // The characters are UTF-8 and there is at least one (masking needs an ordinary symbol); refuse
  // anything else here, naming the file, rather than fail inside the data code.
  if (bytes.empty()) {
    throw InputError(fmt::format("{}: metadata 'task_characters' is empty", checkpoint));
  }
  (void)data::utf8_characters(std::string(bytes.begin(), bytes.end()), checkpoint + ": metadata 'task_characters'");
  return build_text_task(bytes);
}

// The run's task: from the checkpoint's metadata, or generated again from the config.
data::Task saved_task(const io::SafetensorsFile& file, const RunConfig& config, const std::string& checkpoint) {
  if (data::is_data_task(config.task.name)) return saved_data_task(file, config, checkpoint);
  if (config.task.name != data::TaskKind::mlm_text) return build_task(config);
  return saved_text_task(file, checkpoint);
}

// K and the training data's majority label: from the metadata, or (generated data) from the same
// sample again.
Baselines saved_baselines(const io::SafetensorsFile& file, const RunConfig& config, const data::Task& task,
                          const std::string& checkpoint) {
  Baselines baselines{task.num_classes(), -1, task.output_vocab.tokens()};
  if (file.metadata.count("majority_label") != 0) {
    const std::string& label = file.metadata.at("majority_label");
    const std::optional<int32_t> id = task.output_vocab.find(label);
    if (!id) {
      throw InputError(
          fmt::format("{}: metadata 'majority_label' \"{}\" is not one of the task's labels", checkpoint, label));
    }
    baselines.majority_label = *id;
  } else if (!config.task.train_file) {
    baselines.majority_label = majority_label(config, task, std::nullopt);
  }
  return baselines;
}

}  // namespace

LoadedRun load_run(const std::string& dir, CheckpointChoice choice) {
  RunPaths paths(dir);
  if (!std::filesystem::is_directory(dir)) throw InputError(fmt::format("{}: no such run directory", dir));
  const bool has_best = std::filesystem::is_regular_file(paths.best);
  if (choice == CheckpointChoice::best && !has_best) {
    throw InputError(
        fmt::format("{}: no best.safetensors (the run keeps none with train.keep_best \"none\", or none "
                    "for generated data by default, or it has not evaluated yet); use --checkpoint last",
                    dir));
  }
  const bool use_best = choice == CheckpointChoice::best || (choice == CheckpointChoice::automatic && has_best);
  if (!use_best && !std::filesystem::is_regular_file(paths.checkpoint)) {
    throw InputError(fmt::format("{}: no checkpoint.safetensors (has the run saved a checkpoint yet?)", dir));
  }
  const std::string checkpoint = use_best ? paths.best : paths.checkpoint;
  io::SafetensorsFile file = read_checkpoint(checkpoint);
  RunConfig config = config_from_json(metadata_json(file, "config"), checkpoint + ": metadata 'config'", ".", false);
  data::Task task = saved_task(file, config, checkpoint);
  apply_task_options(task, config.task);
  nn::ModelOptions model_options;
  try {
    model_options = build_model_options(config, task);
  } catch (const InputError& error) {  // e.g. model.vocab_size below the vocabulary: name the file
    throw InputError(fmt::format("{}: metadata 'config': {}", checkpoint, error.what()));
  }
  auto model = std::make_unique<nn::EncoderModel>(model_options);
  load_model_state(file, *model);
  model->eval();
  const int64_t step = metadata_int(file, "step");
  const int64_t saved_max_len = metadata_int(file, "train_max_len");
  if (saved_max_len > kMaxFileSequence) {
    throw InputError(fmt::format("{}: metadata 'train_max_len' must be at most {}, got {}", checkpoint,
                                 kMaxFileSequence, saved_max_len));
  }
  const int32_t train_max_len = static_cast<int32_t>(saved_max_len);
  Baselines baselines = saved_baselines(file, config, task, checkpoint);
  DataFingerprint trained_on;
  if (file.metadata.count("data") != 0)
    trained_on = fingerprint_from_json(metadata_json(file, "data"), checkpoint + ": metadata 'data'");
  return LoadedRun{paths, checkpoint,    use_best,  std::move(config),    std::move(task), std::move(model),
                   step,  train_max_len, baselines, std::move(trained_on)};
}

std::string describe_checkpoint(const LoadedRun& run) {
  if (!run.is_best) return fmt::format("last (checkpoint.safetensors, step {})", run.step);
  return fmt::format("best (best.safetensors, step {}: the best held-out evaluation)", run.step);
}

RunEvaluation evaluate_run(LoadedRun& run, const std::optional<std::string>& data_file) {
  return evaluate_run(run, data_file, EvalSettings{});
}

RunEvaluation evaluate_run(LoadedRun& run, const std::optional<std::string>& data_file, const EvalSettings& settings) {
  if (settings.batch_size && (*settings.batch_size < 1 || *settings.batch_size > 1'000'000)) {
    throw InputError(fmt::format("--batch-size: must be between 1 and 1000000 (got {})", *settings.batch_size));
  }
  std::optional<data::Dataset> dataset;
  std::string description;
  std::optional<DataFile> digest;  // what the evaluated file holds now
  std::optional<DataChange> changed;
  if (data_file) {
    digest = fingerprint_data_file("--data", *data_file);
    FileUse use;
    dataset.emplace(load_eval_file(*data_file, run.config, run.task, &use));
    description =
        use.used == use.lines && use.reserved == 0 ? *data_file : fmt::format("{} ({})", *data_file, use.describe());
  } else {
    if (run.config.task.valid_file) {
      digest = fingerprint_data_file("task.valid_file", *run.config.task.valid_file);
      const std::vector<DataChange> changes = changed_data(run.trained_on, {*digest});
      if (!changes.empty()) changed = changes.front();
    }
    FileUse use;
    dataset.emplace(load_valid_set(run.config, run.task, nullptr, &use));
    description = run.config.task.valid_file
                      ? (use.used == use.lines ? *run.config.task.valid_file
                                               : fmt::format("{} ({})", *run.config.task.valid_file, use.describe()))
                      : fmt::format("generated validation set ({} examples, lengths {}-{})", dataset->size(),
                                    run.config.task.min_len, run.config.task.eval_max_len);
  }
  if (settings.trained_lengths_only) {
    // A single-length regime trained on its longest length alone.
    const int64_t shortest = run.config.task.length_regime == data::LengthRegime::single ? run.train_max_len : 0;
    std::vector<data::Example> trained;
    for (const data::Example& example : dataset->examples()) {
      const auto length = static_cast<int64_t>(example.tokens.size());
      if (length >= shortest && length <= run.train_max_len) trained.push_back(example);
    }
    if (trained.empty())
      throw InputError(fmt::format("{}: no sequence of a trained length (at most {})", description, run.train_max_len));
    dataset.emplace(run.task, std::move(trained));
    description += shortest > 0 ? fmt::format(", the trained length {} only", shortest)
                                : fmt::format(", trained lengths (at most {}) only", run.train_max_len);
  }
  const int32_t longest = std::max<int32_t>(1, dataset->max_length());
  std::vector<data::LengthBucket> buckets =
      data::make_length_buckets(longest, static_cast<int32_t>(run.config.task.bucket_width), run.train_max_len);
  if (run.config.task.length_regime == data::LengthRegime::single)  // its one trained length in a bucket of its own
    buckets = data::cut_buckets_before(std::move(buckets), static_cast<int32_t>(run.config.task.max_len));
  RunConfig batching = run.config;
  if (settings.batch_size) batching.train.batch_size = *settings.batch_size;
  EvalMetrics metrics = *evaluate_unless_stopped(*run.model, evaluation_batches(*dataset, batching), buckets, nullptr,
                                                 settings.batch_statistics, run.baselines);
  return RunEvaluation{description, digest ? digest->sha256 : "", changed, std::move(metrics)};
}

Prediction predict(LoadedRun& run, const std::string& input) {
  Prediction prediction;
  prediction.tokens = run.task.encode(input, "--input");
  const int64_t length = static_cast<int64_t>(prediction.tokens.size());
  if (length > run.config.model.max_len) {
    throw InputError(fmt::format("--input: {} tokens is longer than this model's model.max_len {}", length,
                                 run.config.model.max_len));
  }
  run.model->eval();
  NoGradGuard no_grad;
  Tensor logits = run.model->forward(prediction.tokens, {0, length});  // (rows, V)
  const int64_t rows = logits.size(0), V = logits.size(1);
  const float* values = logits.data();
  for (int64_t row = 0; row < rows; ++row) {
    const float* z = values + row * V;
    // Among the task's classes only: a model with extra head outputs (model.num_classes) never
    // predicts a class the task cannot name.
    const int64_t best = argmax_row(z, std::min<int64_t>(V, run.task.num_classes()));
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - double(z[best]));
    prediction.predicted.push_back(static_cast<int32_t>(best));
    prediction.probability.push_back(static_cast<float>(1.0 / sum));
  }
  if (run.task.has_generator()) prediction.expected = data::compute_targets(run.task, prediction.tokens);
  return prediction;
}

ScoredEvaluation score_run(LoadedRun& run, const std::optional<std::string>& data_file, const EvalSettings& settings,
                           bool with_baseline) {
  ScoredEvaluation out;
  out.evaluation = evaluate_run(run, data_file, settings);
  if (with_baseline && run.config.task.name == data::TaskKind::sequence_classification) {
    const data::Dataset scored =
        data_file ? load_eval_file(*data_file, run.config, run.task) : load_valid_set(run.config, run.task);
    out.baseline = run_baseline(run.config, run.task, scored);
  }
  const Confusion& confusion = out.evaluation.metrics.confusion;
  out.own_data = run.task.is_data_defined() && !confusion.empty();
  if (out.own_data) out.model = held_out_score(confusion);
  return out;
}

}  // namespace normlab::train
