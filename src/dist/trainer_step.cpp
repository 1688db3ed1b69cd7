// data-parallel: the trainer's step when the run has more than one rank (data_parallel.hpp). It is
// Trainer::train_step with the forward and backward on this rank's share and the sums reduced over
// ranks before the clip and the update, which are the same on every rank.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "normlab/dist/data_parallel.hpp"
#include "normlab/ops.hpp"
#include "normlab/train/metrics.hpp"
#include "normlab/train/records.hpp"
#include "normlab/train/trainer.hpp"

namespace normlab::train {

StepRecord Trainer::data_parallel_step(const data::Batch& global, bool diagnostics, StepRecord record, float lr) {
  const dist::Share share = dp_->shard(global);
  const data::Batch& batch = share.batch;
  dp_->watch_stop_flag(stop_flag_);
  optimizer_->zero_grad();
  double loss_sum = 0.0;
  int64_t correct = 0;
  nn::Diagnostics diag;
  if (batch.batch_size() > 0) {  // an empty share still joins the reduction below
    // The masks one process draws for these sequences of the global batch.
    const nn::DropoutStep dropout{uint64_t(record.step), share.first_sequence};
    Tensor logits = model_->forward(batch.tokens, batch.offsets, diagnostics ? &diag : nullptr, dropout);  // (rows, V)
    Tensor mean_loss = ops::cross_entropy(logits, batch.targets);
    // The share's SUM of losses, whose gradient the ranks add up; cross_entropy's backward divides
    // its seed by the share's target count, so seeding it with that count gives the sum exactly.
    Tensor loss = ops::mul_scalar(mean_loss, float(batch.num_targets));
    loss_sum = double(mean_loss.item()) * double(batch.num_targets);
    correct = count_correct(logits, batch.targets);
    loss.backward();
  }
  // Diagnostics: each block's sum of squares of the residual stream, then the count of values
  // (zeros for an empty share), summed in the same buffer.
  std::vector<double> residual;
  if (diagnostics) {
    residual.assign(size_t(config_.model.layers) + 1, 0.0);
    std::copy(diag.residual_sum_sq.begin(), diag.residual_sum_sq.end(), residual.begin());
    residual.back() = double(diag.residual_values);
  }
  const dist::StepSums sums = dp_->reduce(optimizer_->params(), loss_sum, correct, batch.num_targets,
                                          batch.num_real_tokens, io::stop_signal(stop_flag_), residual);
  record.tokens = sums.tokens;
  const float loss_value = sums.targets > 0 ? float(sums.loss_sum / double(sums.targets)) : 0.0f;
  record.loss = double(loss_value);
  if (std::isfinite(loss_value)) record.loss = shortest(loss_value);  // as train_step writes it
  record.accuracy = sums.targets ? double(sums.correct) / double(sums.targets) : 0.0;
  if (diagnostics) {  // as nn::TransformerEncoder computes it, over the global batch
    const double values = residual.back();
    for (size_t l = 0; l + 1 < residual.size(); ++l)
      record.residual_rms.push_back(values > 0 ? std::sqrt(residual[l] / values) : 0.0);
  }
  if (!std::isfinite(loss_value)) {
    record.diverged = true;
    record.grad_norm = std::numeric_limits<double>::quiet_NaN();
    optimizer_->zero_grad();
    return record;
  }
  apply_update(record, lr, diagnostics);  // with the global gradients: the same on every rank
  if (!record.diverged) dp_->check_parameters(*model_, step_);
  return record;
}

}  // namespace normlab::train
