// Own-data compares: the figures the Answer's words are about. Each run's held-out accuracy and
// macro-F1 at the checkpoint eval and predict use, gathered per variant at its best rate with an
// interval over seeds (or over the held-out examples from one seed), and the bag-of-words baseline
// on the same files. The words, the sentences and the table are report_owndata.cpp's.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/train/baseline.hpp"
#include "report_owndata.hpp"

namespace normlab::study::report_parts::own_data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The run's Kept: its evaluation at summary.json's best_checkpoint step, else its last (step -1
// and NaN figures when it has none).
Kept kept_figures(const RunResult& r) {
  Kept k;
  if (r.evals.empty()) return k;
  const EvalPoint* point = &r.evals.back();
  std::error_code ec;
  const fs::path summary = fs::path(r.spec.dir) / "summary.json";
  if (!r.spec.dir.empty() && fs::is_regular_file(summary, ec)) {
    // read_run has read this file strictly already; here only its best_checkpoint is wanted.
    const json s = json::parse(io::read_file(summary.string(), size_t{1} << 24), nullptr, /*allow_exceptions=*/false);
    if (s.is_object() && s.contains("best_checkpoint") && s.at("best_checkpoint").is_object()) {
      const json& best = s.at("best_checkpoint");
      if (best.contains("step") && best.at("step").is_number_integer())
        for (const EvalPoint& e : r.evals)
          if (e.step == best.at("step").get<int64_t>()) {
            point = &e;
            k.best = true;
            k.metric =
                best.contains("metric") && best.at("metric").is_string() ? best.at("metric").get<std::string>() : "";
          }
    }
  }
  k.step = point->step;
  k.accuracy = point->trained.accuracy;
  k.macro_f1 = point->trained.macro_f1;
  k.confusion = point->trained_confusion;
  return k;
}

// The Figure of a cell's accuracies (f1 false) or macro-F1s (f1 true), one value and confusion
// matrix per seed.
Figure figure(const std::vector<double>& values, const std::vector<train::Confusion>& confusions, bool f1) {
  Figure f;
  f.seeds = values.size();
  if (values.size() >= 2) {
    const Interval i = t_interval(values);
    f.mean = i.mean, f.low = i.low, f.high = i.high;
  } else if (values.size() == 1) {
    f.mean = values.front();
    if (!confusions.front().empty()) {
      const train::HeldOutScore s = train::held_out_score(confusions.front());
      f.low = f1 ? s.macro_f1_low : s.accuracy_low;
      f.high = f1 ? s.macro_f1_high : s.accuracy_high;
    }
  }
  return f;
}

}  // namespace

// The rows' cells (report_owndata.hpp), each run read by kept_figures.
std::vector<Cell> cells_of(const Context& c, const FirstScreenNumbers& numbers) {
  std::vector<Cell> cells;
  for (const StudyRow& row : numbers.table.rows) {
    if (row.curve.empty()) continue;
    Cell cell;
    cell.row = &row;
    cell.lr = row.curve.best_lr();
    if (const GroupSummary* g = c.group(row.variant, cell.lr, row.setting))
      for (const RunResult* r : g->runs) {
        const Kept k = kept_figures(*r);
        if (std::isfinite(k.accuracy)) cell.by_seed[r->spec.seed()] = k;
      }
    if (cell.by_seed.empty()) continue;
    std::vector<train::Confusion> confusions;
    for (const auto& [seed, k] : cell.by_seed) confusions.push_back(k.confusion);
    cell.accuracy = figure(cell.values(&Kept::accuracy), confusions, false);
    cell.macro_f1 = figure(cell.values(&Kept::macro_f1), confusions, true);
    cells.push_back(std::move(cell));
  }
  return cells;
}

// The baseline of the compare's base config, fitted once per process and data (a live report is
// redrawn many times).
std::optional<train::BaselineScore> cached_baseline(const train::RunConfig& base) {
  static std::mutex mutex;
  static std::map<std::string, std::optional<train::BaselineScore>> cache;
  std::string key = train::to_json(base).dump();
  for (const auto& file : {base.task.train_file, base.task.valid_file}) {
    std::error_code ec;
    if (file)
      key += fmt::format("|{}", fs::file_size(*file, ec)),
          key += fmt::format("|{}", ec ? 0 : fs::last_write_time(*file, ec).time_since_epoch().count());
  }
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  std::optional<train::BaselineScore> score;
  try {
    score = train::config_baseline(base);
  } catch (const InputError&) {
    score = std::nullopt;  // the data no longer reads as it did: the report says the baseline is missing
  }
  return cache.emplace(key, score).first->second;
}

// Each run's macro-F1 with its interval over the held-out examples (bootstrap), by seed.
std::vector<Figure> run_figures(const Cell& cell) {
  std::vector<Figure> out;
  for (const auto& [seed, k] : cell.by_seed) {
    Figure f;
    f.mean = k.macro_f1;
    if (!k.confusion.empty()) {
      const train::HeldOutScore s = train::held_out_score(k.confusion);
      f.low = s.macro_f1_low, f.high = s.macro_f1_high;
    }
    out.push_back(f);
  }
  return out;
}

}  // namespace normlab::study::report_parts::own_data
