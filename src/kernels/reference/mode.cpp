#include "normlab/kernels/reference/mode.hpp"

#include "normlab/kernels/dispatch.hpp"

namespace normlab::kernels::reference {

bool reference_kernels_enabled() { return active_isa() == Isa::reference; }

}  // namespace normlab::kernels::reference
