#include "normlab/train/memory.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/kernels/attention.hpp"

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

// Calls on_chunk(data, n) over the file's bytes in 64 KiB pieces. An estimate reads only a regular
// file (io::open_regular_file) and nothing of one it cannot open: the loader reports that error.
template <typename OnChunk>
void for_each_chunk(const std::string& path, OnChunk on_chunk) {
  std::optional<io::ReadableFile> file;
  try {
    file.emplace(io::open_regular_file(path));
  } catch (const InputError&) {
    return;
  }
  std::vector<char> buffer(size_t{1} << 16);
  for (;;) {
    const ssize_t got = ::read(file->fd(), buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    on_chunk(buffer.data(), size_t(got));
  }
}

// What the examples of a JSONL file take once loaded: the text, read whole while parsing, about
// as many bytes again as tokens (`text_factor`), and per line an Example (two vectors and their
// heap blocks, ~128 bytes, twice while the vector grows). Lines are counted by streaming the file.
double count_lines(const std::string& path) {
  double lines = 1;
  for_each_chunk(path, [&](const char* data, size_t n) { lines += double(std::count(data, data + n, '\n')); });
  return lines;
}

double file_data_bytes(const std::optional<std::string>& path, double text_factor) {
  const double bytes = file_bytes(path);
  if (bytes == 0) return 0.0;
  return text_factor * bytes + 256.0 * count_lines(*path);
}

// The mean sequence length of a JSONL file, from its bytes per line: a text line spends ~13 bytes
// on {"text": ""}, a symbol line ~25 bytes on its keys and ~8 bytes a symbol (symbol and target).
double file_mean_length(const std::string& path, bool text) {
  const double per_line = file_bytes(path) / count_lines(path);
  return std::max(1.0, text ? per_line - 13.0 : (per_line - 25.0) / 8.0);
}

// Distinct UTF-8 characters in a file (its JSON punctuation included), by streaming it: the size of
// an mlm_text vocabulary before the file is parsed. Text written as \u escapes is undercounted.
double distinct_characters(const std::optional<std::string>& path) {
  if (!path) return 0.0;
  std::set<uint32_t> seen;
  uint32_t current = 0;
  for_each_chunk(*path, [&](const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const auto u = static_cast<unsigned char>(data[i]);
      if ((u & 0xc0) == 0x80) {
        current = (current << 8) | u;  // a continuation byte extends the character
        continue;
      }
      if (current != 0) seen.insert(current);
      current = u;
    }
  });
  if (current != 0) seen.insert(current);
  return double(std::min<size_t>(seen.size(), 65536));
}

// The length a batch of generated lengths uniform in [lo, hi] is budgeted at: the mean, 1.1x (a
// batch of 32 lengths rarely strays further from the mean).
double batch_length(int64_t lo, int64_t hi) { return std::min(double(hi), 1.1 * double(lo + hi) / 2.0); }

}  // namespace

double MemoryEstimate::total() const {
  return fixed + parameters + data + std::max({training_step, evaluation, checkpoint});
}

std::string MemoryEstimate::describe() const {
  return fmt::format(
      "{:.2f} GiB (parameters and optimizer state {:.2f}, data {:.2f}, training step {:.2f}, "
      "evaluation {:.2f} GiB)",
      total() / kGiB, parameters / kGiB, data / kGiB, training_step / kGiB, evaluation / kGiB);
}

