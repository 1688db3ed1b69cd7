#include "normlab/train/setup.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "normlab/data/jsonl.hpp"
#include "normlab/error.hpp"
#include "normlab/io/test_pause.hpp"

namespace normlab::train {

data::Task data_task_schema(data::TaskKind kind) {
  // Only the shape matters for reading the strings; the real vocabularies come from them.
  return data::make_data_task(kind, {"w"}, {"l"}, kMaxFileSequence);
}

void apply_task_options(data::Task& task, const TaskConfig& t) {
  task.text = {t.lowercase, t.split_punctuation};
  task.file.format = t.format;
  task.file.text_field = t.text_field.value_or("");
  task.file.label_field = t.label_field.value_or("");
  task.file.max_file_bytes = t.max_file_mb << 20;
  task.file.min_count = t.min_count;
}

data::Task build_task(const RunConfig& config, io::StopFlag stop) {
  if (data::is_data_task(config.task.name)) {
    // Validation guarantees a training file for a data-defined task.
    data::Task schema = data_task_schema(config.task.name);
    apply_task_options(schema, config.task);
    data::LoadStats skipped;  // over-long lines are skipped here as in training
    const data::VocabularyCounts counts = data::count_vocabulary(*config.task.train_file, schema, stop, &skipped);
    try {
      data::Task task = data::make_data_task(config.task.name, counts, config.task.min_count, kMaxFileSequence);
      apply_task_options(task, config.task);
      return task;
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", *config.task.train_file, e.what()));
    }
  }
  if (config.task.name != data::TaskKind::mlm_text) {
    data::Task task = data::make_task(config.task.name);
    task.max_seq_len = kMaxFileSequence;
    apply_task_options(task, config.task);
    return task;
  }
  // Validation guarantees a training file for mlm_text.
  data::LoadStats stats;  // over-long lines are skipped here as in training
  std::vector<std::string> lines =
      data::load_text_lines(*config.task.train_file, kMaxFileSequence, config.task.max_file_mb << 20, stop, &stats);
  data::Task task = data::make_text_task(lines, kMaxFileSequence);
  apply_task_options(task, config.task);
  return task;
}

data::Task build_text_task(const std::vector<uint8_t>& characters) {
  // make_text_task collects the distinct characters of its lines in code point order: one line
  // holding every character gives back the same vocabulary.
  std::string all(characters.begin(), characters.end());
  return data::make_text_task({all}, kMaxFileSequence);
}

std::vector<uint8_t> text_task_characters(const data::Task& task) {
  std::vector<uint8_t> characters;
  const data::Vocab& vocab = task.input_vocab;
  for (int32_t id = vocab.num_specials(); id < vocab.size(); ++id) {
    for (char byte : vocab.token(id)) characters.push_back(static_cast<uint8_t>(byte));
  }
  return characters;
}

nn::ModelOptions build_model_options(const RunConfig& config, const data::Task& task) {
  const ModelConfig& m = config.model;
  nn::ModelOptions options;
  options.encoder.d_model = m.d_model;
  options.encoder.num_heads = m.num_heads;
  options.encoder.num_layers = m.num_layers;
  options.encoder.dim_feedforward = m.dim_feedforward;
  options.encoder.dropout = static_cast<float>(m.dropout);
  options.encoder.activation = m.activation;
  options.encoder.norm = m.norm;
  options.encoder.placement = m.placement;
  options.encoder.residual = m.residual;
  options.encoder.norm_eps = static_cast<float>(m.norm_eps);
  options.encoder.final_norm = m.final_norm;
  options.encoder.qk_norm = m.qk_norm;
  if (m.vocab_size && *m.vocab_size < task.input_vocab_size()) {
    // mlm_text's vocabulary comes from the training file: name it, since the config alone cannot say.
    const std::string source =
        task.is_masked_lm() && config.task.train_file
            ? fmt::format(" (the characters of {} plus [MASK] and [UNK])", *config.task.train_file)
            : "";
    throw InputError(fmt::format("model.vocab_size: must be at least the {} task's {} input symbols{} (got {})",
                                 task.name, task.input_vocab_size(), source, *m.vocab_size));
  }
  if (m.num_classes && *m.num_classes < task.num_classes()) {
    throw InputError(fmt::format("model.num_classes: must be at least the {} task's {} classes (got {})", task.name,
                                 task.num_classes(), *m.num_classes));
  }
  options.vocab_size = m.vocab_size.value_or(task.input_vocab_size());
  options.num_classes = m.num_classes.value_or(task.num_classes());
  options.max_len = m.max_len;
  options.positional = m.positional;
  options.head = task.target_kind == data::TargetKind::per_sequence ? nn::Head::sequence : nn::Head::token;
  options.seed = static_cast<uint64_t>(config.train.seed);
  return options;
}

data::MaskConfig build_mask_config(const RunConfig& config) {
  data::MaskConfig mask;
  mask.select_prob = static_cast<float>(config.task.select_prob);
  mask.mask_prob = static_cast<float>(config.task.mask_prob);
  mask.random_prob = static_cast<float>(config.task.random_prob);
  return mask;
}

std::string task_title(const RunConfig& config) {
  if (config.task.label) return *config.task.label;
  if (data::is_data_task(config.task.name) && config.task.train_file) {
    // The data names the task: "sentiment/train.jsonl", its folder and file.
    const std::filesystem::path path(*config.task.train_file);
    const std::string folder = path.parent_path().filename().string();
    return folder.empty() ? path.filename().string() : folder + "/" + path.filename().string();
  }
  return data::to_string(config.task.name);
}

std::string FileUse::describe() const {
  std::vector<std::string> reasons;
  if (shorter > 0) reasons.push_back(fmt::format("{} shorter than task.min_len {}", shorter, min_len));
  if (longer > 0) reasons.push_back(fmt::format("{} longer than {} {}", longer, max_key, max_len));
  if (beyond_count > 0)
    reasons.push_back(fmt::format("{} after the first task.eval_examples {}", beyond_count, count_limit));
  std::string out = used == lines ? fmt::format("used all {} lines", lines)
                                  : fmt::format("used {} of {} lines: {}", used, lines, fmt::join(reasons, ", "));
  if (reserved > 0)
    out +=
        fmt::format("; warning: {} tokens written as the reserved \"[PAD]\" or \"[UNK]\" were read as [UNK]", reserved);
  return out;
}

namespace {

// The examples of a data file, over-long lines skipped and counted in `counts` (data::LoadStats).
std::vector<data::Example> load_counted(const std::string& path, const data::Task& task, io::StopFlag stop,
                                        FileUse& counts) {
  data::LoadStats stats;
  std::vector<data::Example> all = data::load_jsonl(path, task, task.file.max_file_bytes, stop, &stats);
  counts.lines = stats.lines;
  counts.longer = stats.too_long;
  counts.reserved = stats.reserved;
  counts.unknown = stats.unknown;
  return all;
}

}  // namespace

std::optional<data::Dataset> load_train_set(const RunConfig& config, const data::Task& task, io::StopFlag stop,
                                            FileUse* use) {
  if (!config.task.train_file) return std::nullopt;
  const std::string& path = *config.task.train_file;
  FileUse counts;
  std::vector<data::Example> all = load_counted(path, task, stop, counts);
  std::vector<data::Example> kept;
  counts.min_len = config.task.min_len;
  counts.max_len = config.task.max_len;
  counts.max_key = "task.max_len";
  for (data::Example& example : all) {
    const int64_t length = static_cast<int64_t>(example.tokens.size());
    if (length < config.task.min_len) ++counts.shorter;
    else if (length > config.task.max_len) ++counts.longer;
    else kept.push_back(std::move(example));
  }
  counts.used = static_cast<int64_t>(kept.size());
  if (use) *use = counts;
  if (kept.empty()) {
    throw InputError(fmt::format("{}: no example has a length in [task.min_len, task.max_len] = [{}, {}]", path,
                                 config.task.min_len, config.task.max_len));
  }
  return data::Dataset(task, std::move(kept));
}

data::Dataset load_valid_set(const RunConfig& config, const data::Task& task, io::StopFlag stop, FileUse* use) {
  const TaskConfig& t = config.task;
  io::test_pause("data", 0, stop);
  if (!t.valid_file) {
    return data::Dataset(task, data::generate_examples(task, t.eval_examples, static_cast<int32_t>(t.min_len),
                                                       static_cast<int32_t>(t.eval_max_len), valid_seed(config), stop));
  }
  FileUse counts;
  std::vector<data::Example> all = load_counted(*t.valid_file, task, stop, counts);
  std::vector<data::Example> kept;
  counts.max_len = t.eval_max_len;
  counts.max_key = "task.eval_max_len";
  counts.count_limit = t.eval_examples;
  for (data::Example& example : all) {
    if (static_cast<int64_t>(kept.size()) == t.eval_examples) {
      ++counts.beyond_count;
      continue;
    }
    if (static_cast<int64_t>(example.tokens.size()) <= t.eval_max_len) kept.push_back(std::move(example));
    else ++counts.longer;
  }
  counts.used = static_cast<int64_t>(kept.size());
  if (use) *use = counts;
  if (kept.empty()) {
    throw InputError(
        fmt::format("{}: no example has a length of at most task.eval_max_len = {}", *t.valid_file, t.eval_max_len));
  }
  return data::Dataset(task, std::move(kept));
}

data::Dataset load_eval_file(const std::string& path, const RunConfig& config, const data::Task& task, FileUse* use) {
  FileUse counts;
  std::vector<data::Example> all = load_counted(path, task, nullptr, counts);
  counts.max_len = config.model.max_len;
  counts.max_key = "model.max_len";
  std::vector<data::Example> kept;
  for (data::Example& example : all) {
    if (static_cast<int64_t>(example.tokens.size()) <= config.model.max_len) kept.push_back(std::move(example));
    else ++counts.longer;
  }
  counts.used = static_cast<int64_t>(kept.size());
  if (use) *use = counts;
  if (kept.empty())
    throw InputError(fmt::format("{}: no example has a length of at most this model's model.max_len {}", path,
                                 config.model.max_len));
  return data::Dataset(task, std::move(kept));
}

int32_t train_max_length(const RunConfig& config, const std::optional<data::Dataset>& train_set) {
  return train_set ? train_set->max_length() : static_cast<int32_t>(config.task.max_len);
}

int32_t majority_label(const RunConfig& config, const data::Task& task, const std::optional<data::Dataset>& train_set) {
  std::vector<int64_t> counts(static_cast<size_t>(task.num_classes()), 0);
  auto count = [&](const std::vector<data::Example>& examples) {
    for (const data::Example& example : examples) {
      // Raw masked-LM text: its characters are the targets masking will draw from.
      const std::vector<int32_t>& labels =
          task.is_masked_lm() && example.targets.empty() ? example.tokens : example.targets;
      for (int32_t label : labels)
        if (label >= 0 && label < task.num_classes()) ++counts[static_cast<size_t>(label)];
    }
  };
  if (train_set) {
    count(train_set->examples());
  } else if (task.has_generator()) {
    // A fixed sample of the generator's training lengths: the same answer for every train.seed.
    count(data::generate_examples(task, 4096, static_cast<int32_t>(config.task.min_len),
                                  static_cast<int32_t>(config.task.max_len), data::derive_seed(kValidSeed, 2)));
  }
  int32_t best = -1;
  for (size_t label = 0; label < counts.size(); ++label)
    if (counts[label] > 0 && (best < 0 || counts[label] > counts[static_cast<size_t>(best)]))
      best = static_cast<int32_t>(label);
  return best;
}

std::vector<data::Batch> evaluation_batches(const data::Dataset& dataset, const RunConfig& config, io::StopFlag stop) {
  return data::ordered_batches(dataset, config.train.batch_size, kValidMaskSeed, build_mask_config(config), stop);
}

}  // namespace normlab::train
