#include "normlab/data/dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "normlab/data/jsonl.hpp"
#include "normlab/error.hpp"

namespace normlab::data {

namespace {

// The mask stream has its own PCG stream id so it never coincides with a shuffle stream.
constexpr uint64_t kMaskStream = 0x6d61736b6d61736bULL;  // "maskmask"

void check_example(const Task& task, const Example& example, size_t index) {
  auto fail = [&](const std::string& what) {
    throw UsageError(fmt::format("Dataset({}): example {}: {}", task.name, index, what));
  };
  if (example.tokens.empty()) fail("no tokens");
  for (int32_t id : example.tokens) {
    if (id < 0 || id >= task.input_vocab_size()) fail(fmt::format("token id {} out of range", id));
  }
  size_t expected = task.target_kind == TargetKind::per_sequence ? 1 : example.tokens.size();
  bool raw_text = task.is_masked_lm() && example.targets.empty();
  if (!raw_text && example.targets.size() != expected) {
    fail(fmt::format("{} targets, expected {}", example.targets.size(), expected));
  }
  for (int32_t id : example.targets) {
    if (id < -1 || id >= task.num_classes()) fail(fmt::format("target id {} out of range", id));
    if (id == -1 && task.target_kind == TargetKind::per_sequence) fail("per-sequence target is -1");
  }
}

// Packs examples, masking raw masked-LM text with `mask_rng`.
Batch make_batch(const Task& task, const std::vector<const Example*>& chosen, const MaskConfig& mask, Rng& mask_rng) {
  if (!task.is_masked_lm()) return pack_batch(std::span<const Example* const>(chosen), task.target_kind);
  std::vector<Example> masked;
  masked.reserve(chosen.size());
  for (const Example* example : chosen) {
    masked.push_back(example->targets.empty() ? mask_tokens(example->tokens, task.input_vocab, mask, mask_rng)
                                              : *example);
  }
  return pack_batch(masked, task.target_kind);
}

uint64_t get_u64(const nlohmann::json& json, const char* key, const std::string& where) {
  if (!json.is_object()) throw InputError(fmt::format("{}: expected a JSON object", where));
  if (!json.contains(key)) throw InputError(fmt::format("{}: missing key \"{}\"", where, key));
  const nlohmann::json& value = json.at(key);
  // Parsed JSON holds non-negative integers as unsigned; a hand-built object may hold them signed.
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<uint64_t>(value.get<int64_t>());
  throw InputError(fmt::format("{}: {}: expected a non-negative integer", where, key));
}

}  // namespace

Dataset::Dataset(Task task, std::vector<Example> examples) : task_(std::move(task)), examples_(std::move(examples)) {
  for (size_t i = 0; i < examples_.size(); ++i) {
    check_example(task_, examples_[i], i);
    int32_t length = static_cast<int32_t>(examples_[i].tokens.size());
    min_length_ = i == 0 ? length : std::min(min_length_, length);
    max_length_ = std::max(max_length_, length);
  }
}

Dataset Dataset::load(const std::string& path, Task task) {
  std::vector<Example> examples = load_jsonl(path, task);
  return Dataset(std::move(task), std::move(examples));
}

BatchSampler::BatchSampler(const Dataset& dataset, SamplerOptions options)
    : dataset_(&dataset), options_(options), mask_rng_(options.seed, kMaskStream) {
  if (options_.batch_size < 1) throw UsageError(fmt::format("BatchSampler: batch_size {} < 1", options_.batch_size));
  if (dataset.size() == 0) throw UsageError("BatchSampler: empty dataset");
  if (dataset.size() > int64_t{UINT32_MAX}) throw UsageError("BatchSampler: more than 2^32 examples");
  if (batches_per_epoch() == 0) {
    throw UsageError(fmt::format("BatchSampler: drop_last with {} examples and batch_size {} leaves no batch",
                                 dataset.size(), options_.batch_size));
  }
  start_epoch();
}

int64_t BatchSampler::batches_per_epoch() const {
  const int64_t size = dataset_->size();
  return options_.drop_last ? size / options_.batch_size : (size + options_.batch_size - 1) / options_.batch_size;
}

void BatchSampler::start_epoch() {
  order_.resize(static_cast<size_t>(dataset_->size()));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!options_.shuffle) return;
  // Fisher-Yates, drawn from a generator that depends only on (seed, epoch).
  Rng shuffle_rng(derive_seed(options_.seed, epoch_));
  for (size_t i = order_.size() - 1; i > 0; --i) {
    size_t j = shuffle_rng.below(static_cast<uint32_t>(i + 1));
    std::swap(order_[i], order_[j]);
  }
}

Batch BatchSampler::next() {
  const uint64_t size = static_cast<uint64_t>(dataset_->size());
  const uint64_t batch_size = static_cast<uint64_t>(options_.batch_size);
  const uint64_t end = std::min(size, position_ + batch_size);
  std::vector<const Example*> chosen;
  chosen.reserve(end - position_);
  for (uint64_t i = position_; i < end; ++i) chosen.push_back(&(*dataset_)[order_[i]]);
  Batch batch = make_batch(dataset_->task(), chosen, options_.mask, mask_rng_);
  position_ = end;
  // Roll over as soon as the epoch is used up, so epoch() counts completed epochs.
  if (position_ == size || (options_.drop_last && size - position_ < batch_size)) {
    ++epoch_;
    position_ = 0;
    start_epoch();
  }
  return batch;
}

SamplerState BatchSampler::state() const {
  SamplerState state;
  state.seed = options_.seed;
  state.epoch = epoch_;
  state.position = position_;
  state.mask_rng_state = mask_rng_.state();
  state.mask_rng_inc = mask_rng_.increment();
  state.dataset_size = dataset_->size();
  state.batch_size = options_.batch_size;
  return state;
}

