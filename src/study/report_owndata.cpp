// Own-data compares (a data-defined task): the Answer in a classifier's words. Each variant's held-out
// accuracy and macro-F1 at the checkpoint eval and predict use, the bag-of-words baseline on the
// same files, and where each variant stands against the baseline and against the best variant
// (docs/compare.md, "Own data"). The loss-based first screen of the built-in tasks stays below it.
// The figures themselves (the kept checkpoints, the cells, the baseline) are report_owndata_figures.cpp's.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "report_owndata.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

namespace {

// The figures (report_owndata_figures.cpp).
using own_data::cached_baseline;
using own_data::Cell;
using own_data::cells_of;
using own_data::Figure;
using own_data::run_figures;

// "beats the baseline" / "below the baseline" / "level with the baseline" (docs/compare.md): every
// seed's run scored on the same held-out examples as the baseline, its macro-F1 interval (bootstrap
// over the examples) wholly above the baseline's, wholly below it, or neither in some seed.
std::string against_baseline(const Cell& cell, const train::BaselineScore& b) {
  int above = 0, below = 0, n = 0;
  for (const Figure& f : run_figures(cell)) {
    ++n;
    above += std::isfinite(f.low) && f.low > b.macro_f1_high;
    below += std::isfinite(f.high) && f.high < b.macro_f1_low;
  }
  if (n > 0 && above == n) return "beats the baseline";
  if (n > 0 && below == n) return "below the baseline";
  if (above == 0 && below == 0) return "level with the baseline";
  return fmt::format("level with the baseline (above it in {}, below in {} of {} seeds)", above, below, n);
}

// A difference with its direction: "lower by 0.039 (95% CI -0.219 to +0.141, 2 pairs)".
std::string signed_difference(const Interval& d) {
  return fmt::format("{} by {:.3f} (95% CI {:+.3f} to {:+.3f}, {} pairs)", d.mean < 0 ? "lower" : "higher",
                     std::abs(d.mean), d.low, d.high, d.n);
}

// A variant's name where a sentence could read it as a word: "none" is the variant without
// normalization, never "no variant".
std::string named(const Context& c, const std::string& variant) {
  return variant == "none" && variant_kind(c.plan, variant) == "none" ? "none (no normalization)" : variant;
}

std::string label_of(const Context& c, const Cell& cell) {
  return c.plan.settings.size() > 1 ? fmt::format("{} ({})", named(c, cell.row->variant), cell.row->setting)
                                    : named(c, cell.row->variant);
}

// "best" / "level with the best: lower by ..." / "behind the best: lower by ...": macro-F1 against
// the setting's best variant, paired by seed (two seeds on), else by the runs' own intervals.
std::string against_best(const Cell& cell, const Cell& best) {
  if (&cell == &best) return "best";
  std::vector<double> a, b;
  for (const auto& [seed, k] : cell.by_seed)
    if (const auto it = best.by_seed.find(seed); it != best.by_seed.end())
      a.push_back(k.macro_f1), b.push_back(it->second.macro_f1);
  if (a.size() >= 2) {
    const Interval d = paired_difference(a, b);
    return fmt::format("{} the best: {}", d.contains_zero() ? "level with" : "behind", signed_difference(d));
  }
  const double gap = cell.macro_f1.mean - best.macro_f1.mean;
  const bool apart =
      std::isfinite(cell.macro_f1.high) && std::isfinite(best.macro_f1.low) && cell.macro_f1.high < best.macro_f1.low;
  return fmt::format("{} the best: {} by {} (one seed: the runs' own intervals {})", apart ? "behind" : "level with",
                     gap < 0 ? "lower" : "higher", fmt_num(std::abs(gap)), apart ? "do not overlap" : "overlap");
}

// "the best checkpoint (held-out macro_f1; steps 3380–4420)" or "the last evaluation (step 400)".
std::string checkpoint_text(const std::vector<Cell>& cells) {
  int64_t lo = INT64_MAX, hi = -1, best = 0, last = 0;
  std::string metric;
  for (const Cell& cell : cells)
    for (const auto& [seed, k] : cell.by_seed) {
      lo = std::min(lo, k.step), hi = std::max(hi, k.step);
      (k.best ? best : last) += 1;
      if (k.best && metric.empty()) metric = k.metric;
    }
  if (hi < 0) return "no evaluation";
  const std::string steps = lo == hi ? fmt::format("step {}", lo) : fmt::format("steps {}–{}", lo, hi);
  if (last == 0)
    return fmt::format("each run's best checkpoint (best.safetensors, kept on held-out {}; {})", metric, steps);
  if (best == 0) return fmt::format("each run's last evaluation (checkpoint.safetensors; {})", steps);
  return fmt::format("each run's best checkpoint where it kept one ({} runs), else its last evaluation ({} runs); {}",
                     best, last, steps);
}

// The baseline's macro-F1 and accuracy with their intervals over the held-out examples.
std::string baseline_macro_f1(const train::BaselineScore& b) {
  return Figure{b.macro_f1, b.macro_f1_low, b.macro_f1_high, 1}.text();
}
std::string baseline_accuracy(const train::BaselineScore& b) {
  return Figure{b.accuracy, b.accuracy_low, b.accuracy_high, 1}.text();
}

// The setting's cell with the highest mean macro-F1 (nullptr: none in this setting).
const Cell* best_in_setting(const std::vector<Cell>& cells, const std::string& setting) {
  const Cell* best = nullptr;
  for (const Cell& cell : cells)
    if (cell.row->setting == setting && (!best || cell.macro_f1.mean > best->macro_f1.mean)) best = &cell;
  return best;
}

// Sentence 1: the figures, every variant's and the baseline's.
std::string figures_sentence(const Context& c, const std::vector<Cell>& cells,
                             const std::optional<train::BaselineScore>& baseline, const std::string& checkpoints) {
  std::vector<std::string> figures;
  for (const Cell& cell : cells)
    figures.push_back(fmt::format("{} {} and {}", label_of(c, cell), cell.macro_f1.text(), cell.accuracy.text()));
  if (baseline)
    figures.push_back(
        fmt::format("the bag-of-words baseline {} and {}", baseline_macro_f1(*baseline), baseline_accuracy(*baseline)));
  const size_t seeds = c.fewest_seeds;
  return fmt::format("Held-out macro-F1 and accuracy at each variant's best rate ({}, {}): {}.",
                     seeds >= 2 ? fmt::format("mean over {} seeds [95% CI]", seeds)
                                : "one seed [95% CI over the held-out examples]",
                     checkpoints, fmt::join(figures, "; "));
}

// Sentence 2: against the baseline, the variants grouped by outcome in the order the words are
// defined in (docs/compare.md); or why there is no baseline.
std::string baseline_sentence(const Context& c, const std::vector<Cell>& cells,
                              const std::optional<train::BaselineScore>& baseline) {
  if (!baseline)
    return c.plan.base.task.name == data::TaskKind::sequence_classification
               ? "No baseline: the base config's training or validation file cannot be read here."
               : "No baseline: the bag-of-words baseline classifies whole sequences, and this task tags tokens.";
  std::vector<std::pair<std::string, std::vector<std::string>>> by_word;
  for (const Cell& cell : cells) {
    const std::string word = against_baseline(cell, *baseline);
    auto it = std::find_if(by_word.begin(), by_word.end(), [&](const auto& w) { return w.first == word; });
    if (it == by_word.end()) it = by_word.insert(by_word.end(), {word, {}});
    it->second.push_back(label_of(c, cell));
  }
  std::vector<std::string> parts;
  bool any_beats = false;
  for (const auto& [word, names] : by_word) {
    const bool commas =
        std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.find(',') != n.npos; });
    parts.push_back(fmt::format("{} {}", fmt::join(names, commas ? " / " : ", "), word));
    any_beats = any_beats || word == "beats the baseline";
  }
  return fmt::format("Against the baseline (macro-F1 of every seed's run on the same examples): {}{}.",
                     fmt::join(parts, "; "), any_beats ? "" : " — no variant beats it");
}

