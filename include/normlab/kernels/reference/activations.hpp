#pragma once
// GELU (exact, PyTorch's default) and ReLU, the plain version, elementwise on N floats:
//   gelu(x)  = x Phi(x),             Phi(x) = 0.5 (1 + erf(x / sqrt 2))
//   gelu'(x) = Phi(x) + x phi(x),    phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   relu(x)  = max(x, 0),            relu'(x) = (x > 0)
// And Dynamic Tanh (DyT) on N rows of C channels, alpha one scalar:
//   y = gamma[c] tanh(alpha x) + beta[c],   dy/dx = gamma[c] alpha (1 - tanh(alpha x)^2)
#include <cstdint>

namespace normlab::kernels::reference {

void gelu_forward(float* out, const float* inp, int64_t N);                       // (N), (N)
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N);  // (N), (N), (N); +=
void relu_forward(float* out, const float* inp, int64_t N);                       // (N), (N)
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t N);  // (N), (N), (N); +=

void dyt_forward(float* out, const float* inp,                               // (N,C), (N,C)
                 const float* alpha, const float* gamma, const float* beta,  // (1), (C), (C)
                 int64_t N, int64_t C);
// ACCUMULATES (+=) into dinp (may be nullptr), dalpha, dgamma, dbeta.
void dyt_backward(float* dinp, float* dalpha, float* dgamma, float* dbeta,  // (N,C), (1), (C), (C)
                  const float* dout, const float* inp,                      // (N,C), (N,C)
                  const float* alpha, const float* gamma,                   // (1), (C)
                  int64_t N, int64_t C);

}  // namespace normlab::kernels::reference
