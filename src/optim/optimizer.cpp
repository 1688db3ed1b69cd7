#include "normlab/optim/optimizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/names.hpp"
#include "normlab/kernels/adam.hpp"
#include "normlab/parallel.hpp"
#include "normlab/shortest.hpp"

namespace normlab::optim {

namespace {

// Below this many elements a parameter is updated by one thread: forking costs more than the loop.
constexpr int64_t kParallelMinElements = 1 << 15;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> split_dots(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

// The doubles of an Adam step that depend on the options and the step count only, not on the
// tensor: shortest() (a decimal round trip) four times and std::pow twice. step_adam asks for them
// once per tensor and thread part (80 tensors at the demo's size); each thread keeps the last
// step's, so they are computed once per step and thread, with the same values.
struct AdamStepDoubles {
  float key_weight_decay, key_beta1, key_beta2, key_eps;
  int64_t key_step = -1;
  double weight_decay, beta1, beta2, eps, bias_correction1, bias_correction2;
};

const AdamStepDoubles& adam_step_doubles(const OptimizerOptions& o, int64_t step) {
  thread_local AdamStepDoubles last;
  if (last.key_step != step || last.key_weight_decay != o.weight_decay || last.key_beta1 != o.beta1 ||
      last.key_beta2 != o.beta2 || last.key_eps != o.eps) {
    last.key_step = step;
    last.key_weight_decay = o.weight_decay;
    last.key_beta1 = o.beta1;
    last.key_beta2 = o.beta2;
    last.key_eps = o.eps;
    last.weight_decay = shortest(o.weight_decay);
    last.beta1 = shortest(o.beta1);
    last.beta2 = shortest(o.beta2);
    last.eps = shortest(o.eps);
    const double t = static_cast<double>(step);
    last.bias_correction1 = 1.0 - std::pow(last.beta1, t);
    last.bias_correction2 = 1.0 - std::pow(last.beta2, t);
  }
  return last;
}

// The tensors [begin, end) thread t of `threads` takes when whole tensors are shared out by their
// elements (numel each, `total` in all): those whose first element falls in its share, the first
// thread from tensor 0 and the last to the end. A sum over one tensor is one chain of lanes, so a
// tensor is never split; which thread takes it changes no bit.
std::pair<int64_t, int64_t> tensors_of_share(const std::vector<int64_t>& numel, int64_t total, int64_t t,
                                             int64_t threads) {
  const auto count = static_cast<int64_t>(numel.size());
  const int64_t lo = total * t / threads, hi = total * (t + 1) / threads;
  int64_t begin = 0, end = 0, first = 0;
  for (int64_t k = 0; k < count; first += numel[size_t(k)], k++) {
    if (first < lo) begin = k + 1;
    if (first < hi) end = k + 1;
  }
  if (t == 0) begin = 0;
  if (t + 1 == threads) end = count;
  return {begin, end};
}

}  // namespace

std::string to_string(OptimizerKind kind) { return name_in(kOptimizerNames, kind); }

void check_optimizer_options(const OptimizerOptions& o) {
  if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f))
    throw UsageError(fmt::format("optimizer: beta1 must be in [0, 1) (got {})", o.beta1));
  if (!(o.beta2 >= 0.0f && o.beta2 < 1.0f))
    throw UsageError(fmt::format("optimizer: beta2 must be in [0, 1) (got {})", o.beta2));
  if (!(std::isfinite(o.eps) && o.eps > 0.0f))
    throw UsageError(fmt::format("optimizer: eps must be > 0 and finite (got {})", o.eps));
  if (!(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0f))
    throw UsageError(fmt::format("optimizer: weight_decay must be >= 0 and finite (got {})", o.weight_decay));
  if (!(o.momentum >= 0.0f && o.momentum < 1.0f))
    throw UsageError(fmt::format("optimizer: momentum must be in [0, 1) (got {})", o.momentum));
}

bool no_decay_name(const std::string& name, const Tensor& param) {
  if (param.numel() == 1) return true;
  std::vector<std::string> parts = split_dots(name);
  const std::string& last = parts.back();
  if (last == "bias" || ends_with(last, "_bias")) return true;
  if (last == "gamma_1" || last == "gamma_2") return true;  // LayerScale's gains, like a norm's
  for (const std::string& part : parts) {
    if (part.rfind("norm", 0) == 0) return true;
    if (ends_with(part, "embedding")) return true;
  }
  return false;
}

