#pragma once
// What the own-data Answer's two files share (report_owndata_figures.cpp: each variant's kept
// figures and the baseline; report_owndata.cpp: the comparisons in words, the three sentences and
// the table). Not a public interface: own_data_answer (report_parts.hpp) is the only caller. Its own
// namespace, so that no name here meets one of another report file's in a unity batch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "normlab/train/baseline.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts::own_data {

// One run's figures at the checkpoint `normlab eval` and `predict` load: best.safetensors'
// evaluation (summary.json's best_checkpoint) when the run kept one, else its last evaluation.
struct Kept {
  int64_t step = -1;
  bool best = false;
  std::string metric;  // the kept metric ("loss", "macro_f1", ...); empty for the last evaluation
  double accuracy = NAN, macro_f1 = NAN;
  train::Confusion confusion;
};

// A figure over a cell's seeds: mean and 95% t interval from two seeds on; from one seed, the
// run's own interval over its held-out examples (Wilson, bootstrap).
struct Figure {
  double mean = NAN, low = NAN, high = NAN;
  size_t seeds = 0;
  std::string text() const {
    if (!std::isfinite(mean)) return "–";
    if (!std::isfinite(low)) return fmt_num(mean);
    return fmt::format("{} [{}, {}]", fmt_num(mean), fmt_num(std::max(0.0, low)), fmt_num(std::min(1.0, high)));
  }
};

// One variant at its best rate (the first screen's row): its runs' kept figures, by seed.
struct Cell {
  const StudyRow* row = nullptr;
  double lr = 0;
  std::map<uint64_t, Kept> by_seed;
  Figure accuracy, macro_f1;
  std::vector<double> values(double Kept::*field) const {
    std::vector<double> out;
    for (const auto& [seed, k] : by_seed) out.push_back(k.*field);
    return out;
  }
};

// One Cell per first-screen row (variant and setting) with at least one run's held-out
// evaluation, in the table's order; the rows without one are left out.
std::vector<Cell> cells_of(const Context& c, const FirstScreenNumbers& numbers);

// The baseline of the compare's base config, fitted once per process and data (a live report is
// redrawn many times); nullopt when its files no longer read or the task tags tokens.
std::optional<train::BaselineScore> cached_baseline(const train::RunConfig& base);

// Each run's macro-F1 with its interval over the held-out examples (bootstrap), by seed: one
// Figure per entry of cell.by_seed, in seed order.
std::vector<Figure> run_figures(const Cell& cell);

}  // namespace normlab::study::report_parts::own_data
