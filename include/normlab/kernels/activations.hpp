#pragma once
// Elementwise activations on N floats, and Dynamic Tanh (DyT, Zhu et al. 2025, "Transformers
// without Normalization"), the drop-in replacement for LayerNorm that the study compares against.
// Every backward ACCUMULATES (+=) into its gradients.
#include <cstdint>

namespace normlab::kernels {

// relu(x) = max(x, 0); the gradient at exactly 0 is 0, as in PyTorch.
void relu_forward(float* out, const float* inp, int64_t N);                       // (N), (N)
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t N);  // (N), (N), (N)

// The exact GELU, PyTorch's default (approximate='none'), not the tanh approximation:
//   gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
//   gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// Phi is evaluated as 0.5 erfc(-x / sqrt(2)), which stays accurate for negative x.
void gelu_forward(float* out, const float* inp, int64_t N);                       // (N), (N)
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N);  // (N), (N), (N)

// Dynamic Tanh on N rows of C channels: y = gamma[c] * tanh(alpha * x) + beta[c], alpha one scalar.
void dyt_forward(float* out,                                                 // (N, C)
                 const float* inp,                                           // (N, C)
                 const float* alpha, const float* gamma, const float* beta,  // (1), (C), (C)
                 int64_t N, int64_t C);

// dinp may be nullptr (input needs no gradient). dalpha, dgamma and dbeta are reduced over rows
// with one partial buffer per thread (in double), combined in thread order: bit-identical run to
// run at a fixed thread count.
void dyt_backward(float* dinp, float* dalpha, float* dgamma, float* dbeta,  // (N, C), (1), (C), (C)
                  const float* dout, const float* inp,                      // (N, C), (N, C)
                  const float* alpha, const float* gamma,                   // (1), (C)
                  int64_t N, int64_t C);

}  // namespace normlab::kernels
