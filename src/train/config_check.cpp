// The config's cross-field rules: what no single key can say on its own (divisibility, length
// ranges, the keys only own data reads, the files a task needs).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/train/config.hpp"

namespace normlab::train {

namespace {

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

}  // namespace normlab::train