Optimizer::Optimizer(const OptimizerOptions& options, nn::NamedTensors params)
    : options_(options), params_(std::move(params)) {
  check_optimizer_options(options_);
  std::set<std::string> seen;
  for (const auto& [name, param] : params_) {
    if (!param.defined()) throw UsageError(fmt::format("optimizer: parameter '{}' is undefined", name));
    if (!seen.insert(name).second) throw UsageError(fmt::format("optimizer: parameter '{}' given twice", name));
    decay_.push_back(options_.decay_all || !no_decay_name(name, param));
  }
  for (const std::string& kind : state_kinds()) {
    std::vector<std::vector<float>>& buffers = state_buffers(kind);
    for (const auto& [name, param] : params_) buffers.emplace_back(static_cast<size_t>(param.numel()), 0.0f);
  }
}

std::vector<std::string> Optimizer::state_kinds() const {
  if (options_.name == OptimizerKind::sgd) {
    if (options_.momentum > 0.0f) return {"momentum_buffer"};
    return {};
  }
  return {"exp_avg", "exp_avg_sq"};
}

const std::vector<std::vector<float>>& Optimizer::state_buffers(const std::string& kind) const {
  if (kind == "exp_avg") return exp_avg_;
  if (kind == "exp_avg_sq") return exp_avg_sq_;
  if (kind == "momentum_buffer") return momentum_buffer_;
  throw UsageError(fmt::format("optimizer: unknown state kind '{}'", kind));
}

std::vector<std::vector<float>>& Optimizer::state_buffers(const std::string& kind) {
  if (kind == "exp_avg") return exp_avg_;
  if (kind == "exp_avg_sq") return exp_avg_sq_;
  if (kind == "momentum_buffer") return momentum_buffer_;
  throw UsageError(fmt::format("optimizer: unknown state kind '{}'", kind));
}

void Optimizer::step(double lr) {
  if (!(std::isfinite(lr) && lr >= 0.0))
    throw UsageError(fmt::format("optimizer: step lr must be >= 0 and finite (got {})", lr));
  step_count_++;
  // All the parameters' elements as one index range, cut into one contiguous share per thread.
  // Each element's update is independent, so the split changes no bit; and a thread updates the
  // same elements every step, so their optimizer state stays in its own core's cache. One thread
  // team for the whole update, not one per tensor.
  std::vector<size_t> with_grad;
  std::vector<int64_t> first;  // first[k]: index of with_grad[k]'s element 0 in the whole range
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); i++) {
    if (!params_[i].second.has_grad()) continue;
    with_grad.push_back(i);
    first.push_back(total);
    total += params_[i].second.numel();
  }
  const bool sgd = options_.name == OptimizerKind::sgd;
  const int64_t threads = parallel_parts(total >= kParallelMinElements);
  run_parts(threads, [&](int64_t t) {
    const int64_t lo = total * t / threads, hi = total * (t + 1) / threads;
    for (size_t k = 0; k < with_grad.size(); k++) {
      const int64_t begin = std::max(lo, first[k]) - first[k];
      const int64_t end = std::min(hi, first[k] + params_[with_grad[k]].second.numel()) - first[k];
      if (begin >= end) continue;
      if (sgd) step_sgd(with_grad[k], lr, begin, end);
      else step_adam(with_grad[k], lr, begin, end, false);
    }
  });
  if (OpTimes* times = op_times()) times->charge(times->other_s, "optimizer step");
}

