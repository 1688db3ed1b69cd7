// The variable-length lesson, measured on the trained models themselves: the same BatchNorm and
// LayerNorm checkpoints evaluated with BatchNorm's running averages; with each evaluation batch's own
// statistics at the training batch size, once over batches of trained lengths only (in-distribution
// batch dependence) and once over the whole held-out set, where unseen lengths share the batches
// (contamination from unseen lengths); and with batch statistics over one sequence at a time.
// LayerNorm's statistics are per token, so its rows are the same model computing the same function;
// BatchNorm's answer depends on what else is in the batch.
#include "normlab/study/batch_eval.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "normlab/parallel.hpp"
#include "normlab/train/saved_run.hpp"

namespace normlab::study {

namespace {

// The run's trained or unseen lengths (a single-length regime: only the lengths its batches held).
HeldOut group_of(const train::EvalMetrics& metrics, bool unseen, const RunResult& run) {
  std::vector<BucketResult> buckets;
  for (const train::BucketMetrics& b : metrics.buckets)
    buckets.push_back(
        {b.bucket.min_len, b.bucket.max_len, b.bucket.beyond_train_max, b.loss, b.accuracy, b.sequences, b.targets});
  if (run.single_length && run.longest_trained > 0)
    return held_out_of(buckets, unseen, run.shortest_trained, run.longest_trained);
  return held_out_of(buckets, unseen);
}

// The sequences of a training batch: what its step records logged when the length regime chose
// them (a single-length batch holds as many as match the mixed batch's tokens), else train.batch_size.
int64_t training_batch_sequences(const RunResult& run) {
  const int64_t configured = run.spec.config.train.batch_size;
  const bool regime_chose = run.spec.config.task.length_regime != data::LengthRegime::mixed;
  return regime_chose && run.typical_batch_sequences() > 0 ? run.typical_batch_sequences() : configured;
}

}  // namespace

std::vector<BatchEvalMode> batch_eval_modes(int64_t train_batch_size) {
  return {{"running averages", train_batch_size, false, "every held-out sequence", false},
          {"batch statistics", train_batch_size, true, "trained lengths only: in-distribution", true},
          {"batch statistics", train_batch_size, true, "trained + unseen lengths mixed: contamination", false},
          {"batch statistics", 1, true, "one sequence at a time", false}};
}

std::vector<BatchEvalCell> batch_dependence(const ComparePlan& plan, const std::vector<RunResult>& results,
                                            const std::vector<GroupSummary>& groups,
                                            const std::function<bool()>& stop_requested) {
  std::vector<BatchEvalCell> out;
  // Small models, batches down to one sequence: one thread avoids a fork/join per tiny kernel (the
  // numbers are the same bits at any thread count).
  struct OneThread {
    int before = num_threads();
    OneThread() { set_num_threads(1); }
    ~OneThread() { set_num_threads(before); }
  } one_thread;
  std::string bn_label;
  for (const std::string& label : plan.variants)
    if (bn_label.empty() && variant_kind(plan, label) == "batchnorm") bn_label = label;
  const std::string reference = reference_variant(plan);
  if (bn_label.empty() || variant_kind(plan, reference) == "batchnorm") return out;
  for (const std::string& setting : plan.settings) {
    // The highest rate at which most seeds of both solved, else learned, else the lowest of the grid.
    auto mostly = [&](const std::string& variant, double lr, bool solved) {
      for (const GroupSummary& g : groups)
        if (g.variant == variant && g.setting == setting && g.lr == lr)
          return solved ? 2 * g.solved > int(g.runs.size()) : g.mostly_learned();
      return false;
    };
    double lr = NAN;
    for (const bool solved : {true, false}) {
      for (double candidate : plan.lrs)
        if (mostly(bn_label, candidate, solved) && mostly(reference, candidate, solved) && !(candidate <= lr))
          lr = candidate;
      if (std::isfinite(lr)) break;
    }
    if (!std::isfinite(lr)) lr = plan.lrs.empty() ? 0 : *std::min_element(plan.lrs.begin(), plan.lrs.end());
    for (const std::string& variant : {reference, bn_label}) {
      const std::vector<BatchEvalMode> modes = [&] {
        for (const RunResult& r : results)
          if (r.spec.variant == variant && r.spec.setting == setting && r.spec.lr() == lr)
            return batch_eval_modes(training_batch_sequences(r));
        return batch_eval_modes(32);
      }();
      for (const BatchEvalMode& mode : modes) {
        BatchEvalCell cell{variant, setting, lr, mode, {}, {}, {}};
        for (const RunResult& r : results) {
          if (r.spec.variant != variant || r.spec.setting != setting || r.spec.lr() != lr) continue;
          if (!r.finished || r.diverged) continue;
          // Only runs that left a model behind (hand-made or pruned directories have none).
          if (r.spec.dir.empty() ||
              !std::filesystem::exists(std::filesystem::path(r.spec.dir) / "checkpoint.safetensors"))
            continue;
          if (stop_requested && stop_requested()) throw ReportStopped{};
          train::LoadedRun run = train::load_run(r.spec.dir);
          train::EvalSettings settings;
          settings.batch_size = mode.batch_size;
          settings.batch_statistics = mode.batch_statistics;
          settings.trained_lengths_only = mode.trained_lengths_only;
          const train::RunEvaluation eval = train::evaluate_run(run, std::nullopt, settings);
          cell.trained.push_back(group_of(eval.metrics, false, r).accuracy);
          cell.unseen.push_back(group_of(eval.metrics, true, r).accuracy);
          cell.seeds.push_back(r.spec.seed());
        }
        if (!cell.seeds.empty()) out.push_back(std::move(cell));
      }
    }
  }
  return out;
}

}  // namespace normlab::study
