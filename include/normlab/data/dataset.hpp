#pragma once
// Datasets and the samplers that turn them into batches.
//
//   Dataset           a task plus its examples (from a JSONL file or a generator).
//   BatchSampler      epochs over a Dataset: a fresh shuffle per epoch, `batch_size` sequences per
//                     batch, masks drawn at batch time for masked LM. Its whole state is a small
//                     struct, so a checkpoint resumes with exactly the batches it would have seen.
//   GeneratorSampler  an endless stream of freshly generated examples (algorithmic tasks only).
//   ordered_batches   every example once, in file order, for evaluation.
//
// Both samplers are deterministic functions of their seed: the order of epoch e is a Fisher-Yates
// shuffle drawn from Rng(derive_seed(seed, e)), so it can be rebuilt from (seed, epoch) alone.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "normlab/io/stop.hpp"
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/data/mlm.hpp"
#include "normlab/data/regime.hpp"
#include "normlab/data/task.hpp"
#include "normlab/rng.hpp"

namespace normlab::data {

class Dataset {
 public:
  // Every example is checked against the task (ids in range, targets shaped for the task): UsageError.
  Dataset(Task task, std::vector<Example> examples);
  // load_jsonl (strict; InputError "PATH:LINE: ...") wrapped in a Dataset.
  static Dataset load(const std::string& path, Task task);

  const Task& task() const { return task_; }
  const std::vector<Example>& examples() const { return examples_; }
  int64_t size() const { return static_cast<int64_t>(examples_.size()); }
  const Example& operator[](int64_t i) const { return examples_[static_cast<size_t>(i)]; }
  int32_t min_length() const { return min_length_; }  // 0 when empty
  int32_t max_length() const { return max_length_; }  // 0 when empty

 private:
  Task task_;
  std::vector<Example> examples_;
  int32_t min_length_ = 0;
  int32_t max_length_ = 0;
};

struct SamplerOptions {
  int64_t batch_size = 32;
  bool shuffle = true;     // false: file order every epoch
  bool drop_last = false;  // true: skip an epoch's final short batch
  uint64_t seed = 0;
  MaskConfig mask;  // masked LM only
};

// Everything needed to continue exactly where a BatchSampler stopped. dataset_size and batch_size
// are kept so that restoring into a different setup is an error instead of a silent change.
struct SamplerState {
  uint64_t seed = 0;
  uint64_t epoch = 0;     // completed epochs
  uint64_t position = 0;  // index, in this epoch's order, of the next example
  uint64_t mask_rng_state = 0;
  uint64_t mask_rng_inc = 0;
  int64_t dataset_size = 0;
  int64_t batch_size = 0;
  bool operator==(const SamplerState&) const = default;
};

class BatchSampler {
 public:
  // `dataset` must outlive the sampler. UsageError if batch_size < 1, the dataset is empty, or
  // drop_last leaves no batch.
  BatchSampler(const Dataset& dataset, SamplerOptions options);

  // The next batch; after the last batch of an epoch the next epoch starts (reshuffled).
  Batch next();
  int64_t batches_per_epoch() const;
  uint64_t epoch() const { return epoch_; }  // completed epochs

  SamplerState state() const;
  // InputError if the state does not belong to this dataset size / batch size / seed.
  // InputError "<where>: ..." naming what differs.
  void restore(const SamplerState& state, const std::string& where = "sampler state");

 private:
  void start_epoch();

  const Dataset* dataset_;
  SamplerOptions options_;
  std::vector<int64_t> order_;  // (dataset size) this epoch's example order
  uint64_t epoch_ = 0;
  uint64_t position_ = 0;
  Rng mask_rng_;
};

struct GeneratorOptions {
  int64_t batch_size = 32;
  int32_t min_len = 1;
  int32_t max_len = 32;
  uint64_t seed = 0;
  LengthRegime regime = LengthRegime::mixed;  // regime.hpp: which lengths share a batch
  int32_t bucket_width = 8;                   // bucketed regime only
};

struct GeneratorState {
  uint64_t rng_state = 0;
  uint64_t rng_inc = 0;
  uint64_t batches_drawn = 0;
  bool operator==(const GeneratorState&) const = default;
};

// Fresh examples every batch: training data that never repeats. Lengths uniform in [min_len,
// max_len] in every batch (mixed), or chosen by the regime (single, bucketed; regime.hpp). UsageError for a task
// without a generator (mlm_text) or a bad length range.
class GeneratorSampler {
 public:
  GeneratorSampler(Task task, GeneratorOptions options);
  Batch next();
  uint64_t batches_drawn() const { return batches_drawn_; }
  GeneratorState state() const;
  void restore(const GeneratorState& state);

 private:
  Task task_;
  GeneratorOptions options_;
  Rng rng_;
  uint64_t batches_drawn_ = 0;
};

// All examples in order, `batch_size` per batch (the last may be shorter). Masked-LM examples are
// masked by mask_examples(..., mask_seed), so every evaluation sees the same masks.
// A stop request (io/stop.hpp) throws io::StopRequested between batches.
std::vector<Batch> ordered_batches(const Dataset& dataset, int64_t batch_size, uint64_t mask_seed = 0,
                                   const MaskConfig& mask = {}, io::StopFlag stop = nullptr);

// Sampler states as JSON objects (for checkpoints). from_json: InputError "WHERE: key: ..." on a
// missing key or wrong type.
nlohmann::json sampler_state_to_json(const SamplerState& state);
SamplerState sampler_state_from_json(const nlohmann::json& json, const std::string& where);
nlohmann::json generator_state_to_json(const GeneratorState& state);
GeneratorState generator_state_from_json(const nlohmann::json& json, const std::string& where);

}  // namespace normlab::data
