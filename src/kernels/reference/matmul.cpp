// Every dot product is summed in double, as in every reference kernel.
#include "normlab/kernels/reference/matmul.hpp"

#include <cstddef>
#include <vector>

#include "normlab/kernels/reference/activations.hpp"

namespace normlab::kernels::reference {

void matmul_nn(float* C,                        // (M,N)
               const float* A, const float* B,  // (M,K), (K,N)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool /*parallel*/) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      // C[i][j] = sum_k A[i][k] B[k][j]
      double acc = accumulate ? C[i * N + j] : 0.0;
      for (int64_t k = 0; k < K; k++) acc += double(A[i * K + k]) * B[k * N + j];
      C[i * N + j] = float(acc);
    }
}

void matmul_nt(float* C,                        // (M,N)
               const float* A, const float* B,  // (M,K), (N,K)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool /*parallel*/) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      // C[i][j] = sum_k A[i][k] B[j][k]: row i of A against row j of B
      double acc = accumulate ? C[i * N + j] : 0.0;
      for (int64_t k = 0; k < K; k++) acc += double(A[i * K + k]) * B[j * K + k];
      C[i * N + j] = float(acc);
    }
}

void matmul_tn(float* C,                        // (M,N)
               const float* A, const float* B,  // (K,M), (K,N)
               int64_t M, int64_t K, int64_t N, bool accumulate, bool /*parallel*/) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      // C[i][j] = sum_k A[k][i] B[k][j]: column i of A against column j of B
      double acc = accumulate ? C[i * N + j] : 0.0;
      for (int64_t k = 0; k < K; k++) acc += double(A[k * M + i]) * B[k * N + j];
      C[i * N + j] = float(acc);
    }
}

void linear_forward(float* out,                                                // (N,OC)
                    const float* inp, const float* weight, const float* bias,  // (N,C), (OC,C), (OC)
                    int64_t N, int64_t C, int64_t OC) {
  // out[n][o] = bias[o] + sum_c inp[n][c] weight[o][c]
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      double acc = bias ? bias[o] : 0.0f;
      for (int64_t c = 0; c < C; c++) acc += double(inp[n * C + c]) * weight[o * C + c];
      out[n * OC + o] = float(acc);
    }
}

void linear_backward(GradOut dinp, GradOut dweight, GradOut dbias,              // (N,C), (OC,C), (OC)
                     const float* dout, const float* inp, const float* weight,  // (N,OC), (N,C), (OC,C)
                     int64_t N, int64_t C, int64_t OC) {
  // dinp = dout @ weight: each input feeds every output through weight[o][c]
  if (dinp.data) matmul_nn(dinp.data, dout, weight, N, OC, C, dinp.accumulate, false);
  // dweight = dout^T @ inp: summed over the N tokens
  if (dweight.data) matmul_tn(dweight.data, dout, inp, OC, N, C, dweight.accumulate, false);
  // dbias = sum over the tokens of dout
  if (dbias.data)
    for (int64_t o = 0; o < OC; o++) {
      double acc = dbias.accumulate ? dbias.data[o] : 0.0;
      for (int64_t n = 0; n < N; n++) acc += dout[n * OC + o];
      dbias.data[o] = float(acc);
    }
}

void linear_add_forward(float* out,                                                // (N,OC)
                        const float* inp, const float* weight, const float* bias,  // (N,C), (OC,C), (OC)
                        const float* residual,                                     // (N,OC)
                        int64_t N, int64_t C, int64_t OC) {
  linear_forward(out, inp, weight, bias, N, C, OC);                    // f
  for (int64_t i = 0; i < N * OC; i++) out[i] = residual[i] + out[i];  // x + f
}

void linear_relu_forward(float* out,                                                // (N,OC)
                         const float* inp, const float* weight, const float* bias,  // (N,C), (OC,C), (OC)
                         int64_t N, int64_t C, int64_t OC) {
  linear_forward(out, inp, weight, bias, N, C, OC);  // z
  relu_forward(out, out, N * OC);                    // relu(z), in place
}

void linear_relu_backward(GradOut dinp, GradOut dweight, GradOut dbias,  // (N,C), (OC,C), (OC)
                          const float* dout, const float* out,           // (N,OC), (N,OC)
                          const float* inp, const float* weight,         // (N,C), (OC,C)
                          int64_t N, int64_t C, int64_t OC) {
  std::vector<float> dz(size_t(N * OC), 0.0f);  // (N,OC): the gradient reaching z
  relu_backward(dz.data(), dout, out, N * OC);  // out > 0 exactly where z > 0
  linear_backward(dinp, dweight, dbias, dz.data(), inp, weight, N, C, OC);
}

}  // namespace normlab::kernels::reference
