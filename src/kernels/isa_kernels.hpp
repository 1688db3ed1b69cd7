#pragma once
// The four builds of every kernel, each in its own namespace with the public signature:
//   reference  src/kernels/reference/*.cpp, the plain loops (compiled once)
//   generic, avx2, avx512  src/kernels/*.cpp compiled once per path (CMakeLists.txt), each defining
//              its functions in normlab::kernels::NORMLAB_KERNEL_ISA
// This header declares all four sets, so a build whose signature drifts from the public one fails
// to compile or link; src/kernels/dispatch/entry_points.cpp defines the public normlab::kernels
// functions, each a switch on active_isa().
#include "normlab/kernels/activations.hpp"
#include "normlab/kernels/adam.hpp"
#include "normlab/kernels/add.hpp"
#include "normlab/kernels/attention.hpp"
#include "normlab/kernels/batch_norm.hpp"
#include "normlab/kernels/cross_entropy.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/kernels/dropout.hpp"
#include "normlab/kernels/embedding.hpp"
#include "normlab/kernels/layer_norm.hpp"
#include "normlab/kernels/linear.hpp"
#include "normlab/kernels/matmul.hpp"
#include "normlab/kernels/power_norm.hpp"
#include "normlab/kernels/rms_norm.hpp"
#include "normlab/kernels/softmax.hpp"
#include "normlab/parallel.hpp"

namespace normlab::kernels {
// Below this many elements a kernel's loop runs on the calling thread: waking the team costs more
// than the loop. The result is the same either way (every split is over independent rows or
// elements, or reduced in a fixed order).
inline constexpr int64_t kMinParallelElements = int64_t{1} << 15;
}  // namespace normlab::kernels

// Every dispatched kernel, by name.
#define NORMLAB_KERNEL_LIST(X)                                                                                        \
  X(adam_update) X(sums_of_squares)                                                                                  \
  X(adam_update_sum_squares) X(all_finite)                                                                           \
  X(add_forward) X(add_backward)                                                                                     \
  X(relu_forward) X(relu_backward) X(gelu_forward) X(gelu_backward) X(dyt_forward) X(dyt_backward)                    \
      X(attention_cache_size) X(attention_forward) X(attention_backward) X(batch_norm_forward_train)                  \
          X(batch_norm_forward_eval) X(batch_norm_backward) X(cross_entropy_forward) X(cross_entropy_backward)        \
              X(dropout_forward) X(dropout_backward) X(embedding_forward) X(embedding_backward) X(layer_norm_forward) \
                  X(layer_norm_backward) X(linear_forward) X(linear_backward) X(linear_add_forward)                   \
                      X(linear_relu_forward) X(linear_relu_backward) X(matmul_nn) X(matmul_nt) X(matmul_tn)           \
                          X(rms_norm_forward) X(rms_norm_backward) X(power_norm_forward) X(power_norm_backward)       \
                              X(softmax_forward) X(softmax_backward)

// Declares `name` with the type of the public normlab::kernels::name (no default arguments: calls
// between kernels of one path pass every argument).
#define NORMLAB_DECLARE_ISA_KERNEL(name) decltype(::normlab::kernels::name) name;

namespace normlab::kernels::reference {
NORMLAB_KERNEL_LIST(NORMLAB_DECLARE_ISA_KERNEL)
}
namespace normlab::kernels::generic {
NORMLAB_KERNEL_LIST(NORMLAB_DECLARE_ISA_KERNEL)
}
namespace normlab::kernels::avx2 {
NORMLAB_KERNEL_LIST(NORMLAB_DECLARE_ISA_KERNEL)
}
namespace normlab::kernels::avx512 {
NORMLAB_KERNEL_LIST(NORMLAB_DECLARE_ISA_KERNEL)
}

#undef NORMLAB_DECLARE_ISA_KERNEL
