// Dot products and the softmax sum in double, as in every reference kernel.
#include "normlab/kernels/reference/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace normlab::kernels::reference {

int64_t attention_cache_size(const int64_t* offsets, int64_t B, int64_t NH) {
  int64_t size = 0;
  for (int64_t b = 0; b < B; b++) {
    const int64_t len = offsets[b + 1] - offsets[b];
    size += NH * len * len;
  }
  return size;
}

void attention_forward(float* out, float* att,                    // (T,C), (sum_b NH*len_b^2)
                       const float* qkv, const int64_t* offsets,  // (T,3C), (B+1)
                       int64_t B, int64_t C, int64_t NH) {
  const int64_t hd = C / NH;  // head size
  const double scale = 1.0 / std::sqrt(double(hd));
  int64_t att_base = 0;  // where sequence b's (NH, len, len) block of att starts
  for (int64_t b = 0; b < B; b++) {
    const int64_t start = offsets[b], len = offsets[b + 1] - offsets[b];
    std::vector<double> p(static_cast<size_t>(len));  // (len) one query row of probabilities
    for (int64_t h = 0; h < NH; h++) {
      for (int64_t i = 0; i < len; i++) {
        const float* q = qkv + (start + i) * 3 * C + h * hd;  // (hd) query i of head h
        // scores s_j = q . k_j / sqrt(hd), over the keys of this sequence only
        double maxval = -INFINITY;
        for (int64_t j = 0; j < len; j++) {
          const float* k = qkv + (start + j) * 3 * C + C + h * hd;  // (hd)
          double dot = 0.0;
          for (int64_t d = 0; d < hd; d++) dot += double(q[d]) * k[d];
          p[size_t(j)] = dot * scale;
          maxval = std::fmax(maxval, p[size_t(j)]);
        }
        // p = softmax(s): exp(s - max) / sum
        double sum = 0.0;
        for (int64_t j = 0; j < len; j++) {
          p[size_t(j)] = std::exp(p[size_t(j)] - maxval);
          sum += p[size_t(j)];
        }
        for (int64_t j = 0; j < len; j++) p[size_t(j)] /= sum;
        // out_i = sum_j p_j v_j, into head h's columns
        float* o = out + (start + i) * C + h * hd;  // (hd)
        for (int64_t d = 0; d < hd; d++) {
          double acc = 0.0;
          for (int64_t j = 0; j < len; j++) acc += p[size_t(j)] * qkv[(start + j) * 3 * C + 2 * C + h * hd + d];
          o[d] = float(acc);
        }
        if (att)
          for (int64_t j = 0; j < len; j++) att[att_base + (h * len + i) * len + j] = float(p[size_t(j)]);
      }
    }
    att_base += NH * len * len;
  }
}

void attention_backward(GradOut dqkv_out,                          // (T,3C)
                        const float* dout, const float* qkv,       // (T,C), (T,3C)
                        const float* att, const int64_t* offsets,  // (sum_b NH*len_b^2), (B+1)
                        int64_t B, int64_t C, int64_t NH) {
  float* dqkv = dqkv_out.data;
  // Overwriting: zeros first, then the same additions.
  if (!dqkv_out.accumulate) std::fill(dqkv, dqkv + (B > 0 ? offsets[B] : 0) * 3 * C, 0.0f);
  const int64_t hd = C / NH;
  const double scale = 1.0 / std::sqrt(double(hd));
  int64_t att_base = 0;
  for (int64_t b = 0; b < B; b++) {
    const int64_t start = offsets[b], len = offsets[b + 1] - offsets[b];
    std::vector<double> dp(static_cast<size_t>(len));  // (len) gradient of one row of probabilities
    for (int64_t h = 0; h < NH; h++) {
      for (int64_t i = 0; i < len; i++) {
        const float* p = att + att_base + (h * len + i) * len;  // (len) row i of the probabilities
        const float* dy = dout + (start + i) * C + h * hd;      // (hd) gradient of out_i, head h
        // out_i = sum_j p_j v_j:  dp_j = dy . v_j  and  dv_j += p_j dy
        for (int64_t j = 0; j < len; j++) {
          const float* v = qkv + (start + j) * 3 * C + 2 * C + h * hd;  // (hd)
          float* dv = dqkv + (start + j) * 3 * C + 2 * C + h * hd;      // (hd)
          double dot = 0.0;
          for (int64_t d = 0; d < hd; d++) {
            dot += double(dy[d]) * v[d];
            dv[d] += p[j] * dy[d];
          }
          dp[size_t(j)] = dot;
        }
        // through the softmax: ds_j = p_j (dp_j - sum_k p_k dp_k)
        double p_dot_dp = 0.0;
        for (int64_t j = 0; j < len; j++) p_dot_dp += p[j] * dp[size_t(j)];
        // s_j = q_i . k_j * scale:  dq_i += ds_j k_j scale  and  dk_j += ds_j q_i scale
        const float* q = qkv + (start + i) * 3 * C + h * hd;  // (hd)
        float* dq = dqkv + (start + i) * 3 * C + h * hd;      // (hd)
        for (int64_t j = 0; j < len; j++) {
          const double ds = p[j] * (dp[size_t(j)] - p_dot_dp) * scale;
          const float* k = qkv + (start + j) * 3 * C + C + h * hd;  // (hd)
          float* dk = dqkv + (start + j) * 3 * C + C + h * hd;      // (hd)
          for (int64_t d = 0; d < hd; d++) {
            dq[d] += float(ds * k[d]);
            dk[d] += float(ds * q[d]);
          }
        }
      }
    }
    att_base += NH * len * len;
  }
}

}  // namespace normlab::kernels::reference
