#pragma once
// Whether the reference kernels are the active path (kernels/dispatch.hpp): NORMLAB_ISA=reference
// (or NORMLAB_KERNELS=reference) in the environment, or set_active_isa(Isa::reference). For the
// few places outside the kernels that have a plain version of their own (the optimizer's Adam
// loop) or say which kernels ran (benchmarks, provenance).
namespace normlab::kernels::reference {

bool reference_kernels_enabled();

}  // namespace normlab::kernels::reference
