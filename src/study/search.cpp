// The learning-rate search (search.hpp): its config and the rates of each round. The logistic fit of
// P(learned) against ln lr is search_fit.cpp; the boundaries in the Answer's words, search_answer.cpp.
// The method and why is at the top of include/normlab/study/search.hpp.
#include "normlab/study/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "common.hpp"
#include "normlab/study/convergence.hpp"

namespace normlab::study {

using detail::fail;
using nlohmann::json;

namespace {

int read_int(const json& lr, const char* key, int fallback, int lo, int hi, const std::string& path) {
  if (!lr.contains(key)) return fallback;
  const json& v = lr.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    fail(path, std::string("search.lr.") + key,
         fmt::format("must be an integer in [{}, {}], got {}", lo, hi, v.dump()));
  return int(v.get<int64_t>());
}

double read_rate(const json& lr, const char* key, const std::string& path) {
  if (!lr.contains(key)) fail(path, std::string("search.lr.") + key, "missing (a learning rate in (0, 10])");
  const json& v = lr.at(key);
  if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 10)
    fail(path, std::string("search.lr.") + key, fmt::format("must be a number in (0, 10], got {}", v.dump()));
  return v.get<double>();
}

}  // namespace

LrSearchSpec parse_lr_search(const json& search, const std::string& path) {
  if (!search.is_object()) fail(path, "search", "must be an object: {\"lr\": {\"from\": ..., \"to\": ...}}");
  for (const auto& [key, value] : search.items())
    if (key != "lr") fail(path, "search." + key, "unknown key (the search has one axis: lr)");
  if (!search.contains("lr")) fail(path, "search.lr", "missing: {\"from\": ..., \"to\": ...}");
  const json& lr = search.at("lr");
  if (!lr.is_object()) fail(path, "search.lr", "must be an object with from, to (and points, rounds, max_new)");
  for (const auto& [key, value] : lr.items())
    if (key != "from" && key != "to" && key != "points" && key != "rounds" && key != "max_new" && key != "min" &&
        key != "max")
      fail(path, "search.lr." + key, "unknown key (expected from, to, points, rounds, max_new, min, max)");
  LrSearchSpec spec;
  spec.from = read_rate(lr, "from", path);
  spec.to = read_rate(lr, "to", path);
  if (!(round_rate(spec.from) < round_rate(spec.to)))
    fail(path, "search.lr.to",
         fmt::format("must be above from ({:g}) at 3 significant digits, got {:g}", spec.from, spec.to));
  spec.points = read_int(lr, "points", 5, 2, 16, path);
  spec.rounds = read_int(lr, "rounds", 2, 0, 8, path);
  spec.max_new = read_int(lr, "max_new", spec.points, 1, 16, path);
  // The convergence gate's room to extend the range: default none (min = from, max = to).
  spec.min = lr.contains("min") ? read_rate(lr, "min", path) : spec.from;
  spec.max = lr.contains("max") ? read_rate(lr, "max", path) : spec.to;
  if (spec.min > spec.from)
    fail(path, "search.lr.min", fmt::format("must be at most from ({:g}), got {:g}", spec.from, spec.min));
  if (spec.max < spec.to)
    fail(path, "search.lr.max", fmt::format("must be at least to ({:g}), got {:g}", spec.to, spec.max));
  return spec;
}

double round_rate(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) return lr;
  return std::stod(fmt::format("{:.3g}", lr));
}

std::vector<double> initial_rates(const LrSearchSpec& spec) {
  std::vector<double> rates;
  const double lo = std::log(spec.from), hi = std::log(spec.to);
  for (int i = 0; i < spec.points; ++i) {
    const double rate = round_rate(std::exp(lo + (hi - lo) * i / (spec.points - 1)));
    if (rates.empty() || rate > rates.back()) rates.push_back(rate);
  }
  return rates;
}

bool learned_by(const RunResult& run, LearnedRule rule) {
  const Outcome o = classify(run);
  if (rule == LearnedRule::slow_inclusive) return has_learned(o);
  return o == Outcome::solved || o == Outcome::learned || (o == Outcome::slow && at_learned_level(run));
}

RateOutcome rate_outcome(double lr, const std::vector<const RunResult*>& runs, LearnedRule rule) {
  RateOutcome out;
  out.lr = lr;
  for (const RunResult* r : runs) {
    const Outcome o = classify(*r);
    if (o == Outcome::unfinished || o == Outcome::not_evaluated) continue;
    ++out.runs;
    if (learned_by(*r, rule)) ++out.learned;
  }
  return out;
}

std::vector<double> extension_rates(const std::vector<double>& tested, double best_lr, const LrSearchSpec& spec) {
  if (tested.size() < 2 || !std::isfinite(best_lr) || spec.points < 2) return {};
  // One round-0 step: the ratio between neighbouring rates of round 0.
  const double step = std::pow(spec.to / spec.from, 1.0 / double(spec.points - 1));
  std::vector<double> out;
  if (best_lr == tested.front()) {
    const double lower = round_rate(std::max(tested.front() / step, spec.min));
    if (lower < tested.front() && lower >= round_rate(spec.min)) out.push_back(lower);
  }
  if (best_lr == tested.back()) {
    const double upper = round_rate(std::min(tested.back() * step, spec.max));
    if (upper > tested.back() && upper <= round_rate(spec.max)) out.push_back(upper);
  }
  return out;
}

size_t peak_index(const std::vector<RateOutcome>& tested) {
  size_t best = 0;
  for (size_t i = 1; i < tested.size(); ++i)
    if (tested[i].fraction() > tested[best].fraction()) best = i;
  return best;
}

std::vector<double> refine_rates(const std::vector<RateOutcome>& tested, int max_new) {
  if (tested.size() < 2) return {};
  const size_t peak = peak_index(tested);
  if (!mostly_learned(tested[peak])) return {};  // never learned: no upper boundary to find
  // (|fraction difference|, pair index, midpoint) of each pair worth a point.
  std::vector<std::tuple<double, size_t, double>> pairs;
  for (size_t i = peak; i + 1 < tested.size(); ++i) {
    const double diff = std::abs(tested[i].fraction() - tested[i + 1].fraction());
    if (tested[i].learned * tested[i + 1].runs == tested[i + 1].learned * tested[i].runs) continue;
    const double mid = round_rate(std::sqrt(tested[i].lr * tested[i + 1].lr));
    if (mid > tested[i].lr && mid < tested[i + 1].lr) pairs.emplace_back(diff, i, mid);
  }
  std::stable_sort(pairs.begin(), pairs.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  if (pairs.size() > size_t(std::max(0, max_new))) pairs.resize(size_t(std::max(0, max_new)));
  std::vector<double> rates;
  for (const auto& p : pairs) rates.push_back(std::get<2>(p));
  std::sort(rates.begin(), rates.end());
  return rates;
}

}  // namespace normlab::study