double Optimizer::step_and_grad_norm(double lr) {
  if (options_.name == OptimizerKind::sgd) {  // SGD's update reads g once already: two passes
    const double norm = clip_grad_norm(params_, 0.0);
    step(lr);
    return norm;
  }
  if (!(std::isfinite(lr) && lr >= 0.0))
    throw UsageError(fmt::format("optimizer: step lr must be >= 0 and finite (got {})", lr));
  step_count_++;
  // Each tensor's sum of squares is one chain of lanes over the whole tensor, so a thread takes
  // whole tensors: those whose first element falls in its share of the elements (as in
  // clip_grad_norm). Every element's update is independent, so the split changes no bit.
  std::vector<double> sums(params_.size(), 0.0);
  std::vector<int64_t> numel(params_.size(), 0);
  int64_t total = 0;
  for (size_t k = 0; k < params_.size(); k++) {
    numel[k] = params_[k].second.has_grad() ? params_[k].second.numel() : 0;
    total += numel[k];
  }
  const int64_t threads = parallel_parts(total >= kParallelMinElements);
  run_parts(threads, [&](int64_t t) {
    const auto [begin, end] = tensors_of_share(numel, total, t, threads);
    for (int64_t k = begin; k < end; k++)
      if (numel[size_t(k)] > 0) sums[size_t(k)] = step_adam(size_t(k), lr, 0, numel[size_t(k)], true);
  });
  double sum_sq = 0.0;  // in parameter order, as clip_grad_norm adds them
  for (double s : sums) sum_sq += s;
  if (OpTimes* times = op_times()) times->charge(times->other_s, "optimizer step and gradient norm");
  return std::sqrt(sum_sq);
}

// torch.optim.SGD (dampening 0, no nesterov): d = g + wd*p; buf = momentum*buf + d; p -= lr*buf.
// PyTorch starts buf as a copy of d, which is what momentum*0 + d gives.
void Optimizer::step_sgd(size_t index, double lr, int64_t begin, int64_t end) {
  Tensor& param = params_[index].second;
  float* p = param.data();             // (numel)
  const float* g = param.grad_data();  // (numel)
  const float weight_decay = decay_[index] ? static_cast<float>(shortest(options_.weight_decay)) : 0.0f;
  const float momentum = static_cast<float>(shortest(options_.momentum));
  const float neg_lr = static_cast<float>(-lr);
  float* buf = momentum_buffer_.empty() ? nullptr : momentum_buffer_[index].data();  // (numel)
  for (int64_t i = begin; i < end; i++) {
    float d = g[i];
    if (weight_decay != 0.0f) d = d + weight_decay * p[i];
    if (buf) {
      buf[i] = buf[i] * momentum + d;
      d = buf[i];
    }
    p[i] = p[i] + neg_lr * d;
  }
}

