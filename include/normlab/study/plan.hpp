#pragma once
// The LayerNorm study's plan: a grid of training runs (normalization variant x learning rate x seed x
// depth x warmup x any other config key), or a learning-rate search over them, read from a compare
// config (docs/compare.md):
//   {"base": "reverse.json" | {...a run config...} | "another-compare.json",  // relative to this file
//    "set":  {"train.steps": 400, ...},                // overrides for every run (optional)
//    "grid": {"variants": ["none", "post-ln", "pre-ln", "rmsnorm", "batchnorm", "rezero", "dyt"],
//             "lr": [0.001, 0.003], "seeds": [0, 1, 2], "layers": [4], "warmup": [true, false],
//             "train.batch_size": [4, 32]},            // any "section.key" is an axis too
//    "search": {"lr": {"from": 0.001, "to": 0.3, "points": 5, "rounds": 2}}}  // instead of grid.lr
// Every grid axis is optional (a missing axis keeps the base config's value). A "base" that is
// another compare config is that study with this file's set/grid/search keys over it.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "normlab/nn/variants.hpp"
#include "normlab/train/config.hpp"

namespace normlab::study {

// What each variant name sets in the run config: the table beside the registries (nn/variants.hpp).
using nn::block_formula;
using nn::find_variant;
using nn::known_variants;
using nn::Variant;
using nn::variant_of;
// The variant a model config trains (its model.norm, model.placement and model.residual).
std::string variant_of(const train::ModelConfig& model);

struct RunSpec {
  std::string name;                                        // directory name, e.g. "pre-ln_lr0.001_L4_warmup_s0"
  std::string variant;                                     // the series this run belongs to (a variant name or a label)
  std::vector<std::pair<std::string, std::string>> extra;  // other grid axes: key, value as in the name
  std::string setting;      // every axis but variant, lr and seed, e.g. "4 layers, no warmup, train.batch_size=4"
  train::RunConfig config;  // the run's config, parsed and validated once: what study and serve read
  // A compare plan's run as compare writes it to configs/NAME.json and trains it: the base file's
  // keys with the axes' values (the trainer fills in the defaults); null in a plan read back from
  // run directories.
  nlohmann::json config_file;
  std::string dir;  // the run directory

  // The study's built-in axes, read from the config (its one source of truth). Accessors rather
  // than config paths at ~100 call sites: they name the axes as the grid does, keep the seed
  // unsigned as ComparePlan::seeds is, and state once what "warmup" means (any warmup steps).
  double lr() const { return config.optim.lr; }
  int64_t layers() const { return config.model.num_layers; }
  bool warmup() const { return config.optim.warmup_steps > 0; }
  uint64_t seed() const { return uint64_t(config.train.seed); }
};

// The margins within which a difference counts as none (compare config key "equivalence"): held-out
// loss in nats, accuracy AUC and final accuracy as fractions.
struct EquivalenceMargins {
  double loss = 0.05, accuracy_auc = 0.02, accuracy = 0.02;
  bool from_config = false;  // false: the defaults above
};

// What a compare config's learning-rate search asked for and how far it has got: carried by the
// plan so that the scheduler, the report and the Answer see the same rounds. The search itself
// (rates, refinement, the logistic fit) is search.hpp.
struct LrSearchSpec {
  double from = 0, to = 0;  // the searched range of optim.lr, from < to
  int points = 0;           // round 0: this many log-spaced rates from..to (0: no search)
  int rounds = 0;           // refinement rounds after round 0
  int max_new = 0;          // at most this many new rates per variant and setting in one round
  // How far the convergence gate may extend the range when a variant's best rate is at its edge
  // (search.lr.min / search.lr.max; default from / to: no extension).
  double min = 0, max = 0;
  bool enabled() const { return points > 0; }

  // Where each variant and setting stands: rounds whose rates are known, and why it stops there.
  struct Block {
    std::string variant, setting;
    int rounds_known = 0;    // rounds expanded into runs (1 = round 0 only)
    bool settled = false;    // no further round: the outcomes stopped changing, or every round ran
    std::string waiting_on;  // when not settled: the first unfinished run the next round needs
  };
  std::vector<Block> blocks;
  // plan.runs[0, first_round_runs) are round 0 in grid order (a shard takes index I modulo K, as
  // in a grid); later rounds' runs follow and go to the shard their name hashes to.
  size_t first_round_runs = 0;
};

struct ComparePlan {
  std::string source;  // the compare config's path (or the run directories), for messages
  std::string title = "normlab compare report";
  EquivalenceMargins equivalence;
  train::RunConfig base;  // base run config after "set" (for `report`: the first run's config)
  std::vector<std::string> variants;
  std::vector<double> lrs;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> layers;
  std::vector<bool> warmups;
  std::vector<std::pair<std::string, std::vector<std::string>>> extra_axes;  // "train.batch_size": {"4", "32"}
  std::vector<std::string> settings;  // distinct RunSpec::setting values, in grid order
  std::vector<RunSpec> runs;          // the expanded grid, in a fixed order
  LrSearchSpec search;                // the learning-rate search, when the config has one (search.hpp)
};

// Reads and validates a compare config; every error is an InputError naming the file and key.
// A learning-rate search expands round 0, then each later round that the finished runs in
// out_dir/runs/ determine (none without out_dir); plan.search.blocks says where each one waits.
ComparePlan load_compare_plan(const std::string& path, const std::string& out_dir = "");

// How many runs the plan holds and why, in one sentence whose numbers multiply out: "Grid: 4
// variants × 9 learning rates × 5 seeds × 1 depths × 2 warmup settings = 360 runs." or, for a search,
// "Search: 4 variants × 2 settings × 5 seeds: round 0 at 5 rates from 0.003 to 0.3 (200 runs), then
// 30 runs at the rates each variant and setting's later rounds chose = 230 runs at 9 distinct rates."
std::string plan_size_sentence(const ComparePlan& plan);

// Whether `--shard I/K` trains plan.runs[run_index]: index I modulo K for a grid and a search's
// round 0; a later round's run by its name's hash, so that every shard agrees while the rounds grow.
bool in_shard(const ComparePlan& plan, size_t run_index, size_t shard_index, size_t shard_count);

// What a JSON config file is, judged by its top-level keys, so that a command given the other kind
// can say so before it reports a confusing key error.
enum class ConfigKind { run, compare, unknown };
ConfigKind config_kind(const std::string& path);

}  // namespace normlab::study
