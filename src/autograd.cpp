#include "normlab/autograd.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <utility>

#include "normlab/error.hpp"
#include "normlab/kernels/adam.hpp"

namespace normlab {

namespace {
thread_local bool g_grad_enabled = true;
thread_local OpTimes* t_op_times = nullptr;
thread_local LeafGradientCheck* t_leaf_check = nullptr;
// The gradient buffer of the output whose node's backward runs now, and its numel
// (pass_gradient_through); null outside a backward.
thread_local std::shared_ptr<Storage>* t_output_grad = nullptr;
thread_local int64_t t_output_numel = 0;

// The tensors a traversal has seen: an open-addressing set of pointers (linear probing, at most
// half full), one allocation for the whole graph where std::unordered_set makes one per tensor.
class VisitedSet {
 public:
  // True if `p` was not in the set (and is now).
  bool insert(const TensorImpl* p) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = slot_of(p);
    while (slots_[i] != nullptr) {
      if (slots_[i] == p) return false;
      i = (i + 1) & (slots_.size() - 1);
    }
    slots_[i] = p;
    ++size_;
    return true;
  }

 private:
  size_t slot_of(const TensorImpl* p) const {
    // Fibonacci hashing of the address (heap pointers share their low bits).
    return size_t((uint64_t(reinterpret_cast<uintptr_t>(p)) * 0x9E3779B97F4A7C15ull) >> 32) & (slots_.size() - 1);
  }
  void grow() {
    std::vector<const TensorImpl*> old = std::move(slots_);
    slots_.assign(old.empty() ? 512 : 2 * old.size(), nullptr);
    size_ = 0;
    for (const TensorImpl* p : old)
      if (p != nullptr) insert(p);
  }
  std::vector<const TensorImpl*> slots_;  // size a power of two
  size_t size_ = 0;
};

// Post-order DFS with an explicit stack: every tensor appears after all tensors it was computed
// from. Returned order: leaves first, root last. The order holds owning pointers: backward frees
// each node's inputs as it goes, and a tensor still to be visited must not die with them.
std::vector<std::shared_ptr<TensorImpl>> topological_order(const std::shared_ptr<TensorImpl>& root) {
  std::vector<std::shared_ptr<TensorImpl>> order;
  order.reserve(256);
  VisitedSet visited;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, size_t>> stack;  // (tensor, next input to visit)
  stack.reserve(64);
  stack.emplace_back(root, 0);
  visited.insert(root.get());
  while (!stack.empty()) {
    auto& [impl, next] = stack.back();
    Node* node = impl->grad_fn.get();
    if (node && node->released)
      throw UsageError(
          fmt::format("backward through a released graph (op '{}'): the graph is freed after backward; "
                      "run the forward pass again",
                      node->name));
    if (node && next < node->inputs.size()) {
      std::shared_ptr<TensorImpl> child = node->inputs[next++].impl_ptr();
      if (child && child->requires_grad && visited.insert(child.get())) stack.emplace_back(std::move(child), 0);
      continue;
    }
    order.push_back(impl);
    stack.pop_back();
  }
  return order;
}
}  // namespace

bool grad_enabled() { return g_grad_enabled; }

void OpTimes::charge(std::map<std::string, double>& bucket, const std::string& name) {
  const Clock::time_point now = Clock::now();
  bucket[name] += std::chrono::duration<double>(now - mark).count();
  mark = now;
}
void set_op_times(OpTimes* times) { t_op_times = times; }
OpTimes* op_times() { return t_op_times; }

LeafGradientCheck::LeafGradientCheck() : previous_(t_leaf_check) { t_leaf_check = this; }
LeafGradientCheck::~LeafGradientCheck() { t_leaf_check = previous_; }
void LeafGradientCheck::add(const float* grad, int64_t numel) {
  leaves_checked_++;
  if (all_finite_ && !kernels::all_finite(grad, numel)) all_finite_ = false;
}

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void record(Tensor& out, std::string name, std::vector<Tensor> inputs,
            std::function<void(const float* grad_output)> backward) {
  if (t_op_times) t_op_times->charge(t_op_times->forward_s, name);
  auto node = std::make_shared<Node>();
  node->name = std::move(name);
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

void run_backward(const Tensor& root, const float* seed) {
  if (!root.defined()) throw UsageError("backward on an undefined tensor");
  if (!root.requires_grad())
    throw UsageError(
        "backward on a tensor that does not require grad (no parameter or input in its graph requires grad)");
  if (!seed && root.numel() != 1)
    throw UsageError(
        fmt::format("backward() without a gradient needs a one-element tensor, shape is {}", shape_str(root.shape())));

  OpTimes* const times = t_op_times;
  if (times) times->charge(times->other_s, "loss, accuracy (before backward)");
  std::vector<std::shared_ptr<TensorImpl>> order = topological_order(root.impl_ptr());

  Tensor root_handle(root.impl_ptr());
  float* root_grad = root_handle.grad_data();
  for (int64_t i = 0; i < root.numel(); ++i) root_grad[i] += seed ? seed[i] : 1.0f;

  if (times) times->charge(times->other_s, "backward: graph order, seed");
  double* const leaf_check_s = times && t_leaf_check ? &times->other_s["backward: leaf gradients' finite check"] : nullptr;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    TensorImpl* impl = it->get();
    std::shared_ptr<Node> node = impl->grad_fn;
    if (!node) {  // a leaf: its gradient, final now, stays for the optimizer
      if (t_leaf_check && impl->grad) {
        t_leaf_check->add(impl->grad->data(), shape_numel(impl->shape));
        if (times) {  // one clock read per leaf, not a map lookup: ~80 leaves a step
          const OpTimes::Clock::time_point now = OpTimes::Clock::now();
          *leaf_check_s += std::chrono::duration<double>(now - times->mark).count();
          times->mark = now;
        }
      }
      continue;
    }
    if (impl->grad) {
      t_output_grad = &impl->grad;
      t_output_numel = shape_numel(impl->shape);
      try {
        node->backward(impl->grad->data());
      } catch (...) {
        t_output_grad = nullptr;
        throw;
      }
      t_output_grad = nullptr;
    }
    // Free the closure (and the activations it captured) and this intermediate gradient.
    node->backward = nullptr;
    node->inputs.clear();
    node->released = true;
    impl->grad.reset();
    it->reset();  // done with this tensor: let its storage go if nothing else holds it
    if (times) times->charge(times->backward_s, node->name);
  }
}

bool pass_gradient_through(const Tensor& input) {
  if (t_output_grad == nullptr || !*t_output_grad || t_output_grad->use_count() != 1) return false;
  TensorImpl* in = input.impl();
  if (in == nullptr || !in->requires_grad || in->grad) return false;
  if (shape_numel(in->shape) != t_output_numel) return false;
  in->grad = std::move(*t_output_grad);
  return true;
}

int64_t graph_size(const Tensor& root) {
  if (!root.defined() || !root.grad_fn()) return 0;
  int64_t count = 0;
  for (const auto& impl : topological_order(root.impl_ptr()))
    if (impl->grad_fn) ++count;
  return count;
}

}  // namespace normlab
