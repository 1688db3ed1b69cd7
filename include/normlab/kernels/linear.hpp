#pragma once
// Linear (fully connected) layer on raw arrays, PyTorch layout: weight (OC, C), bias (OC),
//   out = inp @ weight^T + bias
// Both products go through normlab's GEMM (kernels/matmul.hpp) without transposing anything:
//   forward  out    = inp  @ weight^T   matmul_nt
//   backward dinp  += dout @ weight     matmul_nn
//            dweight += dout^T @ inp    matmul_tn
//            dbias  += sum over rows of dout
// Every result is bit-identical run to run and for any thread count (the GEMM guarantees it, and
// dbias sums each column over the rows in row order on one thread).
#include <cstdint>

#include "normlab/kernels/grad_out.hpp"

namespace normlab::kernels {

// out = inp @ weight^T (+ bias). bias may be nullptr. Threaded (normlab's pool, parallel.hpp).
void linear_forward(float* out,                                                // (N, OC)
                    const float* inp, const float* weight, const float* bias,  // (N, C), (OC, C), (OC)
                    int64_t N, int64_t C, int64_t OC);

// ACCUMULATES (+=) into dinp, dweight and dbias, or overwrites those that say so (grad_out.hpp);
// any of the three may be nullptr (no gradient wanted). inp and weight are the forward's inputs;
// inp may be nullptr when dweight is, weight when dinp is.
void linear_backward(GradOut dinp, GradOut dweight, GradOut dbias,              // (N, C), (OC, C), (OC)
                     const float* dout, const float* inp, const float* weight,  // (N, OC), (N, C), (OC, C)
                     int64_t N, int64_t C, int64_t OC);

// Linear followed by a residual sum in one pass: out = residual + (inp @ weight^T + bias), the
// residual added as the GEMM stores C (its last K block). The same bits as linear_forward into f
// then add_forward(out, residual, f): the same two numbers added once. out must not be residual.
// The backward is linear_backward's, and the residual's gradient is dout itself (add_backward).
void linear_add_forward(float* out,                                                // (N, OC)
                        const float* inp, const float* weight, const float* bias,  // (N, C), (OC, C), (OC)
                        const float* residual,                                     // (N, OC)
                        int64_t N, int64_t C, int64_t OC);

// Linear followed by ReLU in one pass: out = relu(inp @ weight^T + bias), the ReLU applied as the
// GEMM stores C. The same bits as linear_forward then relu_forward; the pre-activation is never
// stored (the backward needs only out: out > 0 exactly where the pre-activation is).
void linear_relu_forward(float* out,                                                // (N, OC)
                         const float* inp, const float* weight, const float* bias,  // (N, C), (OC, C), (OC)
                         int64_t N, int64_t C, int64_t OC);

// Stores like linear_backward, from the gradient at out and out itself: the same bits as
// relu_backward into a zeroed buffer followed by linear_backward.
void linear_relu_backward(GradOut dinp, GradOut dweight, GradOut dbias,  // (N, C), (OC, C), (OC)
                          const float* dout, const float* out,           // (N, OC), (N, OC)
                          const float* inp, const float* weight,         // (N, C), (OC, C)
                          int64_t N, int64_t C, int64_t OC);

}  // namespace normlab::kernels
