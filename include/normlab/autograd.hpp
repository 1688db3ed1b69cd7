#pragma once
// Reverse-mode automatic differentiation, define-by-run (the micrograd idea, for tensors).
//
// Every differentiable op that sees an input requiring a gradient records a Node on its output:
// the inputs (its parents in the graph) and a `backward` closure that, given d(loss)/d(output),
// ADDS d(loss)/d(input) into each input's gradient buffer. Adding, not assigning, is what makes a
// tensor used twice receive the sum of both contributions. (The hot ops skip one step of this: the
// first gradient to reach a tensor is written into a new, unfilled buffer instead of added to a
// zero-filled one, with the same bits; kernels/grad_out.hpp.)
//
// backward(root):
//   1. collect the graph below root in topological order (iterative DFS: no recursion, so a graph
//      thousands of ops deep cannot overflow the stack);
//   2. seed d(root)/d(root) = 1;
//   3. visit nodes from root towards the leaves, calling each node's backward;
//   4. release each node after it ran (its closure and the activations it captured are freed) and
//      drop the gradients of intermediate tensors (PyTorch's retain_graph=False behaviour). A second
//      backward through a released node throws UsageError.
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "normlab/tensor.hpp"

namespace normlab {

struct Node {
  std::string name;            // op name, for error messages and debugging
  std::vector<Tensor> inputs;  // parents; only those that require grad matter
  // Receives d(loss)/d(output) (same numel as the output), accumulates into the inputs' grads
  // (or writes the first gradient to reach one, kernels/grad_out.hpp).
  std::function<void(const float* grad_output)> backward;
  bool released = false;
};

// Is gradient recording on? Off inside a NoGradGuard (evaluation, optimizer updates).
bool grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True if an op with these inputs must record a node (grad mode on and some input requires grad).
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Create `out`'s node. `backward` must not capture `out` itself (that would be a reference cycle).
void record(Tensor& out, std::string name, std::vector<Tensor> inputs,
            std::function<void(const float* grad_output)> backward);

// Inside a node's backward only: when d(loss)/d(input) is d(loss)/d(output) unchanged (a sum's
// input, x + f), hands `input` the output's gradient buffer itself instead of a copy, if input
// requires a gradient and has none yet and nothing else holds the buffer. True if it did: the
// backward must then not write input's gradient (and may still read grad_output, now input's).
bool pass_gradient_through(const Tensor& input);

// Runs backward from `root`, seeding with `seed` (null means 1, and root must have one element).
void run_backward(const Tensor& root, const float* seed);

// While one is alive on this thread, run_backward checks each leaf's gradient for infinite and NaN
// values at the point it becomes final: right after the last node that uses the leaf has run
// (reverse topological order), while the gradient is still in cache. A later pass that must not
// start on a non-finite gradient (the optimizer's update with the gradient norm in the same pass,
// optim::Optimizer::step_and_grad_norm) learns here, for a read of hot data, that it may.
// Gradients changed after the backward (summed over ranks, scaled, accumulated by a second
// backward) are not covered.
class LeafGradientCheck {
 public:
  LeafGradientCheck();
  ~LeafGradientCheck();
  LeafGradientCheck(const LeafGradientCheck&) = delete;
  LeafGradientCheck& operator=(const LeafGradientCheck&) = delete;

  // True if every leaf gradient checked so far was finite (true when none was checked).
  bool all_finite() const { return all_finite_; }
  int64_t leaves_checked() const { return leaves_checked_; }
  void add(const float* grad, int64_t numel);  // run_backward's call, for one leaf

 private:
  bool all_finite_ = true;
  int64_t leaves_checked_ = 0;
  LeafGradientCheck* previous_;
};

// The number of nodes reachable from `root` (for tests and diagnostics).
int64_t graph_size(const Tensor& root);

// Where a step's time goes, by op (`normlab bench step --breakdown`). While a thread has one set,
// record() charges the time since the last mark to the op's forward entry (an op records its node
// last, so that is the op's own work plus the glue before it), run_backward charges each node's
// backward to its name, and other phases (the optimizer) charge theirs with charge(). Off (null)
// by default: then nothing is timed.
struct OpTimes {
  using Clock = std::chrono::steady_clock;
  std::map<std::string, double> forward_s, backward_s, other_s;
  Clock::time_point mark = Clock::now();
  void restart() { mark = Clock::now(); }
  // Adds the time since the mark to `bucket[name]` and moves the mark to now.
  void charge(std::map<std::string, double>& bucket, const std::string& name);
};
void set_op_times(OpTimes* times);  // this thread; null: off
OpTimes* op_times();

}  // namespace normlab
