#pragma once
// Where a backward kernel writes one gradient, and how.
//
// A tensor used twice receives the sum of two gradients, so backward kernels ADD into their
// gradient buffers. But most tensors receive exactly one, and adding it to a buffer that was
// zero-filled for the purpose costs a pass over memory and a fork of the threads for nothing (3% of
// configs/bench-step.json's step at 2 threads on the avx2 path, when this was measured). So
// autograd hands the first gradient to reach a tensor a new, unfilled buffer and asks the kernel to
// OVERWRITE it; later ones add (PyTorch's autograd likewise takes the first gradient as it is).
// Overwriting gives the same bits as adding to zeros: 0 + x == x, and the only difference, a -0
// that adding would turn into +0, adds to any number as +0 does.
namespace normlab::kernels {

struct GradOut {
  float* data = nullptr;  // nullptr: this gradient is not wanted
  // true: data holds a gradient, add to it. false: data holds anything (NaN, say); write every
  // element of the gradient.
  bool accumulate = true;

  GradOut() = default;
  // A plain pointer (or nullptr) is a buffer to add to: the default contract of a backward kernel.
  GradOut(float* d) : data(d) {}  // NOLINT(google-explicit-constructor): a float* means "add"
  GradOut(float* d, bool add) : data(d), accumulate(add) {}
};

}  // namespace normlab::kernels
