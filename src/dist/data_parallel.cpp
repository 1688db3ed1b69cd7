#include "normlab/dist/data_parallel.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "normlab/dist/split.hpp"
#include "normlab/error.hpp"
#include "normlab/ops.hpp"

namespace normlab::dist {

DataParallel::DataParallel(Communicator& comm, const DataParallelOptions& options)
    : comm_(comm), sync_batch_norm_(options.sync_batch_norm && comm.size() > 1) {
  const int ranks = comm_.size();
  if (ranks > 1 && sync_batch_norm_ && options.batch_size < ranks) {
    throw InputError(
        fmt::format("train.batch_size: model.batchnorm_stats = \"sync\" on {} processes needs at "
                    "least {} sequences per batch (every rank joins the statistics), got {}",
                    ranks, ranks, options.batch_size));
  }
}

std::unique_ptr<StepReduction> make_step_reduction(Communicator& comm, const DataParallelOptions& options) {
  if (comm.size() == 1) return std::make_unique<LocalStep>();
  return std::make_unique<DataParallel>(comm, options);
}

kernels::RankSum* DataParallel::batch_norm_ranks() { return sync_batch_norm_ ? this : nullptr; }

void DataParallel::sum(double* values, int64_t count) { comm_.sum(std::span<double>(values, size_t(count))); }

Share DataParallel::shard(const data::Batch& global) const {
  const std::vector<int64_t> boundaries = balanced_split(global.offsets, comm_.size());
  const int64_t first = boundaries[size_t(comm_.rank())], last = boundaries[size_t(comm_.rank()) + 1];
  return {sub_batch(global, first, last), first};
}

Tensor DataParallel::loss_to_backpropagate(const Tensor& mean_loss, int64_t targets) const {
  return ops::mul_scalar(mean_loss, float(targets));
}

namespace {

// StepSums as the reduction's slots (a stop request as two counts: ranks stopped by SIGTERM, by
// another signal), and back from their sums over the ranks.
constexpr size_t kStepSumSlots = 6;

void write_slots(const StepSums& local, double* slots) {
  slots[0] = local.loss_sum;
  slots[1] = double(local.correct);
  slots[2] = double(local.targets);
  slots[3] = double(local.tokens);
  slots[4] = local.stop_request == SIGTERM ? 1.0 : 0.0;
  slots[5] = local.stop_request != 0 && local.stop_request != SIGTERM ? 1.0 : 0.0;
}

StepSums read_slots(const double* slots) {
  return {.loss_sum = slots[0],
          .correct = static_cast<int64_t>(slots[1]),
          .targets = static_cast<int64_t>(slots[2]),
          .tokens = static_cast<int64_t>(slots[3]),
          .stop_request = slots[4] > 0   ? SIGTERM
                          : slots[5] > 0 ? SIGINT
                                         : 0};
}

}  // namespace

StepSums DataParallel::reduce(const nn::NamedTensors& params, const StepSums& local, const SumFields& extra) {
  // One buffer: [every gradient, in parameter order | each extra field, in order | StepSums' slots].
  size_t total = 0, extra_size = 0;
  for (const auto& [name, tensor] : params) total += size_t(tensor.numel());
  for (const std::span<double>& field : extra) extra_size += field.size();
  buffer_.assign(total + extra_size + kStepSumSlots, 0.0);
  size_t at = 0;
  for (const auto& [name, tensor] : params) {
    const float* grad = tensor.grad_data();  // null: this rank's share never reached it
    if (grad != nullptr)
      for (int64_t i = 0; i < tensor.numel(); ++i) buffer_[at + size_t(i)] = double(grad[i]);
    at += size_t(tensor.numel());
  }
  for (const std::span<double>& field : extra) {
    std::copy(field.begin(), field.end(), buffer_.begin() + std::ptrdiff_t(at));
    at += field.size();
  }
  write_slots(local, buffer_.data() + at);

  comm_.sum(buffer_);
  at = total;
  for (const std::span<double>& field : extra) {
    std::copy_n(buffer_.begin() + std::ptrdiff_t(at), field.size(), field.begin());
    at += field.size();
  }
  const StepSums sums = read_slots(buffer_.data() + at);
  agreed_stop_ = sums.stop_request;
  // Divided once, by the global target count (a batch always has targets; guard anyway).
  const double denominator = sums.targets > 0 ? double(sums.targets) : 1.0;
  at = 0;
  for (const auto& [name, tensor] : params) {
    Tensor handle = tensor;
    float* grad = handle.grad_data();  // allocates a zero gradient where there was none
    for (int64_t i = 0; i < tensor.numel(); ++i) grad[i] = float(buffer_[at + size_t(i)] / denominator);
    at += size_t(tensor.numel());
  }
  return sums;
}

uint64_t parameter_hash(const nn::NamedTensors& params) {
  uint64_t hash = 14695981039346656037ULL;
  for (const auto& [name, tensor] : params) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(tensor.data());
    for (size_t i = 0; i < size_t(tensor.numel()) * sizeof(float); ++i) {
      hash ^= bytes[i];
      hash *= 1099511628211ULL;
    }
  }
  return hash;
}

void DataParallel::check_parameters(const nn::Module& model, int64_t step) {
  if (step != 1 && step % kParameterCheckEvery != 0) return;
  nn::NamedTensors tensors = model.named_parameters();
  // Local BatchNorm's running averages differ by design (each rank's own batches; rank 0's are saved).
  if (sync_batch_norm_)
    for (auto& buffer : model.named_buffers()) tensors.push_back(buffer);
  const std::vector<uint64_t> hashes = comm_.all_gather(parameter_hash(tensors));
  for (size_t r = 1; r < hashes.size(); ++r) {
    if (hashes[r] != hashes[0]) {
      throw std::runtime_error(
          fmt::format("data-parallel: after step {} the parameters of rank {} differ from rank "
                      "0's (hash {:016x} vs {:016x}); the ranks no longer train the same model",
                      step, r, hashes[r], hashes[0]));
    }
  }
}

}  // namespace normlab::dist
