#pragma once
// Data-parallel training over MPI, as the trainer sees it (docs/scaling.md).
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
#include <cstdint>
#include <memory>
#include <span>

#include "normlab/data/batch.hpp"
#include "normlab/dist/communicator.hpp"
#include "normlab/nn/module.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/data_fingerprint.hpp"

namespace normlab::dist {

inline constexpr int64_t kParameterCheckEvery = 50;

// A rank's share of the global batch: its sequences [first_sequence, first_sequence + B).
struct Share {
  data::Batch batch;
  int64_t first_sequence = 0;
};

// One step's totals over all ranks.
struct StepSums {
  double loss_sum = 0.0;  // sum of the token (or sequence) cross-entropies
  int64_t correct = 0;
  int64_t targets = 0;    // the loss denominator
  int64_t tokens = 0;
  int stop_request = 0;   // SIGTERM if any rank was asked to stop by SIGTERM, else SIGINT if any was
};

class DataParallel {
 public:
  // Checks that `config` can run on comm.size() ranks (InputError naming the key otherwise) and,
  // with model.batchnorm_stats = "sync", routes BatchNorm's statistics through `comm`.
  DataParallel(Communicator& comm, const train::RunConfig& config);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  bool active() const { return comm_.size() > 1; }
  bool is_writer() const { return comm_.rank() == 0; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }

  // This rank's share of the global batch (possibly no sequences).
  Share shard(const data::Batch& global) const;

  // Sums every parameter's gradient (zero where a parameter has none) and the step's counts over
  // all ranks; each gradient becomes sum / global targets. `stop_signal` is this rank's stop flag.
  // `extra` (the same length on every rank) is summed over the ranks in place, in the same buffer.
  StepSums reduce(const nn::NamedTensors& params, double loss_sum, int64_t correct, int64_t targets, int64_t tokens,
                  int stop_signal, std::span<double> extra = {});

  // The flag a stop signal sets; see Communicator::watch_stop_flag.
  void watch_stop_flag(const std::atomic<int>* flag) { comm_.watch_stop_flag(flag); }

  // The stop request agreed in the last reduce(): the same on every rank, so all stop together.
  int agreed_stop() const { return agreed_stop_; }

  // After update `step`: every kParameterCheckEvery steps (and at step 1) compares a hash of the
  // parameters (and, with sync BatchNorm, the running averages) across ranks; std::runtime_error
  // naming the rank and the step on a mismatch.
  void check_parameters(const nn::Module& model, int64_t step);

 private:
  Communicator& comm_;
  int agreed_stop_ = 0;
  bool sync_batch_norm_ = false;
  std::vector<double> buffer_;
};

// Before anything is written: do all ranks read the same data? Every rank passes the fingerprint of
// the files it read (the same number on every rank: one config); rank 0's digests decide. Returns ""
// when every rank agrees, else one line naming the first differing rank and file, the same line on
// every rank (it is computed from the gathered digests), so all stop together.
std::string data_disagreement(Communicator& comm, const train::DataFingerprint& files);

// FNV-1a over the bytes of every parameter's values, in order.
uint64_t parameter_hash(const nn::NamedTensors& params);

}  // namespace normlab::dist
