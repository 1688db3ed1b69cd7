#pragma once
// Inside one kernel path only (not dispatched): the linear layer's forward as one GEMM,
// C = A B^T + bias, the bias added where the first K block is stored (one pass over C, one thread
// team). The same bits as C = bias; C += A B^T: one addition of the same two numbers.
#include <cstdint>

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

// C (M,N) = A (M,K) @ B^T + bias, with B stored (N,K) and bias (N) (may be nullptr). Where the
// last K block is stored (kernels/matmul.cpp), two optional epilogues on the finished value v:
//   residual (M,N), not C itself (may be nullptr): C = residual + v, the residual sum x + f of an
//            encoder layer, the same bits as add_forward(C, residual, v);
//   relu:    C = relu(v), the same bits as relu_forward on the product.
void matmul_nt_bias(float* C, const float* A, const float* B, const float* bias, const float* residual, int64_t M,
                    int64_t K, int64_t N, bool relu);

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
