// The first screen's numbers per variant and setting (report_parts.hpp, CellNumbers): the best
// held-out loss and its rate, whether that rate converged, the learning-rate sensitivity, and the
// boundary with its ratio to no normalization.
//
// CONNECT: the convergence gate and the LR sensitivity belong to the study's statistics; until they
// are available they are computed here by these rules (docs/compare.md, "The first screen"):
//   capped loss   min(final held-out loss on trained lengths, ln K); a diverged run counts as ln K
//   best rate     the probed rate with the lowest mean capped loss over seeds
//   converged     the best rate is not the lowest or highest of >= 3 probed rates, and most of its
//                 seeds are not 'slow' (solved, or held-out loss no longer falling)
//   sensitivity   per seed, the mean over 33 log-spaced rates of the shared range (the highest
//                 lowest rate to the lowest highest rate of the setting's variants) of the capped
//                 loss, linear in ln lr between probes, minus the seed's best capped loss (Wortsman
//                 et al. 2023); mean [95% t] over seeds
#include <algorithm>
#include <cmath>

#include "report_parts.hpp"

namespace normlab::study::report_parts {

namespace {

// The capped loss of one seed at the rate `lr`, linear in ln lr between the probes that have it.
double capped_at(const CellNumbers& cell, size_t seed, double lr) {
  double below_lr = NAN, below = NAN, above_lr = NAN, above = NAN;
  for (size_t i = 0; i < cell.rates.size(); ++i) {
    const double v = cell.capped[i][seed];
    if (!std::isfinite(v)) continue;
    if (cell.rates[i] <= lr) below_lr = cell.rates[i], below = v;
    if (cell.rates[i] >= lr && !std::isfinite(above_lr)) above_lr = cell.rates[i], above = v;
  }
  if (!std::isfinite(below)) return above;
  if (!std::isfinite(above) || above_lr == below_lr) return below;
  const double t = std::log(lr / below_lr) / std::log(above_lr / below_lr);
  return below + t * (above - below);
}

void fill_cell(const Context& c, CellNumbers& cell) {
  const double ln_k = c.chance;
  for (double lr : c.plan.lrs) {
    const GroupSummary* g = c.group(cell.variant, lr, cell.setting);
    if (!g) continue;
    std::vector<double> per_seed(c.plan.seeds.size(), NAN);
    for (const RunResult* r : g->runs) {
      const auto at = std::find(c.plan.seeds.begin(), c.plan.seeds.end(), r->spec.seed);
      if (at == c.plan.seeds.end()) continue;
      const double loss = r->diverged ? INFINITY : r->finished ? r->final_trained().loss : NAN;
      per_seed[size_t(at - c.plan.seeds.begin())] = std::isnan(loss) ? NAN : std::min(loss, ln_k);
    }
    cell.rates.push_back(lr);
    cell.capped.push_back(per_seed);
  }
  double best_mean = INFINITY;
  for (size_t i = 0; i < cell.rates.size(); ++i) {
    std::vector<double> values;
    for (double v : cell.capped[i])
      if (std::isfinite(v)) values.push_back(v);
    if (values.empty()) continue;
    const Interval loss = t_interval(values);
    if (loss.mean < best_mean) best_mean = loss.mean, cell.best_lr = cell.rates[i], cell.best_loss = loss;
  }
  if (!std::isfinite(cell.best_lr)) return;
  cell.best_at_edge = cell.rates.size() >= 3 && (cell.best_lr == cell.rates.front() || cell.best_lr == cell.rates.back());
  if (const GroupSummary* g = c.group(cell.variant, cell.best_lr, cell.setting))
    for (const RunResult* r : g->runs) {
      const Outcome o = classify(*r);
      if (o == Outcome::unfinished || o == Outcome::not_evaluated) continue;
      ++cell.best_runs;
      if (o == Outcome::slow) ++cell.best_still_falling;
    }
}

void fill_sensitivity(CellNumbers& cell, double from, double to) {
  cell.sensitivity_from = from;
  cell.sensitivity_to = to;
  if (!(from < to) || !std::isfinite(cell.best_lr)) return;
  constexpr int kPoints = 33;
  std::vector<double> per_seed;
  for (size_t seed = 0; seed < (cell.capped.empty() ? 0 : cell.capped[0].size()); ++seed) {
    double best = INFINITY;
    for (const std::vector<double>& at_rate : cell.capped)
      if (std::isfinite(at_rate[seed])) best = std::min(best, at_rate[seed]);
    if (!std::isfinite(best)) continue;
    double sum = 0;
    for (int k = 0; k < kPoints; ++k) sum += capped_at(cell, seed, from * std::pow(to / from, k / double(kPoints - 1)));
    per_seed.push_back(sum / kPoints - best);
  }
  if (!per_seed.empty()) cell.sensitivity = t_interval(per_seed);
}

}  // namespace

const CellNumbers* FirstScreenNumbers::cell(const std::string& variant, const std::string& setting) const {
  for (const CellNumbers& n : cells)
    if (n.variant == variant && n.setting == setting) return &n;
  return nullptr;
}

FirstScreenNumbers first_screen_numbers(const Context& c) {
  FirstScreenNumbers out;
  if (c.plan.search.enabled()) out.boundaries = lr_boundaries(c.plan, c.groups);
  for (const std::string& setting : c.plan.settings) {
    const size_t first = out.cells.size();
    double from = 0, to = INFINITY;
    for (const std::string& variant : c.plan.variants) {
      CellNumbers cell;
      cell.variant = variant;
      cell.setting = setting;
      cell.kind = variant_kind(c.plan, variant);
      fill_cell(c, cell);
      if (cell.rates.empty()) continue;
      from = std::max(from, cell.rates.front());
      to = std::min(to, cell.rates.back());
      for (const VariantBoundary& vb : out.boundaries)
        if (vb.variant == variant && vb.setting == setting) cell.boundary = &vb;
      out.cells.push_back(std::move(cell));
    }
    const CellNumbers* none = nullptr;
    for (size_t i = first; i < out.cells.size(); ++i)
      if (out.cells[i].kind == "none") none = &out.cells[i];
    for (size_t i = first; i < out.cells.size(); ++i) {
      CellNumbers& cell = out.cells[i];
      fill_sensitivity(cell, from, to);
      if (none && &cell != none && cell.boundary && none->boundary &&
          cell.boundary->fit.kind == BoundaryFit::Kind::boundary && none->boundary->fit.kind == BoundaryFit::Kind::boundary)
        cell.to_none = boundary_ratio(cell.boundary->fit, none->boundary->fit);
    }
  }
  return out;
}

nlohmann::json first_screen_json(const FirstScreenNumbers& numbers) {
  const auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  const auto interval = [&](const Interval& i) {
    return nlohmann::json{{"mean", num(i.mean)}, {"low", i.has_interval() ? num(i.low) : nullptr},
                          {"high", i.has_interval() ? num(i.high) : nullptr}, {"n", i.n}};
  };
  nlohmann::json cells = nlohmann::json::array();
  for (const CellNumbers& n : numbers.cells)
    cells.push_back({{"variant", n.variant}, {"setting", n.setting}, {"best_lr", num(n.best_lr)},
                     {"best_loss", interval(n.best_loss)}, {"best_at_edge", n.best_at_edge},
                     {"best_runs", n.best_runs}, {"best_still_falling", n.best_still_falling}, {"converged", n.converged()},
                     {"lr_sensitivity", interval(n.sensitivity)},
                     {"lr_sensitivity_range", {num(n.sensitivity_from), num(n.sensitivity_to)}},
                     {"boundary_ratio_to_none", std::isfinite(n.to_none.ratio)
                                                    ? nlohmann::json{{"ratio", n.to_none.ratio}, {"low", n.to_none.low},
                                                                     {"high", n.to_none.high}}
                                                    : nlohmann::json(nullptr)}});
  return cells;
}

}  // namespace normlab::study::report_parts