// torch.optim.Adam / AdamW (amsgrad off), same float32 operation order:
//   adamw: p *= 1 - lr*wd                 adam: g += wd*p
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
//   p += -(lr / (1-beta1^t)) * m / (sqrt(v) / sqrt(1-beta2^t) + eps)
// The scalars are computed in double, the state stays float32.
double Optimizer::step_adam(size_t index, double lr, int64_t begin, int64_t end, bool sum_squares) {
  Tensor& param = params_[index].second;
  float* p = param.data();               // (numel)
  const float* g = param.grad_data();    // (numel)
  float* m = exp_avg_[index].data();     // (numel)
  float* v = exp_avg_sq_[index].data();  // (numel)

  const AdamStepDoubles& d = adam_step_doubles(options_, step_count_);
  const double wd_d = decay_[index] ? d.weight_decay : 0.0;
  const double beta1 = d.beta1;
  const double beta2 = d.beta2;
  const double bias_correction1 = d.bias_correction1;
  const double bias_correction2 = d.bias_correction2;

  kernels::AdamScalars s;
  s.decoupled = options_.name == OptimizerKind::adamw;
  s.param_scale = static_cast<float>(1.0 - lr * wd_d);  // adamw; 1 when wd_d is 0
  s.grad_decay = static_cast<float>(wd_d);              // adam
  s.beta1 = static_cast<float>(beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(d.eps);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  // The element loop is a kernel (kernels/adam.hpp) of the active path, the reference path's
  // plain loop included.
  if (sum_squares) return kernels::adam_update_sum_squares(p + begin, m + begin, v + begin, g + begin, end - begin, s);
  kernels::adam_update(p + begin, m + begin, v + begin, g + begin, end - begin, s);
  return 0.0;
}

void Optimizer::zero_grad() {
  for (auto& [name, param] : params_) param.zero_grad();
  if (OpTimes* times = op_times()) times->charge(times->other_s, "zero_grad");
}

nn::NamedTensors Optimizer::state() const {
  nn::NamedTensors out;
  for (const std::string& kind : state_kinds()) {
    const std::vector<std::vector<float>>& buffers = state_buffers(kind);
    for (size_t i = 0; i < params_.size(); i++)
      out.emplace_back(fmt::format("optim.{}.{}", kind, params_[i].first),
                       Tensor::from_data(params_[i].second.shape(), buffers[i]));
  }
  return out;
}

void Optimizer::load_state(const std::map<std::string, std::vector<float>>& tensors, int64_t step_count,
                           const std::string& where) {
  if (step_count < 0)
    throw InputError(fmt::format("{}: optimizer state: step count must be >= 0 (got {})", where, step_count));
  // Check everything first so a bad checkpoint leaves the optimizer as it was.
  std::set<std::string> expected;
  for (const std::string& kind : state_kinds()) {
    for (const auto& [name, param] : params_) {
      std::string key = fmt::format("optim.{}.{}", kind, name);
      auto it = tensors.find(key);
      if (it == tensors.end())
        throw InputError(
            fmt::format("{}: optimizer state '{}': missing (optimizer '{}')", where, key, to_string(options_.name)));
      if (static_cast<int64_t>(it->second.size()) != param.numel())
        throw InputError(fmt::format("{}: optimizer state '{}': has {} values, parameter {} needs {}", where, key,
                                     it->second.size(), shape_str(param.shape()), param.numel()));
      expected.insert(key);
    }
  }
  for (const auto& [key, values] : tensors) {
    if (key.rfind("optim.", 0) == 0 && !expected.count(key))
      throw InputError(
          fmt::format("{}: optimizer state '{}': not expected by optimizer '{}' (another optimizer "
                      "or parameter set?)",
                      where, key, to_string(options_.name)));
  }
  for (const std::string& kind : state_kinds()) {
    std::vector<std::vector<float>>& buffers = state_buffers(kind);
    for (size_t i = 0; i < params_.size(); i++)
      buffers[i] = tensors.at(fmt::format("optim.{}.{}", kind, params_[i].first));
  }
  step_count_ = step_count;
}

double clip_grad_norm(const nn::NamedTensors& params, double max_norm) {
  // One sum per tensor (kernels::sums_of_squares: several tensors side by side, each thread a
  // contiguous run of tensors), then the tensors' sums in order: the norm is the same at every
  // thread count.
  std::vector<double> sums(params.size(), 0.0);
  std::vector<const float*> grads(params.size(), nullptr);
  std::vector<int64_t> numel(params.size(), 0);
  int64_t total = 0;
  for (size_t k = 0; k < params.size(); k++) {
    grads[k] = params[k].second.grad_data();  // (numel) or null
    numel[k] = grads[k] != nullptr ? params[k].second.numel() : 0;
    total += numel[k];
  }
  const int64_t threads = parallel_parts(total >= kParallelMinElements);
  run_parts(threads, [&](int64_t t) {
    const auto [begin, end] = tensors_of_share(numel, total, t, threads);
    if (begin < end) kernels::sums_of_squares(sums.data() + begin, grads.data() + begin, numel.data() + begin, end - begin);
  });
  double sum_sq = 0.0;
  for (double s : sums) sum_sq += s;
  if (OpTimes* times = op_times()) times->charge(times->other_s, "gradient norm");
  const double norm = std::sqrt(sum_sq);
  if (!std::isfinite(norm) || !(max_norm > 0.0)) return norm;
  const double clip_coef = max_norm / (norm + 1e-6);
  if (clip_coef >= 1.0) return norm;
  const float scale = static_cast<float>(clip_coef);
  for (const auto& [name, param] : params) {
    if (!param.has_grad()) continue;
    Tensor handle = param;          // same storage; a non-const handle to write the gradient
    float* g = handle.grad_data();  // (numel)
    const int64_t n = handle.numel();
    parallel_for(n, n >= kParallelMinElements, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; i++) g[i] = g[i] * scale;
    });
  }
  return norm;
}

}  // namespace normlab::optim
