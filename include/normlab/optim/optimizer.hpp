#pragma once
// Optimizers (SGD with momentum, Adam, AdamW) with PyTorch's update rules, and global-norm gradient
// clipping like torch.nn.utils.clip_grad_norm_.
//
// One Optimizer owns the state of every parameter it was given (float32, like PyTorch), steps them
// all with one learning rate that the caller takes from a schedule, and can export / import that
// state for exact checkpoint resume.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "normlab/nn/module.hpp"
#include "normlab/tensor.hpp"

namespace normlab::optim {

// optim.name, parsed once from the config: the update rule step() dispatches on.
enum class OptimizerKind { sgd, adam, adamw };
inline constexpr std::pair<OptimizerKind, const char*> kOptimizerNames[] = {{OptimizerKind::sgd, "sgd"},
                                                                            {OptimizerKind::adam, "adam"},
                                                                            {OptimizerKind::adamw, "adamw"}};
std::string to_string(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind name = OptimizerKind::adamw;
  float momentum = 0.0f;  // sgd: buf = momentum*buf + g; p -= lr*buf (dampening 0, no nesterov)
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam/adamw, with bias correction
  float weight_decay = 0.0f;                        // sgd/adam: L2 added to the gradient; adamw: decoupled p -= lr*wd*p
  bool decay_all = false;                           // false: no weight decay where no_decay_name() is true
};

// Throws UsageError unless: 0 <= beta1, beta2 < 1,
// eps > 0 and finite, weight_decay >= 0 and finite, 0 <= momentum < 1.
void check_optimizer_options(const OptimizerOptions& options);

// True for parameters that by default get no weight decay: biases (last name component "bias" or
// ending in "_bias", e.g. "linear1.bias", "self_attn.in_proj_bias"), norm parameters (a path
// component starting with "norm": norm1, norm2, norm), embeddings (a component ending in
// "embedding": "embedding.weight", "pos_embedding.weight") and one-element parameters (ReZero's
// resweight, DyT's alpha).
bool no_decay_name(const std::string& name, const Tensor& param);

class Optimizer {
 public:
  // params share storage with the model (Tensor is a handle), so step() updates the model in place.
  Optimizer(const OptimizerOptions& options, nn::NamedTensors params);

  // One update of every parameter that has a gradient (the others and their state are left alone),
  // with learning rate lr (>= 0, finite; the schedule's scheduled_lr()). Increments step_count()
  // first: Adam's bias correction uses the new count, like PyTorch's per-parameter step when every
  // parameter gets a gradient.
  void step(double lr);
  // step(lr), returning the global gradient norm that clip_grad_norm(params(), 0) returns (the
  // same bits), taken from the update's own pass over the gradients (Adam, AdamW; SGD: the two
  // passes). For gradients known to be finite only: unlike clip_grad_norm before step(), it cannot
  // keep a non-finite gradient from updating its parameter.
  double step_and_grad_norm(double lr);
  void zero_grad();  // drops every parameter's gradient buffer
  int64_t step_count() const { return step_count_; }

  // A copy of the full state: "optim.exp_avg.<param>", "optim.exp_avg_sq.<param>" (adam, adamw),
  // "optim.momentum_buffer.<param>" (sgd with momentum > 0), each shaped like its parameter, in
  // parameter order. The step count is separate (step_count()).
  nn::NamedTensors state() const;
  // Restores the state from name -> values. Names outside "optim." are ignored (the caller may pass
  // a whole checkpoint); every expected state name must be present with the parameter's size, and
  // no unknown "optim." name is accepted. On error throws
  // InputError("<where>: optimizer state '<name>': ...") and leaves the optimizer unchanged.
  void load_state(const std::map<std::string, std::vector<float>>& tensors, int64_t step_count,
                  const std::string& where);

  const OptimizerOptions& options() const { return options_; }
  const nn::NamedTensors& params() const { return params_; }

 private:
  // The update of elements [begin, end) of parameter `index`.
  void step_sgd(size_t index, double lr, int64_t begin, int64_t end);
  // sum_squares: also returns sum of g^2 over the range, which must be the whole tensor (the
  // lanes of kernels::sums_of_squares); otherwise 0.
  double step_adam(size_t index, double lr, int64_t begin, int64_t end, bool sum_squares);
  std::vector<std::string> state_kinds() const;  // "exp_avg", ... for this optimizer
  const std::vector<std::vector<float>>& state_buffers(const std::string& kind) const;
  std::vector<std::vector<float>>& state_buffers(const std::string& kind);

  OptimizerOptions options_;
  nn::NamedTensors params_;
  std::vector<bool> decay_;  // per parameter: does weight decay apply?
  // Per parameter, numel floats each; empty vectors when this optimizer does not use them.
  std::vector<std::vector<float>> exp_avg_, exp_avg_sq_, momentum_buffer_;
  int64_t step_count_ = 0;
};

// Global L2 norm of all gradients (double accumulation in parameter order; parameters without a
// gradient count as zero). If max_norm > 0 and max_norm / (norm + 1e-6) < 1, scales every gradient
// by that factor, like torch.nn.utils.clip_grad_norm_. Returns the norm before clipping. A
// non-finite norm is returned and nothing is scaled (the trainer treats it as divergence).
double clip_grad_norm(const nn::NamedTensors& params, double max_norm);

}  // namespace normlab::optim
