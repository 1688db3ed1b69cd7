#pragma once
// How a run ended (solved / learned / slow / weak / at chance / collapsed / attention entropy
// collapse / logit divergence / exploded / diverged), judged on held-out data of trained lengths and
// the run's own diagnostics, with the evidence.
#include <cstddef>
#include <string>
#include <vector>

#include "normlab/study/results.hpp"

namespace normlab::study {

// How a run ended and, when it did not learn, how it failed: judged on held-out data of trained
// lengths (eval mode) and the run's own diagnostics. docs/compare.md defines each word and the
// order of precedence (the order classify tests them in):
//   unfinished, diverged, not evaluated, exploded (by loss), solved, slow, learned, exploded (by
//   residual RMS), logit divergence, attention entropy collapse, collapsed, weak, at chance.
// The last two words from the attention and output diagnostics are study/instability.hpp's.
// c = Baseline::chance_accuracy(), a = trained accuracy at the last evaluation.
enum class Outcome {
  unfinished,
  not_evaluated,
  diverged,
  exploded,
  logit_divergence,
  entropy_collapse,
  collapsed,
  at_chance,
  weak,
  slow,
  learned,
  solved
};
inline constexpr double kSolvedAccuracy = 0.95;     // solved: a >= 0.95
inline constexpr double kLearnedShare = 0.25;       // learned: a >= c + 0.25 (1 - c)
inline constexpr double kChanceShare = 0.05;        // at chance: a < c + 0.05 (1 - c); weak: between
inline constexpr double kBlowUpFactor = 2.0;        // exploded: held-out loss > 2 ln K (worse than guessing)
inline constexpr double kExplodeRmsFactor = 100.0;  // exploded: a block's residual RMS > 100x its first value
// collapsed: the early blocks' (the first half's) largest gradient norm < 1e-2 x the last block's
// at the last diagnostics step, with a < c + 0.05 (1 - c) or predictions constant (>= 0.9 of them
// the same label). In the demo grid the collapsed post-LN runs end at 1e-5..6e-3, every other run
// at >= 0.6: the threshold sits two decades from both.
inline constexpr double kCollapseGradRatio = 1e-2;
inline constexpr double kConstantPredictionShare = 0.9;
// slow: short of solved, a >= c + 0.05 (1 - c), and the held-out loss fell at each of the last
// 3 evaluations and by >= 5% over them: still improving when the budget ended.
inline constexpr size_t kSlowEvaluations = 3;
inline constexpr double kSlowDrop = 0.05;
Outcome classify(const RunResult& run);
const char* outcome_name(Outcome outcome);
// Learned for "most seeds", stable ranges and boundaries: learned, solved, or slow (above chance
// and still improving at the end: short of budget, not unstable).
inline bool has_learned(Outcome o) { return o == Outcome::learned || o == Outcome::solved || o == Outcome::slow; }

// How a group of runs (usually one cell's seeds) ended, with the evidence from their diagnostics,
// one clause per outcome that is not learned / solved, e.g. "collapsed in 5/5 — blocks 0–2
// gradient norms 1e-07–1e-06 by step 100 (block 5: 0.04)", "slow in 3/3 — held-out loss still
// falling, 1.21 → 1.05 over steps 400–600". "" when every run learned.
std::string describe_failures(const std::vector<const RunResult*>& runs);
// The same for the runs that did not learn (`failing`) out of `of` runs in all ("collapsed in
// 3/20 — ..."), so that every clause counts against the group it describes and the clauses add up
// to failing.size(). A slow run here is one the strict rule does not count as learned: its clause
// reads "slow below the learned level".
std::string describe_failures(const std::vector<const RunResult*>& failing, size_t of);
// a >= c + kLearnedShare (1 - c) at the last evaluation, whatever the trend (false when diverged,
// unfinished or never evaluated).
bool at_learned_level(const RunResult& run);
// The evidence for one run's outcome ("" for learned / solved / unfinished).
std::string outcome_evidence(const RunResult& run);
// The evidence for runs that all ended in `outcome`, e.g. "blocks 0–2 gradient norms 1e-07–1e-06
// by step 100 (block 5: 0.04)".
std::string outcome_evidence(Outcome outcome, const std::vector<const RunResult*>& runs);

}  // namespace normlab::study
