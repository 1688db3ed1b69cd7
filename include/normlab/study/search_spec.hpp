#pragma once
// What a compare config's learning-rate search asked for and how far it has got: carried by the
// ComparePlan so that the scheduler, the report and the Answer see the same rounds. The search
// itself (rates, refinement, the logistic fit) is study/search.hpp.
#include <cstddef>
#include <string>
#include <vector>

namespace normlab::study {

struct LrSearchSpec {
  double from = 0, to = 0;  // the searched range of optim.lr, from < to
  int points = 0;           // round 0: this many log-spaced rates from..to (0: no search)
  int rounds = 0;           // refinement rounds after round 0
  int max_new = 0;          // at most this many new rates per variant and setting in one round
  bool enabled() const { return points > 0; }

  // Where each variant and setting stands: rounds whose rates are known, and why it stops there.
  struct Block {
    std::string variant, setting;
    int rounds_known = 0;  // rounds expanded into runs (1 = round 0 only)
    bool settled = false;  // no further round: the outcomes stopped changing, or every round ran
    std::string waiting_on;  // when not settled: the first unfinished run the next round needs
  };
  std::vector<Block> blocks;
  // plan.runs[0, first_round_runs) are round 0 in grid order (a shard takes index I modulo K, as
  // in a grid); later rounds' runs follow and go to the shard their name hashes to.
  size_t first_round_runs = 0;
};

}  // namespace normlab::study
