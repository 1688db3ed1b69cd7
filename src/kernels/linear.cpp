// Linear forward/backward: thin wiring of the GEMM variants, plus the bias terms.
#include "normlab/kernels/linear.hpp"
#include "isa_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "matmul_bias.hpp"
#include "normlab/kernels/matmul.hpp"

namespace normlab::kernels::NORMLAB_KERNEL_ISA {

namespace {
// dbias is summed in blocks of this many columns, one block per loop iteration: the partial sums
// of a block fit in registers, and rows are read in contiguous runs.
constexpr int64_t kBiasBlock = 32;
// The serial sum's blocks: as many columns as keep every adder busy without spilling (8 zmm on
// avx512, 8 ymm on avx2, 8 xmm on generic).
#if defined(__AVX512F__)
constexpr int64_t kSerialBiasBlock = 128;
#elif defined(__AVX2__)
constexpr int64_t kSerialBiasBlock = 64;
#else
constexpr int64_t kSerialBiasBlock = 32;
#endif

// The gradient at a ReLU's pre-activation from the gradient at its output: dout where the unit was
// on (out > 0, the same test as relu_backward's pre-activation > 0), else 0. Both arguments are
// read whatever out is: a conditional read would compile to a masked load.
inline float relu_grad(float out, float dout) { return out > 0.0f ? dout : 0.0f; }

// sum[o] (+)= d[n][o] over rows [0, N) in order, for the W columns of d (row stride OC) at `d`;
// with mask, d is relu_grad(mask, dout), also stored into `masked`. W a constant: GCC unrolls the
// columns and keeps the W sums in registers across the rows.
template <int64_t W>
void bias_grad_block(float* __restrict sum, const float* __restrict dout, const float* __restrict mask,
                     float* __restrict masked, int64_t N, int64_t OC) {
  float s[W];
  for (int64_t o = 0; o < W; o++) s[o] = sum[o];
  for (int64_t n = 0; n < N; n++) {
    const float* __restrict row = dout + n * OC;
    if (mask != nullptr) {
      const float* __restrict on = mask + n * OC;
      float* __restrict d = masked + n * OC;
      for (int64_t o = 0; o < W; o++) {
        const float v = relu_grad(on[o], row[o]);
        d[o] = v;
        s[o] += v;
      }
    } else {
      for (int64_t o = 0; o < W; o++) s[o] += row[o];
    }
  }
  for (int64_t o = 0; o < W; o++) sum[o] = s[o];
}

// On one thread: dbias[o] (+)= sum over n in order of d[n][o], d (N, OC), every column's chain
// from +0 as the threaded pipeline below sums it, the columns in blocks of kSerialBiasBlock held
// in registers over all the rows (the pipeline's blocks of 32 wait on the add latency row after
// row). With `mask` (a ReLU's output, (N, OC)), d is relu_grad(mask, dout) and is also stored
// into `masked` (the gradient at the pre-activation), in the same pass.
void bias_grad_serial(GradOut dbias, const float* __restrict dout, const float* __restrict mask,
                      float* __restrict masked, int64_t N, int64_t OC) {
  thread_local std::vector<float> t_sum;
  if (t_sum.size() < size_t(OC)) t_sum.resize(size_t(OC));
  float* __restrict sum = t_sum.data();
  for (int64_t o = 0; o < OC; o++) sum[o] = 0.0f;
  int64_t o0 = 0;
  for (; o0 + kSerialBiasBlock <= OC; o0 += kSerialBiasBlock)
    bias_grad_block<kSerialBiasBlock>(sum + o0, dout + o0, mask ? mask + o0 : nullptr, masked ? masked + o0 : nullptr,
                                      N, OC);
  // Then 64 columns at once where they fit (4 zmm on avx512; OC = 64 or 192 there), not two
  // blocks of 32, each of whose 2 chains waits on the add latency row after row.
  if constexpr (kSerialBiasBlock > 64)
    for (; o0 + 64 <= OC; o0 += 64)
      bias_grad_block<64>(sum + o0, dout + o0, mask ? mask + o0 : nullptr, masked ? masked + o0 : nullptr, N, OC);
  for (; o0 + kBiasBlock <= OC; o0 += kBiasBlock)
    bias_grad_block<kBiasBlock>(sum + o0, dout + o0, mask ? mask + o0 : nullptr, masked ? masked + o0 : nullptr, N, OC);
  for (; o0 < OC; o0++)
    bias_grad_block<1>(sum + o0, dout + o0, mask ? mask + o0 : nullptr, masked ? masked + o0 : nullptr, N, OC);
  float* db = dbias.data;
  for (int64_t o = 0; o < OC; o++) db[o] = dbias.accumulate ? db[o] + sum[o] : sum[o];
}
}  // namespace

void linear_forward(float* out,                                                // (N, OC)
                    const float* inp, const float* weight, const float* bias,  // (N, C), (OC, C), (OC)
                    int64_t N, int64_t C, int64_t OC) {
  if (bias == nullptr) {
    matmul_nt(out, inp, weight, N, C, OC, /*accumulate=*/false, /*parallel=*/true);
    return;
  }
  matmul_nt_bias(out, inp, weight, bias, /*residual=*/nullptr, N, C, OC, /*relu=*/false);
}

void linear_add_forward(float* out,                                                // (N, OC)
                        const float* inp, const float* weight, const float* bias,  // (N, C), (OC, C), (OC)
                        const float* residual,                                     // (N, OC)
                        int64_t N, int64_t C, int64_t OC) {
  matmul_nt_bias(out, inp, weight, bias, residual, N, C, OC, /*relu=*/false);
}

void linear_relu_forward(float* out,                                                // (N, OC)
                         const float* inp, const float* weight, const float* bias,  // (N, C), (OC, C), (OC)
                         int64_t N, int64_t C, int64_t OC) {
  matmul_nt_bias(out, inp, weight, bias, /*residual=*/nullptr, N, C, OC, /*relu=*/true);
}

void linear_relu_backward(GradOut dinp, GradOut dweight, GradOut dbias,  // (N, C), (OC, C), (OC)
                          const float* dout, const float* out,           // (N, OC), (N, OC)
                          const float* inp, const float* weight,         // (N, C), (OC, C)
                          int64_t N, int64_t C, int64_t OC) {
  // The gradient at the pre-activation: relu_grad(out, dout). The unfused graph adds it into a zeroed buffer,
  // which turns a -0 into +0; here a -0 stays, and changes nothing: every sum it enters below (the
  // GEMMs' fma chains, dbias) starts from +0, and +0 + -0 = +0.
  thread_local std::vector<float> t_dpre;
  const auto n = static_cast<size_t>(N * OC);
  if (t_dpre.size() < n) t_dpre.resize(n);
  float* dpre = t_dpre.data();  // (N, OC)
  // A resting pool (parallel.hpp) would run the parts on this thread: the one-thread pass then.
  if (dbias.data != nullptr && parallel_parts(N * OC >= kMinParallelElements && !pool_resting()) == 1) {
    // One thread: dpre and dbias (the column sums of dpre) in one pass over dout and out.
    bias_grad_serial(dbias, dout, out, dpre, N, OC);
    NORMLAB_KERNEL_ISA::linear_backward(dinp, dweight, GradOut{}, dpre, inp, weight, N, C, OC);
    return;
  }
  parallel_for(N * OC, N * OC >= kMinParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) dpre[i] = relu_grad(out[i], dout[i]);
  });
  // Qualified: by its GradOut arguments the call would also find the public, dispatching one.
  NORMLAB_KERNEL_ISA::linear_backward(dinp, dweight, dbias, dpre, inp, weight, N, C, OC);
}

