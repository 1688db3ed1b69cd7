// One training step of the Trainer, checked from outside: with plain SGD (no momentum, no weight
// decay, constant lr) the update must be exactly -lr times the gradient after clipping, so the
// order "backward, clip, update" and the clip factor are both visible in the weights.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "normlab/train/config.hpp"
#include "normlab/train/trainer.hpp"

using namespace normlab;
using namespace normlab::train;

namespace {

RunConfig sgd_config(double clip) {
  RunConfig c;
  c.model.d_model = 16;
  c.model.num_heads = 2;
  c.model.num_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.max_len = 16;
  c.task.name = data::TaskKind::reverse;
  c.task.max_len = 8;
  c.task.eval_max_len = 8;
  c.task.eval_examples = 8;
  c.optim.name = normlab::optim::OptimizerKind::sgd;
  c.optim.lr = 0.5;
  c.optim.momentum = 0.0;
  c.optim.weight_decay = 0.0;
  c.optim.schedule = normlab::optim::ScheduleKind::constant;
  c.optim.clip_grad_norm = clip;
  c.train.steps = 5;
  c.train.batch_size = 8;
  c.train.threads = 1;
  check_config(c, "train step test");
  return c;
}

struct StepOutcome {
  double grad_norm_reported = 0.0;  // the record's pre-clip norm
  double update_norm = 0.0;         // || weights after - weights before ||
  double update_vs_grad = 0.0;      // max | (after - before) + lr * grad left in .grad |
};

StepOutcome one_step(double clip) {
  const RunConfig config = sgd_config(clip);
  Trainer trainer(config);
  std::vector<std::vector<float>> before;
  for (auto& [name, t] : trainer.model().named_parameters()) before.push_back(t.to_vector());
  const data::Batch batch = trainer.next_batch();
  const StepRecord record = trainer.train_step(batch, false);
  StepOutcome out;
  out.grad_norm_reported = record.grad_norm;
  double sum_sq = 0.0;
  size_t k = 0;
  for (auto& [name, t] : trainer.model().named_parameters()) {
    const std::vector<float> after = t.to_vector();
    const std::vector<float> grad = t.grad().to_vector();  // what the optimizer used
    for (size_t i = 0; i < after.size(); ++i) {
      const double delta = double(after[i]) - double(before[k][i]);
      sum_sq += delta * delta;
      out.update_vs_grad = std::max(out.update_vs_grad, std::abs(delta + config.optim.lr * double(grad[i])));
    }
    ++k;
  }
  out.update_norm = std::sqrt(sum_sq);
  return out;
}

}  // namespace

TEST_CASE("train step: SGD moves the weights by exactly lr times the clipped gradient") {
  const double lr = 0.5;
  // Unclipped (max_norm far above the gradient norm): the update has norm lr * grad_norm.
  const StepOutcome free = one_step(1e6);
  REQUIRE(free.grad_norm_reported > 0.05);
  CHECK(free.update_norm == doctest::Approx(lr * free.grad_norm_reported).epsilon(1e-4));
  CHECK(free.update_vs_grad < 1e-6);

  // Clipped to a tenth of its norm: the update has norm lr * max_norm, and the gradient the
  // optimizer saw is the clipped one. Clipping after the update would move the weights by the
  // unclipped gradient (10x too far).
  const double max_norm = free.grad_norm_reported / 10.0;
  const StepOutcome clipped = one_step(max_norm);
  CHECK(clipped.grad_norm_reported == doctest::Approx(free.grad_norm_reported).epsilon(1e-6));
  CHECK(clipped.update_norm == doctest::Approx(lr * max_norm).epsilon(1e-4));
  CHECK(clipped.update_vs_grad < 1e-6);
}
