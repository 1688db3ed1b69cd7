#include "normlab/train/memory.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "normlab/data/task.hpp"

namespace normlab::train {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kFixedBytes = 8.0 * 1024 * 1024;
constexpr double kFloat = 4.0;

double file_bytes(const std::optional<std::string>& path) {
  if (!path) return 0.0;
  std::error_code ec;
  const auto size = std::filesystem::file_size(*path, ec);
  return ec ? 0.0 : double(size);
}

// The length a batch of generated lengths uniform in [lo, hi] is budgeted at: the mean, 1.1x (a
// batch of 32 lengths rarely strays further from the mean).
double batch_length(int64_t lo, int64_t hi) { return std::min(double(hi), 1.1 * double(lo + hi) / 2.0); }
// The keys an attention row sees on average over tokens: E[L^2] / E[L] for uniform lengths.
double attention_length(int64_t lo, int64_t hi) { return std::min(double(hi), (2.0 * double(hi) + double(lo)) / 3.0); }

}  // namespace

double MemoryEstimate::total() const {
  return fixed + parameters + data + std::max({training_step, evaluation, checkpoint});
}

std::string MemoryEstimate::describe() const {
  return fmt::format("{:.2f} GiB (parameters and optimizer state {:.2f}, data {:.2f}, training step {:.2f}, "
                     "evaluation {:.2f} GiB)",
                     total() / kGiB, parameters / kGiB, data / kGiB, training_step / kGiB, evaluation / kGiB);
}

MemoryEstimate estimate_memory(const RunConfig& config) {
  const ModelConfig& m = config.model;
  const TaskConfig& t = config.task;
  const double d = double(m.d_model), ffn = double(m.ffn), layers = double(m.layers), heads = double(m.heads);
  const double batch = double(config.train.batch_size);

  // Vocabulary and classes: the task's own counts where the config does not set them (mlm_text:
  // one per distinct character, at most the training file's size).
  double vocab = 0, classes = 0;
  if (t.name == "mlm_text") {
    const double characters = std::min(65536.0, file_bytes(t.train_file)) + 2;
    vocab = classes = characters;
  } else {
    const data::Task task = data::make_task(t.name);
    vocab = task.input_vocab_size();
    classes = task.num_classes();
  }
  if (m.vocab_size) vocab = double(*m.vocab_size);
  if (m.num_classes) classes = double(*m.num_classes);
  const bool per_sequence = t.name == "majority";

  MemoryEstimate estimate;
  estimate.fixed = kFixedBytes;
  const double params = layers * (4 * d * d + 2 * d * ffn + 9 * d + ffn) + (vocab + classes + double(m.max_len)) * d +
                        classes + 2 * d;
  estimate.parameters = kFloat * 4 * params;
  estimate.checkpoint = kFloat * 6 * params;

  // Data: generated validation examples, or the files (text read whole while parsing, then about
  // as many bytes again as examples; characters take 4 bytes each as tokens).
  const double text_factor = t.name == "mlm_text" ? 5.0 : 2.0;
  const double train_data = text_factor * file_bytes(t.train_file);
  double valid_data = 0;
  if (t.valid_file) {
    valid_data = text_factor * file_bytes(t.valid_file);
  } else {
    const double tokens = double(t.eval_examples) * double(t.min_len + t.eval_max_len) / 2.0;
    valid_data = 16.0 * tokens + 100.0 * double(t.eval_examples);
  }
  estimate.data = train_data + valid_data;

  const bool generated = !t.train_file;
  const double train_length = generated ? batch_length(t.min_len, t.max_len) : double(t.max_len);
  const double train_keys = generated ? attention_length(t.min_len, t.max_len) : double(t.max_len);
  const double train_tokens = batch * train_length;
  const double train_rows = per_sequence ? batch : train_tokens;
  estimate.training_step =
      kFloat * (layers * train_tokens * (16 * d + 3 * ffn + 2 * heads * train_keys) + 4 * train_rows * classes +
                4 * train_tokens * d);

  const bool generated_valid = !t.valid_file;
  const double eval_length = generated_valid ? batch_length(t.min_len, t.eval_max_len) : double(t.eval_max_len);
  const double eval_keys = generated_valid ? attention_length(t.min_len, t.eval_max_len) : double(t.eval_max_len);
  const double eval_tokens = batch * eval_length;
  const double eval_rows = per_sequence ? batch : eval_tokens;
  estimate.evaluation = kFloat * (eval_tokens * (8 * d + 2 * ffn + heads * eval_keys) + 2 * eval_rows * classes);
  return estimate;
}

double memory_limit_bytes() {
  const double limit = 16.0 * kGiB;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return limit;
  return std::min(limit, double(pages) * double(page_size));
}

}  // namespace normlab::train