// Sentence 3: against the best variant, per setting, and the cells the convergence gate flags.
std::string best_variant_sentence(const Context& c, const FirstScreenNumbers& numbers, const std::vector<Cell>& cells) {
  std::vector<std::string> ranks;
  for (const std::string& setting : c.plan.settings) {
    const Cell* best = best_in_setting(cells, setting);
    if (!best) continue;
    std::vector<std::string> others;
    for (const Cell& cell : cells)
      if (cell.row->setting == setting && &cell != best)
        others.push_back(fmt::format("{} {}", named(c, cell.row->variant), against_best(cell, *best)));
    ranks.push_back(fmt::format("the best is {}{}{}", named(c, best->row->variant),
                                c.plan.settings.size() > 1 ? " (" + setting + ")" : "",
                                others.empty() ? "" : fmt::format("; {}", fmt::join(others, "; "))));
  }
  std::string third = fmt::format("Macro-F1 against the best variant, paired by seed: {}.", fmt::join(ranks, ". "));
  if (const std::vector<const StudyRow*> unconverged = numbers.table.not_converged(); !unconverged.empty()) {
    std::vector<std::string> names;
    for (const StudyRow* r : unconverged) names.push_back(named(c, r->variant));
    third += fmt::format(" The convergence gate flags {} (details below).", fmt::join(names, ", "));
  }
  return third;
}

