#pragma once
// GELU (exact, PyTorch's default) and ReLU, the plain version, elementwise on N floats:
//   gelu(x)  = x Phi(x),             Phi(x) = 0.5 (1 + erf(x / sqrt 2))
//   gelu'(x) = Phi(x) + x phi(x),    phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   relu(x)  = max(x, 0),            relu'(x) = (x > 0)
#include <cstdint>

namespace normlab::kernels::reference {

void gelu_forward(float* out, const float* inp, int64_t N);                       // (N), (N)
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N);  // (N), (N), (N); +=
void relu_forward(float* out, const float* inp, int64_t N);                       // (N), (N)
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t N);  // (N), (N), (N); +=

}  // namespace normlab::kernels::reference
