// normlab eval --run DIR [--data FILE] [--json] [--no-baseline]
#include <fmt/core.h>

#include <filesystem>
#include <memory>
#include <vector>
#include <optional>
#include <string>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/io/text.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/baseline.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::cli {

namespace {

struct EvalOptions {
  std::string run_dir;
  std::string data;
  bool json = false;
  std::optional<int64_t> batch_size;  // default: train.batch_size
  bool batch_stats = false;
  std::string checkpoint;  // "", "best" or "last"
  bool no_baseline = false;
};

}  // namespace

// A compare output directory given where one run is expected: say what it is and list its runs.
void refuse_compare_dir(const std::string& dir, const char* verb) {
  if (!study::is_compare_dir(dir)) return;
  const std::vector<std::string> runs = study::compare_dir_runs(dir);
  std::string names;
  for (size_t i = 0; i < runs.size() && i < 8; ++i)
    names += (i ? ", " : "") + std::filesystem::path(runs[i]).filename().string();
  if (runs.size() > 8) names += fmt::format(", ... ({} in all)", runs.size());
  throw InputError(
      fmt::format("{}: is a compare output directory, not a run; its runs are in {}/runs/: {}. Give one, "
                  "e.g. normlab {} --run {}/runs/{} (or draw them all: normlab report {} --out DIR)",
                  dir, dir, names.empty() ? "(none yet)" : names, verb, dir,
                  runs.empty() ? "NAME" : std::filesystem::path(runs[0]).filename().string(), dir));
}

void add_checkpoint_option(CLI::App& cmd, std::string& choice) {
  cmd.add_option("--checkpoint", choice,
                 "best (best.safetensors: the best held-out evaluation, train.keep_best) or last "
                 "(checkpoint.safetensors); default: best when the run kept one")
      ->check(CLI::IsMember({"best", "last"}));
}

train::CheckpointChoice checkpoint_choice(const std::string& choice) {
  return choice == "best"   ? train::CheckpointChoice::best
         : choice == "last" ? train::CheckpointChoice::last
                            : train::CheckpointChoice::automatic;
}

