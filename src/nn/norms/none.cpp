// No normalization: the block has no norm layer, at either placement, and no final norm; what
// keeps the residual stream's scale in check, if anything, is the residual scheme (nn/residual_registry.hpp).
#include "normlab/nn/norm.hpp"

namespace normlab::nn {

NormEntry no_norm_entry() {
  return {.spec = {.name = "none",
                   .symbol = {},
                   .aliases = {},
                   .description = "no normalization at all",
                   .formula = "no normalization: x + f(x)",
                   .reference = {},
                   .make = {}},
          .torch = {},
          .variants = {{"none", "pre", "no normalization: x + f(x)", "#000000"}}};
}

}  // namespace normlab::nn
