#pragma once
// Matrix products, the plain version: three nested loops per layout, row-major, on one thread.
// Same contract as kernels/matmul.hpp: accumulate = false overwrites C, accumulate = true adds to
// it; `parallel` is taken for the same signature and has nothing to split here.
//   matmul_nn: C = A B      matmul_nt: C = A B^T      matmul_tn: C = A^T B
// And the Linear layer built on them (PyTorch layout: weight (OC, C)).
#include <cstdint>

#include "normlab/kernels/grad_out.hpp"

namespace normlab::kernels::reference {

void matmul_nn(float* C,                        // (M,N)
               const float* A, const float* B,  // (M,K), (K,N)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool parallel);
void matmul_nt(float* C,                        // (M,N)
               const float* A, const float* B,  // (M,K), (N,K)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool parallel);
void matmul_tn(float* C,                        // (M,N)
               const float* A, const float* B,  // (K,M), (K,N)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool parallel);

// out = inp @ weight^T + bias; bias may be nullptr.
void linear_forward(float* out,                                                // (N,OC)
                    const float* inp, const float* weight, const float* bias,  // (N,C), (OC,C), (OC)
                    int64_t N, int64_t C, int64_t OC);

// ACCUMULATES (+=) into dinp, dweight, dbias, or overwrites those that say so (grad_out.hpp); each
// may be nullptr.
void linear_backward(GradOut dinp, GradOut dweight, GradOut dbias,              // (N,C), (OC,C), (OC)
                     const float* dout, const float* inp, const float* weight,  // (N,OC), (N,C), (OC,C)
                     int64_t N, int64_t C, int64_t OC);

// out = residual + (inp @ weight^T + bias): linear_forward, then the residual added to its output
// in float, as add_forward adds x + f.
void linear_add_forward(float* out,                                                // (N,OC)
                        const float* inp, const float* weight, const float* bias,  // (N,C), (OC,C), (OC)
                        const float* residual,                                     // (N,OC)
                        int64_t N, int64_t C, int64_t OC);

// out = relu(inp @ weight^T + bias): linear_forward, then relu_forward on its output.
void linear_relu_forward(float* out,                                                // (N,OC)
                         const float* inp, const float* weight, const float* bias,  // (N,C), (OC,C), (OC)
                         int64_t N, int64_t C, int64_t OC);

// The backward of the two: dz = relu'(z) dout (z > 0 exactly where out > 0), then linear_backward
// with dz. Same accumulation contract as linear_backward.
void linear_relu_backward(GradOut dinp, GradOut dweight, GradOut dbias,  // (N,C), (OC,C), (OC)
                          const float* dout, const float* out,           // (N,OC), (N,OC)
                          const float* inp, const float* weight,         // (N,C), (OC,C)
                          int64_t N, int64_t C, int64_t OC);

}  // namespace normlab::kernels::reference
