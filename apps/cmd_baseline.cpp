// normlab baseline --config FILE [--data FILE] [--set K=V]... [--iterations N] [--l2 X] [--json]
// The bag-of-words logistic regression (train/baseline.hpp) on the config's own-data task: the
// figure a Transformer trained on the same files has to beat.
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/train/baseline.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::cli {

namespace {

struct BaselineCliOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string data;  // scored on this file instead of the validation set (a test split)
  train::BaselineOptions fit;
  bool json = false;
};

void run(const BaselineCliOptions& options) {
  if (options.fit.iterations < 1 || options.fit.iterations > 100000)
    throw InputError(fmt::format("--iterations: must be between 1 and 100000 (got {})", options.fit.iterations));
  if (!(options.fit.l2 >= 0) || options.fit.l2 > 1e3)
    throw InputError(fmt::format("--l2: must be between 0 and 1000 (got {})", options.fit.l2));
  const train::RunConfig config = train::load_config(options.config, options.overrides);
  if (config.task.name != data::TaskKind::sequence_classification)
    throw InputError(
        fmt::format("{}: task.name: the baseline is a bag-of-words sequence classifier, for "
                    "task.name sequence_classification (this config's task is {})",
                    options.config, data::to_string(config.task.name)));
  const data::Task task = train::build_task(config);
  train::FileUse train_use, valid_use;
  const data::Dataset training = *train::load_train_set(config, task, nullptr, &train_use);
  const data::Dataset valid = options.data.empty() ? train::load_valid_set(config, task, nullptr, &valid_use)
                                                   : train::load_eval_file(options.data, config, task, &valid_use);
  const std::string scored = options.data.empty() ? "held-out" : options.data;
  const train::BaselineModel model =
      train::fit_baseline(training, task.input_vocab_size(), task.num_classes(), options.fit);
  const train::BaselineScore score = train::score_baseline(model, valid);
  std::vector<std::string> labels;
  for (int32_t k = 0; k < task.num_classes(); ++k) labels.push_back(task.output_vocab.token(k));

  if (options.json) {
    nlohmann::json out = {{"baseline", "bag-of-words logistic regression (unigrams + bigrams)"},
                          {"config", options.config},
                          {"task", train::task_title(config)},
                          {"iterations", options.fit.iterations},
                          {"l2", options.fit.l2},
                          {"train_examples", training.size()},
                          {"unigrams", task.input_vocab_size()},
                          {"bigrams", model.bag.num_bigrams()},
                          {"data", options.data.empty() ? config.task.valid_file.value_or("") : options.data},
                          {"valid_examples", score.examples},
                          {"loss", score.loss},
                          {"accuracy", score.accuracy},
                          {"accuracy_ci", {score.accuracy_low, score.accuracy_high}},
                          {"macro_f1", score.macro_f1},
                          {"macro_f1_ci", {score.macro_f1_low, score.macro_f1_high}}};
    out.update(train::class_metrics_json(score.confusion, labels));
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print("baseline: bag-of-words logistic regression (unigrams + bigrams, L2 {}, {} iterations) on {}\n",
             options.fit.l2, options.fit.iterations, train::task_title(config));
  fmt::print("training: {} examples ({}), {} unigrams + {} bigrams\n", training.size(), train_use.describe(),
             task.input_vocab_size(), model.bag.num_bigrams());
  fmt::print(
      "{}: {} examples ({}): accuracy {:.4f} [{:.4f}, {:.4f}], macro-F1 {:.4f} [{:.4f}, {:.4f}], "
      "loss {:.4f}\n",
      scored, score.examples, valid_use.describe(), score.accuracy, score.accuracy_low, score.accuracy_high,
      score.macro_f1, score.macro_f1_low, score.macro_f1_high, score.loss);
  fmt::print("(95% intervals: Wilson for accuracy, bootstrap over examples for macro-F1)\n\nper class:\n{}",
             train::describe_class_metrics(score.confusion, labels));
}

}  // namespace

void add_baseline(CLI::App& app) {
  auto options = std::make_shared<BaselineCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "baseline", "Fit a bag-of-words logistic regression on an own-data classification config: the figure to beat");
  cmd->add_option("--config", options->config, "Run config (task.name sequence_classification)")->required();
  cmd->add_option("--set", options->overrides, "Override a config key (repeatable)");
  cmd->add_option("--data", options->data, "Score on this file (e.g. a test split) instead of the validation set");
  cmd->add_option("--iterations", options->fit.iterations, "Gradient steps of the fit (default 1000)");
  cmd->add_option("--l2", options->fit.l2, "L2 penalty on the weights (default 1e-6)");
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
