// The public kernels: each forwards to the build of the active path (dispatch.hpp). One relaxed
// atomic load and a switch per call; the kernels themselves run for microseconds at least.
#include "../isa_kernels.hpp"

#define NORMLAB_DISPATCH(name, ...)                           \
  switch (active_isa()) {                                     \
    case Isa::avx512: return avx512::name(__VA_ARGS__);       \
    case Isa::avx2: return avx2::name(__VA_ARGS__);           \
    case Isa::reference: return reference::name(__VA_ARGS__); \
    case Isa::generic: break;                                 \
  }                                                           \
  return generic::name(__VA_ARGS__)

namespace normlab::kernels {

void adam_update(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s) {
  NORMLAB_DISPATCH(adam_update, p, m, v, g, N, s);
}
void sums_of_squares(double* sums, const float* const* g, const int64_t* numel, int64_t count) {
  NORMLAB_DISPATCH(sums_of_squares, sums, g, numel, count);
}
double adam_update_sum_squares(float* p, float* m, float* v, const float* g, int64_t N, const AdamScalars& s) {
  NORMLAB_DISPATCH(adam_update_sum_squares, p, m, v, g, N, s);
}
bool all_finite(const float* x, int64_t N) { NORMLAB_DISPATCH(all_finite, x, N); }
void add_forward(float* out, const float* a, const float* b, int64_t N) { NORMLAB_DISPATCH(add_forward, out, a, b, N); }
void add_backward(GradOut dinp, const float* dout, int64_t N) { NORMLAB_DISPATCH(add_backward, dinp, dout, N); }
void relu_forward(float* out, const float* inp, int64_t N) { NORMLAB_DISPATCH(relu_forward, out, inp, N); }
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t N) {
  NORMLAB_DISPATCH(relu_backward, dinp, dout, inp, N);
}
void gelu_forward(float* out, const float* inp, int64_t N) { NORMLAB_DISPATCH(gelu_forward, out, inp, N); }
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N) {
  NORMLAB_DISPATCH(gelu_backward, dinp, dout, inp, N);
}
void dyt_forward(float* out, const float* inp, const float* alpha, const float* gamma, const float* beta, int64_t N,
                 int64_t C) {
  NORMLAB_DISPATCH(dyt_forward, out, inp, alpha, gamma, beta, N, C);
}
void dyt_backward(float* dinp, float* dalpha, float* dgamma, float* dbeta, const float* dout, const float* inp,
                  const float* alpha, const float* gamma, int64_t N, int64_t C) {
  NORMLAB_DISPATCH(dyt_backward, dinp, dalpha, dgamma, dbeta, dout, inp, alpha, gamma, N, C);
}

int64_t attention_cache_size(const int64_t* offsets, int64_t B, int64_t NH) {
  NORMLAB_DISPATCH(attention_cache_size, offsets, B, NH);
}
void attention_forward(float* out, float* att, const float* qkv, const int64_t* offsets, int64_t B, int64_t C,
                       int64_t NH) {
  NORMLAB_DISPATCH(attention_forward, out, att, qkv, offsets, B, C, NH);
}
void attention_backward(GradOut dqkv, const float* dout, const float* qkv, const float* att, const int64_t* offsets,
                        int64_t B, int64_t C, int64_t NH) {
  NORMLAB_DISPATCH(attention_backward, dqkv, dout, qkv, att, offsets, B, C, NH);
}

void batch_norm_forward_train(float* out, float* mean, float* rstd, float* running_mean, float* running_var,
                              const float* inp, const float* gamma, const float* beta, int64_t N, int64_t C, float eps,
                              float momentum, RankSum* ranks) {
  NORMLAB_DISPATCH(batch_norm_forward_train, out, mean, rstd, running_mean, running_var, inp, gamma, beta, N, C, eps,
                   momentum, ranks);
}
void batch_norm_forward_eval(float* out, const float* inp, const float* running_mean, const float* running_var,
                             const float* gamma, const float* beta, int64_t N, int64_t C, float eps) {
  NORMLAB_DISPATCH(batch_norm_forward_eval, out, inp, running_mean, running_var, gamma, beta, N, C, eps);
}
void batch_norm_backward(float* dinp, float* dgamma, float* dbeta, const float* dout, const float* inp,
                         const float* gamma, const float* mean, const float* rstd, int64_t N, int64_t C,
                         RankSum* ranks) {
  NORMLAB_DISPATCH(batch_norm_backward, dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, N, C, ranks);
}

float cross_entropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int64_t N,
                            int64_t V) {
  NORMLAB_DISPATCH(cross_entropy_forward, losses, probs, logits, targets, N, V);
}
void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N, int64_t V,
                            float dloss) {
  NORMLAB_DISPATCH(cross_entropy_backward, dlogits, probs, targets, N, V, dloss);
}

