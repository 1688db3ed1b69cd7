#include "normlab/kernels/reference/mode.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "normlab/error.hpp"

namespace normlab::kernels::reference {

bool reference_kernels_enabled() {
  const char* value = std::getenv("NORMLAB_KERNELS");
  if (value == nullptr) return false;
  const std::string_view kernels(value);
  if (kernels.empty() || kernels == "fast") return false;
  if (kernels == "reference") return true;
  throw InputError(fmt::format("environment variable NORMLAB_KERNELS: unknown value '{}' (expected 'reference' or "
                               "'fast')",
                               kernels));
}

}  // namespace normlab::kernels::reference