void BatchSampler::restore(const SamplerState& state, const std::string& where) {
  if (state.dataset_size != dataset_->size() || state.batch_size != options_.batch_size) {
    throw InputError(fmt::format(
        "{}: saved for {} examples in batches of {}, but this run has {} examples in batches of {} (did the "
        "training file change?)",
        where, state.dataset_size, state.batch_size, dataset_->size(), options_.batch_size));
  }
  if (state.seed != options_.seed) {
    throw InputError(fmt::format("{}: saved with seed {}, but this run has seed {}", where, state.seed, options_.seed));
  }
  if (state.position >= static_cast<uint64_t>(dataset_->size())) {
    throw InputError(fmt::format("{}: position {} is past the end of the dataset ({} examples)", where, state.position,
                                 dataset_->size()));
  }
  epoch_ = state.epoch;
  position_ = state.position;
  mask_rng_.set_state(state.mask_rng_state, state.mask_rng_inc);
  start_epoch();
}

GeneratorSampler::GeneratorSampler(Task task, GeneratorOptions options)
    : task_(std::move(task)), options_(options), rng_(options.seed) {
  if (!task_.has_generator()) throw UsageError(fmt::format("GeneratorSampler: task {} has no generator", task_.name));
  if (options_.batch_size < 1)
    throw UsageError(fmt::format("GeneratorSampler: batch_size {} < 1", options_.batch_size));
  if (options_.min_len < 1 || options_.max_len < options_.min_len) {
    throw UsageError(fmt::format("GeneratorSampler: bad length range [{}, {}]", options_.min_len, options_.max_len));
  }
}

Batch GeneratorSampler::next() {
  std::vector<Example> examples;
  if (options_.regime == LengthRegime::mixed) {
    // Each length drawn just before its example (the order every mixed run so far was trained in).
    const uint32_t num_lengths = static_cast<uint32_t>(options_.max_len - options_.min_len + 1);
    examples.reserve(static_cast<size_t>(options_.batch_size));
    for (int64_t b = 0; b < options_.batch_size; ++b) {
      int32_t length = options_.min_len + static_cast<int32_t>(rng_.below(num_lengths));
      examples.push_back(generate_example(task_, length, rng_));
    }
  } else {
    const RegimeOptions regime{options_.regime, options_.batch_size, options_.min_len, options_.max_len,
                               options_.bucket_width};
    for (int32_t length : draw_regime_lengths(regime, rng_)) examples.push_back(generate_example(task_, length, rng_));
  }
  ++batches_drawn_;
  return pack_batch(examples, task_.target_kind);
}

GeneratorState GeneratorSampler::state() const { return {rng_.state(), rng_.increment(), batches_drawn_}; }

void GeneratorSampler::restore(const GeneratorState& state) {
  rng_.set_state(state.rng_state, state.rng_inc);
  batches_drawn_ = state.batches_drawn;
}

std::vector<Batch> ordered_batches(const Dataset& dataset, int64_t batch_size, uint64_t mask_seed,
                                   const MaskConfig& mask, io::StopFlag stop) {
  if (batch_size < 1) throw UsageError(fmt::format("ordered_batches: batch_size {} < 1", batch_size));
  const Task& task = dataset.task();
  std::vector<Example> masked;
  if (task.is_masked_lm()) masked = mask_examples(dataset.examples(), task, mask, mask_seed);
  const std::vector<Example>& source = task.is_masked_lm() ? masked : dataset.examples();
  std::vector<Batch> batches;
  for (int64_t start = 0; start < dataset.size(); start += batch_size) {
    io::throw_if_stopped(stop);
    std::vector<const Example*> chosen;
    for (int64_t i = start; i < std::min(dataset.size(), start + batch_size); ++i) {
      chosen.push_back(&source[static_cast<size_t>(i)]);
    }
    batches.push_back(pack_batch(std::span<const Example* const>(chosen), task.target_kind));
  }
  return batches;
}

nlohmann::json sampler_state_to_json(const SamplerState& state) {
  return {{"seed", state.seed},
          {"epoch", state.epoch},
          {"position", state.position},
          {"mask_rng_state", state.mask_rng_state},
          {"mask_rng_inc", state.mask_rng_inc},
          {"dataset_size", static_cast<uint64_t>(state.dataset_size)},
          {"batch_size", static_cast<uint64_t>(state.batch_size)}};
}

SamplerState sampler_state_from_json(const nlohmann::json& json, const std::string& where) {
  SamplerState state;
  state.seed = get_u64(json, "seed", where);
  state.epoch = get_u64(json, "epoch", where);
  state.position = get_u64(json, "position", where);
  state.mask_rng_state = get_u64(json, "mask_rng_state", where);
  state.mask_rng_inc = get_u64(json, "mask_rng_inc", where);
  state.dataset_size = static_cast<int64_t>(get_u64(json, "dataset_size", where));
  state.batch_size = static_cast<int64_t>(get_u64(json, "batch_size", where));
  return state;
}

nlohmann::json generator_state_to_json(const GeneratorState& state) {
  return {{"rng_state", state.rng_state}, {"rng_inc", state.rng_inc}, {"batches_drawn", state.batches_drawn}};
}

GeneratorState generator_state_from_json(const nlohmann::json& json, const std::string& where) {
  GeneratorState state;
  state.rng_state = get_u64(json, "rng_state", where);
  state.rng_inc = get_u64(json, "rng_inc", where);
  state.batches_drawn = get_u64(json, "batches_drawn", where);
  return state;
}

}  // namespace normlab::data
