// The compare grid's variant table, assembled from the two registries' entries.
#include "normlab/nn/variants.hpp"

#include "normlab/nn/encoder.hpp"
#include "normlab/nn/residual_registry.hpp"

namespace normlab::nn {

const std::vector<Variant>& known_variants() {
  static const std::vector<Variant> variants = [] {
    std::vector<Variant> with_layer, without_layer;
    for (const NormEntry& entry : norm_registry())
      for (const NormVariant& v : entry.variants)
        (entry.spec.make ? with_layer : without_layer)
            .push_back({v.name, entry.spec.name, v.placement, "plain", v.description, v.color});
    for (const ResidualEntry& entry : residual_registry())
      for (const ResidualVariant& v : entry.variants)
        with_layer.push_back({v.name, v.norm, v.placement, entry.spec.name, v.description, v.color});
    with_layer.insert(with_layer.end(), without_layer.begin(), without_layer.end());
    return with_layer;
  }();
  return variants;
}

const Variant* find_variant(const std::string& name) {
  for (const Variant& v : known_variants())
    if (v.name == name) return &v;
  return nullptr;
}

std::string variant_of(const std::string& norm_name, const std::string& placement, const std::string& residual_name) {
  std::string norm = norm_name, residual = residual_name;
  if (const ResidualEntry* scheme = residual_spelled_as_norm(norm)) norm = "none", residual = scheme->spec.name;
  const NormEntry* entry = find_norm(norm);
  const bool placement_moot = entry != nullptr && !entry->spec.make;
  for (const Variant& v : known_variants())
    if (v.norm == norm && v.residual == residual && (v.placement == placement || placement_moot)) return v.name;
  return "";
}

std::string norm_as_spelled(const std::string& norm, const std::string& residual) {
  const ResidualEntry* scheme = find_residual(residual);
  return norm == "none" && scheme != nullptr && !scheme->norm_spelling.empty() ? scheme->norm_spelling : norm;
}

std::string block_formula(const std::string& norm_name, const std::string& placement, bool final_norm,
                          const std::string& residual_name) {
  std::string norm = norm_name, residual = residual_name;
  if (const ResidualEntry* scheme = residual_spelled_as_norm(norm)) norm = "none", residual = scheme->spec.name;
  if (find_norm(norm) == nullptr || find_residual(residual) == nullptr) return "";
  return block_formula(NormKind(norm), placement == "post" ? Placement::post : Placement::pre, final_norm,
                       ResidualKind(residual));
}

}  // namespace normlab::nn
