#pragma once
// The compare grid's variant names (study/plan.hpp, "grid.variants"): each a point on the three
// choices of a block, normalization x placement x residual scheme, with the description and chart
// colour every report gives it. The names come from the registries' entries (nn/norm_registry.hpp,
// nn/residual_registry.hpp), so a new norm or scheme brings its own.
#include <string>
#include <vector>

namespace normlab::nn {

struct Variant {
  std::string name;       // "pre-ln"
  std::string norm;       // model.norm
  std::string placement;  // model.placement
  std::string residual;   // model.residual
  std::string description;
  std::string color;  // the variant's colour in every report, "#RRGGBB"
};

// Normalized variants in norm registry order, then the residual schemes', then those without a norm
// layer ("none"): the order of the grid's "choose from" list.
const std::vector<Variant>& known_variants();
const Variant* find_variant(const std::string& name);
// The variant a (norm, placement, residual) triple is, e.g. ("layernorm", "pre", "plain") -> "pre-ln";
// "" if none. A norm without a layer ignores the placement; model.norm "rezero" (a residual scheme's
// old spelling) is read as norm "none" with that scheme.
std::string variant_of(const std::string& norm, const std::string& placement, const std::string& residual = "plain");
// model.norm as configs spelled it before model.residual: "rezero" for ("none", "rezero"), else norm.
std::string norm_as_spelled(const std::string& norm, const std::string& residual);
// The residual block of that triple (block_formula in nn/encoder.hpp), e.g. "x = x + f(LN(x))"; "" for
// a norm or scheme the registries do not know.
std::string block_formula(const std::string& norm, const std::string& placement, bool final_norm,
                          const std::string& residual = "plain");

}  // namespace normlab::nn
