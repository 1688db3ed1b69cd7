#pragma once
// Data-parallel training over MPI, as the trainer sees it (docs/scaling.md). One training step
// (train::Trainer::train_step) serves one process and N ranks; what differs is the StepReduction it
// is given: LocalStep for one process (nothing to split or sum), DataParallel for N ranks:
//
//   every rank draws the same global batch (randomness keyed on seed and step, never on the rank)
//   -> shard(): this rank's contiguous, token-balanced share (split.hpp); it may be empty
//   -> forward + backward of the SUM of the share's token losses (not its mean), dropout masks
//      keyed on the global index of each sequence (nn::DropoutStep), as one process draws them
//   -> reduce(): gradients, loss sum, correct count, target and token counts, the diagnostics'
//      sums and the stop flag in one buffer, summed over ranks deterministically
//      (communicator.hpp), gradients divided once by the global number of targets (Marian's
//      rule: ranks hold different numbers of targets)
//   -> every rank clips and applies the same update to the same parameters
//
// Rank 0 alone writes the run directory. Every kParameterCheckEvery steps the ranks compare a hash
// of their parameters; a mismatch stops the run with an error naming the step.
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "normlab/data/batch.hpp"
#include "normlab/dist/communicator.hpp"
#include "normlab/kernels/batch_norm.hpp"
#include "normlab/nn/module.hpp"
#include "normlab/tensor.hpp"

namespace normlab::dist {

inline constexpr int64_t kParameterCheckEvery = 50;

// A rank's share of the global batch: its sequences [first_sequence, first_sequence + B).
struct Share {
  data::Batch batch;
  int64_t first_sequence = 0;
};

// More figures a step sums over the ranks beside its gradients, each a named field of the caller's
// (train/trainer.cpp: StepFigures), given as a list of spans over those fields; a scalar is a span
// of one. reduce() sums every element in place, in the same order on every rank.
using SumFields = std::vector<std::span<double>>;

// One step's totals: this process's before reduce(), over all ranks after it.
struct StepSums {
  double loss_sum = 0.0;  // sum of the token (or sequence) cross-entropies
  int64_t correct = 0;
  int64_t targets = 0;  // the loss denominator
  int64_t tokens = 0;
  int stop_request = 0;  // SIGTERM if any rank was asked to stop by SIGTERM, else SIGINT if any was
};

// What one training step needs from the processes that share it, in the order it asks:
// shard -> forward -> loss_to_backpropagate -> backward -> reduce -> clip and update -> check.
class StepReduction {
 public:
  virtual ~StepReduction() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool active() const { return size() > 1; }      // data-parallel: more than one rank
  bool is_writer() const { return rank() == 0; }  // the one process, or rank 0, writes the run

  // This process's share of the global batch (possibly no sequences).
  virtual Share shard(const data::Batch& global) const = 0;
  // The loss whose gradient this process computes, from its share's mean loss over `targets`.
  virtual Tensor loss_to_backpropagate(const Tensor& mean_loss, int64_t targets) const = 0;
  // `local` and `extra` (the same fields and lengths on every rank) summed over the ranks, `extra` in
  // place; every parameter's gradient made the gradient of the global batch's mean loss.
  virtual StepSums reduce(const nn::NamedTensors& params, const StepSums& local, const SumFields& extra = {}) = 0;
  // After update `step`: do the ranks still hold the same model? (std::runtime_error if not)
  virtual void check_parameters(const nn::Module& model, int64_t step) = 0;
  // The stop request agreed in the last reduce(): the same on every rank, so all stop together.
  virtual int agreed_stop() const = 0;
  // Sync BatchNorm's statistics sum (kernels/batch_norm.hpp); nullptr: each process its own tokens.
  virtual kernels::RankSum* batch_norm_ranks() = 0;
  // The flag a stop signal sets, watched while a rank waits for the others (Communicator).
  virtual void watch_stop_flag(const std::atomic<int>* flag) = 0;
};

// One process: the whole batch, its mean loss, nothing to sum.
class LocalStep final : public StepReduction {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Share shard(const data::Batch& global) const override { return {global, 0}; }
  Tensor loss_to_backpropagate(const Tensor& mean_loss, int64_t) const override { return mean_loss; }
  StepSums reduce(const nn::NamedTensors&, const StepSums& local, const SumFields&) override { return local; }
  void check_parameters(const nn::Module&, int64_t) override {}
  int agreed_stop() const override { return 0; }
  kernels::RankSum* batch_norm_ranks() override { return nullptr; }
  void watch_stop_flag(const std::atomic<int>*) override {}
};

struct DataParallelOptions {
  bool sync_batch_norm = false;  // model.batchnorm_stats = "sync" with model.norm = "batchnorm"
  int64_t batch_size = 0;        // train.batch_size: sequences per global batch
};

// N ranks of one run.
class DataParallel final : public StepReduction, private kernels::RankSum {
 public:
  // Checks that the run can go on comm.size() ranks (InputError naming the config key otherwise).
  DataParallel(Communicator& comm, const DataParallelOptions& options);

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Share shard(const data::Batch& global) const override;
  // The share's SUM of losses, whose gradient the ranks add up; cross_entropy's backward divides its
  // seed by the share's target count, so seeding it with that count gives the sum exactly.
  Tensor loss_to_backpropagate(const Tensor& mean_loss, int64_t targets) const override;
  // One buffer summed over the ranks (communicator.hpp); each gradient becomes sum / global targets.
  StepSums reduce(const nn::NamedTensors& params, const StepSums& local, const SumFields& extra = {}) override;
  // Every kParameterCheckEvery steps (and at step 1) compares a hash of the parameters (and, with
  // sync BatchNorm, the running averages) across ranks; the error names the rank and the step.
  void check_parameters(const nn::Module& model, int64_t step) override;
  int agreed_stop() const override { return agreed_stop_; }
  kernels::RankSum* batch_norm_ranks() override;
  void watch_stop_flag(const std::atomic<int>* flag) override { comm_.watch_stop_flag(flag); }

 private:
  void sum(double* values, int64_t count) override;  // kernels::RankSum, for sync BatchNorm

  Communicator& comm_;
  bool sync_batch_norm_ = false;
  int agreed_stop_ = 0;
  std::vector<double> buffer_;
};

// LocalStep for one process, DataParallel for several.
std::unique_ptr<StepReduction> make_step_reduction(Communicator& comm, const DataParallelOptions& options);

// FNV-1a over the bytes of every parameter's values, in order.
uint64_t parameter_hash(const nn::NamedTensors& params);

}  // namespace normlab::dist
