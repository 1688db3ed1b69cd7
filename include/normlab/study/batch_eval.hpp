#pragma once
// The variable-length lesson: trained BatchNorm and LayerNorm checkpoints evaluated with running
// averages and with batch statistics, on trained-length batches and on batches mixed with unseen lengths.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "normlab/study/plan.hpp"
#include "normlab/study/results.hpp"
#include "normlab/study/statistics.hpp"

namespace normlab::study {

// Thrown when stop_requested() turns true while the report is computed (batch_dependence,
// build_report, write_report).
struct ReportStopped {};

// The variable-length lesson (report section "BatchNorm and its batch"): the same trained
// checkpoints evaluated four ways. Drawn when the grid has BatchNorm and a LayerNorm reference.
struct BatchEvalMode {
  std::string statistics;  // "running averages" or "batch statistics"
  int64_t batch_size = 1;  // sequences per evaluation batch
  bool batch_statistics = false;
  std::string batches;  // which held-out sequences share a batch, in words
  // Only held-out sequences of trained lengths (in-distribution batch dependence); otherwise the
  // whole held-out set, where unseen lengths share batches with trained ones (contamination).
  bool trained_lengths_only = false;
};
std::vector<BatchEvalMode> batch_eval_modes(int64_t train_batch_size);
struct BatchEvalCell {
  std::string variant, setting;
  double lr = 0;
  BatchEvalMode mode;
  std::vector<double> trained, unseen;  // held-out accuracy per seed
  std::vector<uint64_t> seeds;
};
// At each setting, at the highest grid learning rate where most seeds of both BatchNorm and the
// reference LayerNorm variant solved the task (else learned, else the lowest rate): every finished
// seed of both, each mode.
std::vector<BatchEvalCell> batch_dependence(const ComparePlan& plan, const std::vector<RunResult>& results,
                                            const std::vector<GroupSummary>& groups,
                                            const std::function<bool()>& stop_requested = {});

}  // namespace normlab::study
