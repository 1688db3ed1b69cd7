#pragma once
// Whether the reference kernels are the active path (kernels/dispatch.hpp): NORMLAB_ISA=reference
// (or NORMLAB_KERNELS=reference) in the environment, or set_active_isa(Isa::reference). Its one
// caller is the optimizer's step, which then runs its plain per-tensor Adam loop instead of the
// threaded update. Benchmarks and provenance name the path with active_isa_name() instead.
namespace normlab::kernels::reference {

bool reference_kernels_enabled();

}  // namespace normlab::kernels::reference