MemoryEstimate estimate_memory(const RunConfig& config) {
  const ModelConfig& m = config.model;
  const TaskConfig& t = config.task;
  const double d = double(m.d_model), ffn = double(m.dim_feedforward), layers = double(m.num_layers),
               heads = double(m.num_heads);
  const double batch = double(config.train.batch_size);

  // Vocabulary and classes: the task's own counts where the config does not set them (mlm_text:
  // one per distinct character, at most the training file's size).
  double vocab = 0, classes = 0;
  if (t.name == data::TaskKind::mlm_text) {
    vocab = classes = distinct_characters(t.train_file) + 2;
  } else if (data::is_data_task(t.name)) {
    // From the training file, not read yet: its distinct words, bounded by one per 2 bytes (a
    // one-byte word and a space) and by the embedding limit; the head's labels likewise.
    vocab = classes = std::min(65536.0, file_bytes(t.train_file) / 2.0 + 2.0);
  } else {
    const data::Task task = data::make_task(t.name);
    vocab = task.input_vocab_size();
    classes = task.num_classes();
  }
  if (m.vocab_size) vocab = double(*m.vocab_size);
  if (m.num_classes) classes = double(*m.num_classes);
  const bool per_sequence = t.name == data::TaskKind::majority || t.name == data::TaskKind::sequence_classification;

  MemoryEstimate estimate;
  estimate.fixed = kFixedBytes;
  const double params =
      layers * (4 * d * d + 2 * d * ffn + 9 * d + ffn) + (vocab + classes + double(m.max_len)) * d + classes + 2 * d;
  estimate.parameters = kFloat * 4 * params;
  estimate.checkpoint = kFloat * 6 * params;

  // Data: generated validation examples, or the files (text read whole while parsing, then about
  // as many bytes again as examples; characters take 4 bytes each as tokens).
  const double text_factor = t.name == data::TaskKind::mlm_text ? 5.0 : 2.0;
  const double train_data = file_data_bytes(t.train_file, text_factor);
  double valid_data = 0;
  if (t.valid_file) {
    valid_data = file_data_bytes(t.valid_file, text_factor);
  } else {
    const double tokens = double(t.eval_examples) * double(t.min_len + t.eval_max_len) / 2.0;
    valid_data = 16.0 * tokens + 100.0 * double(t.eval_examples);
  }
  estimate.data = train_data + valid_data;

  // File data: its mean length (at most 3/4 of the task's limit: longer lines are filtered out, so
  // the kept ones are shorter), 1.1x for batches of longer lines, at most the limit itself.
  const bool text = t.name == data::TaskKind::mlm_text;
  auto file_length = [&](const std::string& path, int64_t limit, double factor) {
    return std::min(double(limit), factor * std::min(file_mean_length(path, text), 0.75 * double(limit)));
  };
  const bool generated = !t.train_file;
  const double train_length =
      generated ? batch_length(t.min_len, t.max_len) : file_length(*t.train_file, t.max_len, 1.1);
  const double train_tokens = batch * train_length;
  const double train_rows = per_sequence ? batch : train_tokens;
  // Attention keeps 2 floats per token and head for its backward (it recomputes the probabilities:
  // kernels/attention.hpp), and for sequences of at most 256 tokens their exponentials, up to the
  // length rounded up to 16 floats per token and head; its per-thread scratch holds a block of 48
  // query rows against all the keys, twice, and a few (keys, head size) matrices.
  // (NORMLAB_ISA=reference keeps every (len, len) probability matrix instead; this estimate is
  // for the fast kernels.)
  const double threads = config.train.threads > 0 ? double(config.train.threads)
                                                  : double(std::max(1u, std::thread::hardware_concurrency()));
  const double attention_scratch = threads * (4 * 48 * double(t.max_len) + 5 * double(t.max_len) * d);
  const int64_t kept_limit = kernels::kAttentionKeptExpsMaxLength;
  const double kept_exps =
      t.min_len <= kept_limit ? std::ceil(double(std::min<int64_t>(t.max_len, kept_limit)) / 16.0) * 16.0 : 0.0;
  estimate.training_step = kFloat * (layers * train_tokens * (16 * d + 3 * ffn + (2 + kept_exps) * heads) +
                                     4 * train_rows * classes + 4 * train_tokens * d + attention_scratch);

  const bool generated_valid = !t.valid_file;
  const double eval_length =
      generated_valid ? batch_length(t.min_len, t.eval_max_len) : file_length(*t.valid_file, t.eval_max_len, 1.1);
  const double eval_tokens = batch * eval_length;
  const double eval_rows = per_sequence ? batch : eval_tokens;
  estimate.evaluation = kFloat * (eval_tokens * (8 * d + 2 * ffn) + 2 * eval_rows * classes + attention_scratch);
  return estimate;
}

RunConfig fits_in_memory(RunConfig config) {
  const MemoryEstimate memory = estimate_memory(config);
  if (memory.total() > memory_limit_bytes()) {
    throw InputError(
        fmt::format("model: this run would need about {}, more than the limit of {:.1f} GiB: reduce "
                    "model.d_model, model.layers, model.ffn, model.num_classes, train.batch_size, "
                    "task.eval_examples or the task lengths",
                    memory.describe(), memory_limit_bytes() / kGiB));
  }
  return config;
}

double memory_limit_bytes() {
  const double limit = 16.0 * kGiB;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return limit;
  return std::min(limit, double(pages) * double(page_size));
}

}  // namespace normlab::train
