#include "normlab/dist/data_parallel.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "normlab/dist/split.hpp"
#include "normlab/error.hpp"
#include "normlab/kernels/batch_norm.hpp"

namespace normlab::dist {

namespace {

// The communicator sync BatchNorm sums through (one data-parallel run per process).
Communicator* g_batch_norm_comm = nullptr;

void sum_batch_norm_statistics(double* values, int64_t count) {
  g_batch_norm_comm->sum(std::span<double>(values, size_t(count)));
}

}  // namespace

DataParallel::DataParallel(Communicator& comm, const train::RunConfig& config) : comm_(comm) {
  if (comm_.size() == 1) return;
  const int ranks = comm_.size();
  sync_batch_norm_ = config.model.norm == nn::NormKind("batchnorm") && config.model.batchnorm_stats == "sync";
  if (sync_batch_norm_) {
    if (config.train.batch_size < ranks) {
      throw InputError(fmt::format("train.batch_size: model.batchnorm_stats = \"sync\" on {} processes needs at "
                                   "least {} sequences per batch (every rank joins the statistics), got {}",
                                   ranks, ranks, config.train.batch_size));
    }
    g_batch_norm_comm = &comm_;
    kernels::set_batch_norm_sum_hook(sum_batch_norm_statistics);
  }
}

DataParallel::~DataParallel() {
  if (sync_batch_norm_) {
    kernels::set_batch_norm_sum_hook(nullptr);
    g_batch_norm_comm = nullptr;
  }
}

Share DataParallel::shard(const data::Batch& global) const {
  const std::vector<int64_t> boundaries = balanced_split(global.offsets, comm_.size());
  const int64_t first = boundaries[size_t(comm_.rank())], last = boundaries[size_t(comm_.rank()) + 1];
  return {sub_batch(global, first, last), first};
}

StepSums DataParallel::reduce(const nn::NamedTensors& params, double loss_sum, int64_t correct, int64_t targets,
                              int64_t tokens, int stop_signal, std::span<double> extra) {
  // One buffer: [every gradient, in parameter order | extra | loss_sum, correct, targets, tokens,
  // ranks stopped by SIGTERM, ranks stopped by another signal].
  constexpr size_t kCounts = 6;
  size_t total = 0;
  for (const auto& [name, tensor] : params) total += size_t(tensor.numel());
  buffer_.assign(total + extra.size() + kCounts, 0.0);
  size_t at = 0;
  for (const auto& [name, tensor] : params) {
    const float* grad = tensor.grad_data();  // null: this rank's share never reached it
    if (grad != nullptr)
      for (int64_t i = 0; i < tensor.numel(); ++i) buffer_[at + size_t(i)] = double(grad[i]);
    at += size_t(tensor.numel());
  }
  std::copy(extra.begin(), extra.end(), buffer_.begin() + std::ptrdiff_t(total));
  double* counts = buffer_.data() + total + extra.size();
  counts[0] = loss_sum;
  counts[1] = double(correct);
  counts[2] = double(targets);
  counts[3] = double(tokens);
  counts[4] = stop_signal == SIGTERM ? 1.0 : 0.0;
  counts[5] = stop_signal != 0 && stop_signal != SIGTERM ? 1.0 : 0.0;

  comm_.sum(buffer_);
  std::copy_n(buffer_.begin() + std::ptrdiff_t(total), extra.size(), extra.begin());

  StepSums sums;
  sums.loss_sum = counts[0];
  sums.correct = static_cast<int64_t>(counts[1]);
  sums.targets = static_cast<int64_t>(counts[2]);
  sums.tokens = static_cast<int64_t>(counts[3]);
  sums.stop_request = counts[4] > 0 ? SIGTERM : counts[5] > 0 ? SIGINT : 0;
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

std::string data_disagreement(Communicator& comm, const train::DataFingerprint& files) {
  const std::vector<uint64_t> counts = comm.all_gather(files.size());
  for (size_t r = 1; r < counts.size(); ++r) {
    if (counts[r] != counts[0])
      return fmt::format("data-parallel rank {} reads {} data file(s), rank 0 reads {}: every rank must run the same "
                         "config",
                         r, counts[r], counts[0]);
  }
  for (const train::DataFile& file : files) {
    // The first 64 bits of the digest: enough to tell two contents apart.
    const std::vector<uint64_t> digests = comm.all_gather(std::stoull(file.sha256.substr(0, 16), nullptr, 16));
    for (size_t r = 1; r < digests.size(); ++r) {
      if (digests[r] != digests[0]) {
        // Paths may differ between machines: rank 0's is the one its user can look at.
        return fmt::format("data-parallel rank {}'s {} has other content than rank 0's {} (sha256 {:016x}... vs "
                           "{:016x}...): every rank must read the same data",
                           r, file.key, file.path, digests[r], digests[0]);
      }
    }
  }
  return "";
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
  if (!active() || (step != 1 && step % kParameterCheckEvery != 0)) return;
  nn::NamedTensors tensors = model.named_parameters();
  // Local BatchNorm's running averages differ by design (each rank's own batches; rank 0's are saved).
  if (sync_batch_norm_)
    for (auto& buffer : model.named_buffers()) tensors.push_back(buffer);
  const std::vector<uint64_t> hashes = comm_.all_gather(parameter_hash(tensors));
  for (size_t r = 1; r < hashes.size(); ++r) {
    if (hashes[r] != hashes[0]) {
      throw std::runtime_error(fmt::format("data-parallel: after step {} the parameters of rank {} differ from rank "
                                           "0's (hash {:016x} vs {:016x}); the ranks no longer train the same model",
                                           step, r, hashes[r], hashes[0]));
    }
  }
}

}  // namespace normlab::dist