// One row of the table: a variant's rate, seeds, checkpoint, figures and both comparisons.
std::vector<std::string> cell_row(const Context& c, const Cell& cell, const Cell& best,
                                  const std::optional<train::BaselineScore>& baseline) {
  std::vector<std::string> row{cell.row->variant};
  if (c.plan.settings.size() > 1) row.push_back(cell.row->setting);
  int64_t lo = INT64_MAX, hi = -1;
  bool all_best = true;
  for (const auto& [seed, k] : cell.by_seed) lo = std::min(lo, k.step), hi = std::max(hi, k.step), all_best &= k.best;
  row.push_back(format_rate(cell.lr));
  row.push_back(fmt::format("{}", cell.by_seed.size()));
  row.push_back(fmt::format("{} ({})", all_best ? "best" : "last",
                            lo == hi ? fmt::format("step {}", lo) : fmt::format("steps {}–{}", lo, hi)));
  row.push_back(cell.macro_f1.text());
  row.push_back(cell.accuracy.text());
  row.push_back(baseline ? against_baseline(cell, *baseline) : "–");
  row.push_back(against_best(cell, best));
  return row;
}

// "Against the baseline": one row per variant and setting, then the baseline's.
Section baseline_section(const Context& c, const std::vector<Cell>& cells,
                         const std::optional<train::BaselineScore>& baseline, const std::string& checkpoints) {
  Section sec;
  sec.title = "Against the baseline";
  sec.text = fmt::format(
      "Held-out macro-F1 and accuracy of each variant at its best learning rate, from {}, beside the "
      "bag-of-words logistic regression (unigrams and bigrams: normlab baseline) fitted on the same "
      "training file and scored on the same validation set. Words: docs/compare.md, \"Own data\".",
      checkpoints);
  std::vector<std::vector<std::string>> rows;
  for (const std::string& setting : c.plan.settings) {
    const Cell* best = best_in_setting(cells, setting);
    for (const Cell& cell : cells)
      if (cell.row->setting == setting) rows.push_back(cell_row(c, cell, *best, baseline));
  }
  if (baseline) {
    std::vector<std::string> row{"baseline (bag of words)"};
    if (c.plan.settings.size() > 1) row.push_back("–");
    for (const std::string& v : {std::string("–"), std::string("–"), std::string("–"), baseline_macro_f1(*baseline),
                                 baseline_accuracy(*baseline), std::string("–"), std::string("–")})
      row.push_back(v);
    rows.push_back(row);
  }
  std::vector<std::string> header{"variant"};
  if (c.plan.settings.size() > 1) header.push_back("setting");
  for (const char* h : {"best lr", "seeds", "checkpoint", "macro-F1 [95% CI]", "accuracy [95% CI]",
                        "against the baseline", "against the best (macro-F1)"})
    header.push_back(h);
  sec.table_html = html_table(header, rows);
  sec.table_md = md_table(header, rows);
  return sec;
}

}  // namespace

bool is_own_data_report(const Context& c) {
  const data::TaskKind task = c.plan.base.task.name;
  return task == data::TaskKind::sequence_classification || task == data::TaskKind::token_classification;
}

OwnDataAnswer own_data_answer(const Context& c, const FirstScreenNumbers& numbers) {
  OwnDataAnswer out;
  const std::vector<Cell> cells = cells_of(c, numbers);
  if (cells.empty()) {
    out.verdict = {"No run has a held-out evaluation yet: nothing to judge."};
    return out;
  }
  const std::optional<train::BaselineScore> baseline = cached_baseline(c.plan.base);
  out.checkpoints = checkpoint_text(cells);
  out.verdict = {figures_sentence(c, cells, baseline, out.checkpoints), baseline_sentence(c, cells, baseline),
                 best_variant_sentence(c, numbers, cells)};
  out.section = baseline_section(c, cells, baseline, out.checkpoints);
  out.baseline = baseline.has_value();
  return out;
}

}  // namespace normlab::study::report_parts