void linear_backward(GradOut dinp, GradOut dweight, GradOut dbias,              // (N, C), (OC, C), (OC)
                     const float* dout, const float* inp, const float* weight,  // (N, OC), (N, C), (OC, C)
                     int64_t N, int64_t C, int64_t OC) {
  // dbias[o] (+)= sum_n dout[n][o], one float chain per column over n in order, so the result does
  // not depend on the thread count. The threads pass each chain along instead of splitting the
  // columns: thread t adds its own rows (the contiguous block of rows the GEMMs and row kernels
  // give it, so they are in its core's cache) to the partial sums thread t - 1 handed over, block
  // of 32 columns by block, and hands them on. Split by columns, each thread read every row, half
  // of them from the other core, and left those lines shared for the next kernel to write.
  const int64_t blocks = (OC + kBiasBlock - 1) / kBiasBlock;
  // A resting pool (parallel.hpp) would run the parts on this thread: the one-thread sum then.
  const int64_t team =
      dbias.data != nullptr ? parallel_parts(N * OC >= kMinParallelElements && !pool_resting()) : int64_t{1};
  // partial[b]: block b's sums after the rows of the threads that have passed it on; ready[b]: how
  // many threads have (written with release, read with acquire).
  thread_local std::vector<float> t_partial;
  if (team > 1 && t_partial.size() < size_t(blocks * kBiasBlock)) t_partial.resize(size_t(blocks * kBiasBlock));
  float* partial = t_partial.data();
  std::vector<std::atomic<int>> ready(static_cast<size_t>(team > 1 ? blocks : 0));
  for (auto& r : ready) r.store(0, std::memory_order_relaxed);
  // Part t's share of dbias: rows [n_begin, n_end). Part t waits for part t - 1 only: parts are
  // claimed in order, so part t - 1 has a thread.
  auto dbias_rows = [&](int64_t t, int64_t n_begin, int64_t n_end) {
    for (int64_t b = 0; b < blocks; b++) {
      const int64_t o_begin = b * kBiasBlock;
      const int64_t width = std::min(kBiasBlock, OC - o_begin);
      float sum[kBiasBlock] = {};
      if (t > 0) {
        // Spin: the previous thread is one block of its rows away. If it is not running (more
        // threads than free cores), give the core up now and then instead of spinning it away.
        for (int spins = 1; ready[size_t(b)].load(std::memory_order_acquire) < t; spins++)
          if (spins % 4096 == 0) std::this_thread::yield();
        for (int64_t o = 0; o < width; o++) sum[o] = partial[o_begin + o];
      }
      if (width == kBiasBlock) {
        // A constant trip count: GCC unrolls the block and keeps its sums in registers, where with
        // `width` it adds into the array on the stack and each row waits on the last row's store.
        for (int64_t n = n_begin; n < n_end; n++) {
          const float* dout_row = dout + n * OC + o_begin;  // (kBiasBlock)
          for (int64_t o = 0; o < kBiasBlock; o++) sum[o] += dout_row[o];
        }
      } else {
        for (int64_t n = n_begin; n < n_end; n++) {
          const float* dout_row = dout + n * OC + o_begin;  // (width)
          for (int64_t o = 0; o < width; o++) sum[o] += dout_row[o];
        }
      }
      if (t + 1 < team) {
        for (int64_t o = 0; o < width; o++) partial[o_begin + o] = sum[o];
        ready[size_t(b)].store(int(t + 1), std::memory_order_release);
      } else {
        float* db = dbias.data + o_begin;
        for (int64_t o = 0; o < width; o++) db[o] = dbias.accumulate ? db[o] + sum[o] : sum[o];
      }
    }
  };

  if (team > 1 && dinp.data != nullptr) {
    // dinp and dbias in one region, both split by rows: part t computes dinp's rows [r_t, r_t+1)
    // (the GEMM's rows, whose sums do not depend on the split) and its share of dbias's chains;
    // part 0 sums first and the others after their dinp rows, so that at 2 threads part 1 finds
    // part 0's sums ready (summing first, it waited for them block by block). From 3 threads on a
    // part t >= 2 may still wait for part t - 1's sums, which come after its dinp rows: speed
    // only, the chains' order is fixed. Row cuts on multiples of 8 rows: whole micro-tiles.
    auto row_cut = [&](int64_t t) { return t >= team ? N : std::min(N, (N * t / team + 4) / 8 * 8); };
    run_parts(team, [&](int64_t t) {
      const int64_t r0 = row_cut(t), r1 = row_cut(t + 1);
      if (t == 0) dbias_rows(t, r0, r1);
      if (r1 > r0)
        matmul_nn(dinp.data + r0 * C, dout + r0 * OC, weight, r1 - r0, OC, C, dinp.accumulate, /*parallel=*/false);
      if (t > 0) dbias_rows(t, r0, r1);
    });
  } else if (dinp.data != nullptr) {
    // dinp (N,C) (+)= dout (N,OC) @ weight (OC,C)
    matmul_nn(dinp.data, dout, weight, N, OC, C, dinp.accumulate, /*parallel=*/true);
  }
  // dweight (OC,C) (+)= dout^T @ inp: dout is stored (N,OC), i.e. (K,M) for matmul_tn with K = N.
  if (dweight.data != nullptr) matmul_tn(dweight.data, dout, inp, OC, N, C, dweight.accumulate, /*parallel=*/true);
  if (dbias.data == nullptr || (team > 1 && dinp.data != nullptr)) return;
  if (team == 1) {
    bias_grad_serial(dbias, dout, nullptr, nullptr, N, OC);
    return;
  }
  run_parts(team, [&](int64_t t) { dbias_rows(t, N * t / team, N * (t + 1) / team); });
}

}  // namespace normlab::kernels::NORMLAB_KERNEL_ISA
