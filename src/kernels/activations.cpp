#include "normlab/kernels/activations.hpp"
#include "isa_kernels.hpp"

#include <cmath>
#include <vector>

#include "normlab/kernels/math.hpp"
#include "normlab/parallel.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {
// exp / tanh / erfc cost tens of operations per element: a smaller grain pays.
constexpr int64_t kMinParallelTranscendentals = int64_t{1} << 12;
}  // namespace

void relu_forward(float* out, const float* inp, int64_t N) {
  parallel_for(N, N >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
  });
}

void relu_backward(float* dinp, const float* dout, const float* inp, int64_t N) {
  parallel_for(N, N >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
  });
}

namespace {
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t N) {
  parallel_for(N, N >= kMinParallelTranscendentals, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) {
      const float x = inp[i];
      // Phi(x) = 0.5 erfc(-x / sqrt(2)) = 0.5 (1 + erf(x / sqrt(2))), but without the cancellation
      // of 1 + erf for negative x (gelu(-3) would lose ~9 bits)
      out[i] = 0.5f * x * math::erfc(-x * kInvSqrt2);
    }
  });
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N) {
  parallel_for(N, N >= kMinParallelTranscendentals, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) {
      const float x = inp[i];
      const float cdf = 0.5f * math::erfc(-x * kInvSqrt2);
      const float pdf = kInvSqrt2Pi * math::exp(-0.5f * x * x);
      dinp[i] += dout[i] * (cdf + x * pdf);
    }
  });
}

void dyt_forward(float* out, const float* inp, const float* alpha, const float* gamma, const float* beta, int64_t N,
                 int64_t C) {
  const float a = alpha[0];
  parallel_for(N, N * C >= kMinParallelTranscendentals, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;
      float* y = out + n * C;
      for (int64_t c = 0; c < C; c++) y[c] = gamma[c] * math::tanh(a * x[c]) + beta[c];
    }
  });
}

void dyt_backward(float* dinp, float* dalpha, float* dgamma, float* dbeta, const float* dout, const float* inp,
                  const float* alpha, const float* gamma, int64_t N, int64_t C) {
  const float a = alpha[0];
  // One partial row per part (thread of the team): [dgamma (C) | dbeta (C) | dalpha (1)], in double.
  const int64_t partial_size = 2 * C + 1;
  const int64_t parts = parallel_parts();
  std::vector<double> partials(size_t(partial_size) * size_t(parts), 0.0);  // (parts, partial_size)
  for_blocks(N, parts, [&](int64_t part, int64_t begin, int64_t end) {
    double* mine = partials.data() + size_t(part) * size_t(partial_size);
    double* pgamma = mine;
    double* pbeta = mine + C;
    double dalpha_thread = 0.0;
    // A row's dalpha terms: summed after the row's vector loop, in column order. Inside it, the one
    // float sum (which the compiler may not reorder) would keep the whole loop scalar.
    std::vector<float> dalpha_terms(static_cast<size_t>(C));
    for (int64_t n = begin; n < end; n++) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      float* dx = dinp != nullptr ? dinp + n * C : nullptr;
      float* terms = dalpha_terms.data();
      for (int64_t c = 0; c < C; c++) {
        const float t = math::tanh(a * x[c]);
        // d tanh(u)/du = 1 - tanh(u)^2, u = alpha x
        const float dt = dy[c] * gamma[c] * (1.0f - t * t);
        pgamma[c] += double(dy[c] * t);
        pbeta[c] += double(dy[c]);
        terms[c] = dt * x[c];
        if (dx != nullptr) dx[c] += dt * a;
      }
      float dalpha_row = 0.0f;
      for (int64_t c = 0; c < C; c++) dalpha_row += terms[c];
      dalpha_thread += double(dalpha_row);
    }
    mine[2 * C] = dalpha_thread;
  });
  // Combine the partials in part order.
  const int64_t num_partials = int64_t(partials.size()) / partial_size;
  for (int64_t c = 0; c < C; c++) {
    double gsum = 0.0;
    double bsum = 0.0;
    for (int64_t t = 0; t < num_partials; t++) {
      gsum += partials[size_t(t * partial_size + c)];
      bsum += partials[size_t(t * partial_size + C + c)];
    }
    dgamma[c] += float(gsum);
    dbeta[c] += float(bsum);
  }
  double dalpha_sum = 0.0;
  for (int64_t t = 0; t < num_partials; t++) dalpha_sum += partials[size_t(t * partial_size + 2 * C)];
  dalpha[0] += float(dalpha_sum);
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