void dropout_forward(float* out, float* mask, const float* inp, const int64_t* offsets, int64_t B, int64_t C, float p,
                     uint64_t key, int64_t first_sequence) {
  NORMLAB_DISPATCH(dropout_forward, out, mask, inp, offsets, B, C, p, key, first_sequence);
}
void dropout_backward(float* dinp, const float* dout, const float* mask, int64_t N) {
  NORMLAB_DISPATCH(dropout_backward, dinp, dout, mask, N);
}

void embedding_forward(float* out, const int32_t* ids, const float* weight, int64_t N, int64_t V, int64_t C) {
  NORMLAB_DISPATCH(embedding_forward, out, ids, weight, N, V, C);
}
void embedding_backward(float* dweight, const float* dout, const int32_t* ids, int64_t N, int64_t V, int64_t C) {
  NORMLAB_DISPATCH(embedding_backward, dweight, dout, ids, N, V, C);
}

void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* gamma, const float* beta,
                        int64_t rows, int64_t cols, float eps) {
  NORMLAB_DISPATCH(layer_norm_forward, out, mean, rstd, inp, gamma, beta, rows, cols, eps);
}
void layer_norm_backward(float* dinp, float* dgamma, float* dbeta, const float* dout, const float* inp,
                         const float* gamma, const float* mean, const float* rstd, int64_t rows, int64_t cols) {
  NORMLAB_DISPATCH(layer_norm_backward, dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, rows, cols);
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC) {
  NORMLAB_DISPATCH(linear_forward, out, inp, weight, bias, N, C, OC);
}
void linear_backward(GradOut dinp, GradOut dweight, GradOut dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC) {
  NORMLAB_DISPATCH(linear_backward, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void linear_add_forward(float* out, const float* inp, const float* weight, const float* bias, const float* residual,
                        int64_t N, int64_t C, int64_t OC) {
  NORMLAB_DISPATCH(linear_add_forward, out, inp, weight, bias, residual, N, C, OC);
}
void linear_relu_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC) {
  NORMLAB_DISPATCH(linear_relu_forward, out, inp, weight, bias, N, C, OC);
}
void linear_relu_backward(GradOut dinp, GradOut dweight, GradOut dbias, const float* dout, const float* out,
                          const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC) {
  NORMLAB_DISPATCH(linear_relu_backward, dinp, dweight, dbias, dout, out, inp, weight, N, C, OC);
}

void matmul_nn(float* C, const float* A, const float* B, int64_t M, int64_t K, int64_t N, bool accumulate,
               bool parallel) {
  NORMLAB_DISPATCH(matmul_nn, C, A, B, M, K, N, accumulate, parallel);
}
void matmul_nt(float* C, const float* A, const float* B, int64_t M, int64_t K, int64_t N, bool accumulate,
               bool parallel) {
  NORMLAB_DISPATCH(matmul_nt, C, A, B, M, K, N, accumulate, parallel);
}
void matmul_tn(float* C, const float* A, const float* B, int64_t M, int64_t K, int64_t N, bool accumulate,
               bool parallel) {
  NORMLAB_DISPATCH(matmul_tn, C, A, B, M, K, N, accumulate, parallel);
}

void power_norm_forward(float* out, float* rstd, float* running_phi, const float* inp, const float* gamma,
                        const float* beta, int64_t N, int64_t C, float eps, float momentum) {
  NORMLAB_DISPATCH(power_norm_forward, out, rstd, running_phi, inp, gamma, beta, N, C, eps, momentum);
}
void power_norm_backward(float* dinp, float* dgamma, float* dbeta, float* grad_ema, const float* dout, const float* inp,
                         const float* gamma, const float* rstd, int64_t N, int64_t C, float momentum) {
  NORMLAB_DISPATCH(power_norm_backward, dinp, dgamma, dbeta, grad_ema, dout, inp, gamma, rstd, N, C, momentum);
}
void rms_norm_forward(float* out, float* rstd, const float* inp, const float* gamma, int64_t rows, int64_t cols,
                      float eps) {
  NORMLAB_DISPATCH(rms_norm_forward, out, rstd, inp, gamma, rows, cols, eps);
}
void rms_norm_backward(float* dinp, float* dgamma, const float* dout, const float* inp, const float* gamma,
                       const float* rstd, int64_t rows, int64_t cols) {
  NORMLAB_DISPATCH(rms_norm_backward, dinp, dgamma, dout, inp, gamma, rstd, rows, cols);
}

void softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols) {
  NORMLAB_DISPATCH(softmax_forward, out, inp, rows, cols);
}
void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols) {
  NORMLAB_DISPATCH(softmax_backward, dinp, dout, out, rows, cols);
}

}  // namespace normlab::kernels