namespace {

// The model's and the baseline's held-out accuracy and macro-F1 with 95% intervals, one row each.
void print_score_rows(const train::HeldOutScore& model, const std::optional<train::BaselineScore>& baseline,
                      const train::LoadedRun& loaded) {
  fmt::print("\n{:<34} {:>8}  {:<26} {:<26}\n", "", "examples", "accuracy [95% interval]", "macro-F1 [95% interval]");
  auto row = [](const std::string& name, int64_t n, double a, double a_lo, double a_hi, double f, double f_lo,
                double f_hi) {
    fmt::print("{:<34} {:>8}  {:.4f} [{:.4f}, {:.4f}]   {:.4f} [{:.4f}, {:.4f}]\n", name, n, a, a_lo, a_hi, f, f_lo,
               f_hi);
  };
  row(fmt::format("model ({}, step {})", loaded.is_best ? "best" : "last", loaded.step), model.examples, model.accuracy,
      model.accuracy_low, model.accuracy_high, model.macro_f1, model.macro_f1_low, model.macro_f1_high);
  if (baseline)
    row("baseline (bag of words, bigrams)", baseline->examples, baseline->accuracy, baseline->accuracy_low,
        baseline->accuracy_high, baseline->macro_f1, baseline->macro_f1_low, baseline->macro_f1_high);
  fmt::print("(Wilson intervals for accuracy, bootstrap over examples for macro-F1{})\n",
             baseline ? "; the baseline: normlab baseline, fitted on the run's training file" : "");
}

// Without length buckets (own data's default): the held-out figures, the per-class table and the
// confusion matrix, and the baseline row.
void print_held_out(const train::EvalMetrics& m, const train::HeldOutScore& model_score,
                    const std::optional<train::BaselineScore>& baseline, const train::LoadedRun& loaded,
                    bool own_data) {
  fmt::print("{} examples, {}\n", m.sequences, train::describe_groups(m));
  if (!m.confusion.empty())
    fmt::print("\nper class:\n{}", io::escape_control_lines(train::describe_class_metrics(m.confusion, m.labels)));
  if (own_data) print_score_rows(model_score, baseline, loaded);
}

// --json: evaluate_run's metrics with what was evaluated, by which checkpoint, and the own-data
// intervals and baseline.
void print_json(const EvalOptions& options, const train::LoadedRun& loaded, const train::ScoredEvaluation& scored,
                const train::EvalSettings& settings) {
  const train::RunEvaluation& result = scored.evaluation;
  nlohmann::json out = train::to_json(result.metrics);
  out["run"] = options.run_dir;
  out["step"] = loaded.step;
  out["checkpoint"] = loaded.is_best ? "best" : "last";
  out["data"] = result.data;
  out["data_sha256"] = result.data_sha256.empty() ? nlohmann::json(nullptr) : nlohmann::json(result.data_sha256);
  out["data_changed_since_training"] = result.changed_since_training.has_value();
  out["train_max_len"] = loaded.train_max_len;
  out["task"] = train::task_title(loaded.config);
  out["batch_size"] = settings.batch_size.value_or(loaded.config.train.batch_size);
  out["batch_statistics"] = settings.batch_statistics;
  if (scored.own_data) {
    out["accuracy_ci"] = {scored.model.accuracy_low, scored.model.accuracy_high};
    out["macro_f1_ci"] = {scored.model.macro_f1_low, scored.model.macro_f1_high};
  }
  if (const std::optional<train::BaselineScore>& baseline = scored.baseline)
    out["baseline"] = {{"name", "bag-of-words logistic regression (unigrams + bigrams)"},
                       {"examples", baseline->examples},
                       {"loss", baseline->loss},
                       {"accuracy", baseline->accuracy},
                       {"accuracy_ci", {baseline->accuracy_low, baseline->accuracy_high}},
                       {"macro_f1", baseline->macro_f1},
                       {"macro_f1_ci", {baseline->macro_f1_low, baseline->macro_f1_high}}};
  fmt::print("{}\n", out.dump());
}

// The table's first lines: the run, its task and checkpoint, the data, and how it was batched.
void print_heading(const EvalOptions& options, const train::LoadedRun& loaded, const train::RunEvaluation& result,
                   const train::EvalSettings& settings) {
  // Paths and the training file's labels are echoed with their control bytes escaped (io/text.hpp).
  fmt::print("run {} (task {}, checkpoint {}), data: {}{}\n", io::escape_control(options.run_dir),
             io::escape_control(train::task_title(loaded.config)), train::describe_checkpoint(loaded),
             io::escape_control(result.data),
             result.data_sha256.empty() ? "" : fmt::format(" (sha256 {})", result.data_sha256));
  if (result.changed_since_training)
    fmt::print("note: {} since the run was trained: these are not the numbers it recorded\n",
               result.changed_since_training->describe());
  if (settings.batch_size || settings.batch_statistics)
    fmt::print("batches of {} sequences{}\n", settings.batch_size.value_or(loaded.config.train.batch_size),
               settings.batch_statistics ? ", BatchNorm with each batch's own statistics" : "");
}

// With length buckets: one row a bucket and one for all, the groups, and the per-class table.
void print_buckets(const train::EvalMetrics& m, const train::LoadedRun& loaded) {
  fmt::print("{:>10} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "lengths", "seqs", "targets", "loss", "accuracy", "seq_acc");
  bool any_beyond = false;
  for (const train::BucketMetrics& b : m.buckets) {
    if (b.sequences == 0) continue;
    any_beyond = any_beyond || b.bucket.beyond_train_max;
    fmt::print("{:>10} {:>9} {:>9} {:>9.4f} {:>9.4f} {:>9.4f}\n",
               b.bucket.label() + (b.bucket.beyond_train_max ? "*" : ""), b.sequences, b.targets, b.loss, b.accuracy,
               b.sequence_accuracy);
  }
  fmt::print("{:>10} {:>9} {:>9} {:>9.4f} {:>9.4f} {:>9.4f}\n", "all", m.sequences, m.targets, m.loss, m.accuracy,
             m.sequence_accuracy);
  if (any_beyond) fmt::print("* longer than any training sequence (training max length {})\n", loaded.train_max_len);
  fmt::print("{}\n", train::describe_groups(m));
  // Accuracy alone hides errors gathered in a few classes (a tagger that ignores context).
  if (!m.confusion.empty()) {
    fmt::print("\nper class, all lengths:\n{}",
               io::escape_control_lines(train::describe_class_metrics(m.confusion, m.labels)));
    auto group_f1 = [](const char* name, const train::GroupMetrics& g) {
      return g.confusion.empty() ? std::string()
                                 : fmt::format("{} lengths macro-F1 {:.4f}", name, train::macro_f1(g.confusion));
    };
    if (m.unseen) fmt::print("{}; {}\n", group_f1("trained", m.trained), group_f1("unseen", *m.unseen));
  }
}

void run(const EvalOptions& options) {
  refuse_compare_dir(options.run_dir, "eval");
  train::LoadedRun loaded = train::load_run(options.run_dir, checkpoint_choice(options.checkpoint));
  std::optional<std::string> data;
  if (!options.data.empty()) data = options.data;
  train::EvalSettings settings;
  settings.batch_size = options.batch_size;
  settings.batch_statistics = options.batch_stats;
  // Own-data classification: the bag-of-words baseline on the same examples, the figure to beat.
  const train::ScoredEvaluation scored = train::score_run(loaded, data, settings, !options.no_baseline);
  if (options.json) return print_json(options, loaded, scored, settings);
  const train::EvalMetrics& m = scored.evaluation.metrics;
  print_heading(options, loaded, scored.evaluation, settings);
  if (!train::has_length_buckets(m)) return print_held_out(m, scored.model, scored.baseline, loaded, scored.own_data);
  print_buckets(m, loaded);
  if (scored.own_data) print_score_rows(scored.model, scored.baseline, loaded);
}

}  // namespace

void add_eval(CLI::App& app) {
  auto options = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval",
                                     "Evaluate a trained run: loss, accuracy and macro-F1 (per length bucket when "
                                     "asked), per-class metrics, the confusion matrix, and for own data the baseline");
  cmd->add_option("--run", options->run_dir, "Run directory (holds checkpoint.safetensors)")->required();
  cmd->add_option("--data", options->data, "JSONL file to evaluate (default: the run's validation set)");
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->add_option("--batch-size", options->batch_size,
                  "Sequences per evaluation batch (default: the run's train.batch_size); with --batch-stats it "
                  "decides which sequences share BatchNorm's statistics");
  cmd->add_flag("--batch-stats", options->batch_stats,
                "BatchNorm normalizes with each evaluation batch's own statistics, as in training, instead of its "
                "running averages (LayerNorm has per-token statistics: nothing changes)");
  cmd->add_flag("--no-baseline", options->no_baseline,
                "Own-data classification: leave out the bag-of-words baseline row (fitted on the run's training file)");
  add_checkpoint_option(*cmd, options->checkpoint);
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
