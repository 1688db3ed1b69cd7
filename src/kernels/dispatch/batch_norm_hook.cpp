// data-parallel: the sync-BatchNorm hook (kernels/batch_norm.hpp) lives outside the per-path
// kernel sources, so that every kernel path sees the one hook dist/ sets.
#include "normlab/kernels/batch_norm.hpp"

namespace normlab::kernels {

namespace {
BatchNormSumHook g_sum_hook = nullptr;
}  // namespace

void set_batch_norm_sum_hook(BatchNormSumHook hook) { g_sum_hook = hook; }
BatchNormSumHook batch_norm_sum_hook() { return g_sum_hook; }

}  // namespace normlab::kernels
