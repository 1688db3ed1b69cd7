// normlab predict --run DIR --input "..." [--json]
#include <fmt/core.h>

#include <memory>
#include <vector>
#include <string>

#include "commands.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::cli {

namespace {

struct PredictOptions {
  std::string run_dir;
  std::string input;
  bool json = false;
};

void run(const PredictOptions& options) {
  refuse_compare_dir(options.run_dir, "predict");
  train::LoadedRun loaded = train::load_run(options.run_dir);
  train::Prediction p = train::predict(loaded, options.input);
  const data::Task& task = loaded.task;
  const bool per_sequence = task.target_kind == data::TargetKind::per_sequence;

  // Say when the answer is one the model was never trained to give.
  std::vector<std::string> warnings;
  if (loaded.train_max_len > 0 && int64_t(p.tokens.size()) > int64_t(loaded.train_max_len))
    warnings.push_back(fmt::format("the input has {} tokens, longer than any training sequence ({}): the model has "
                                   "never seen this length",
                                   p.tokens.size(), loaded.train_max_len));
  int64_t masks = 0;
  if (task.is_masked_lm()) {
    const int32_t mask = task.input_vocab.id("[MASK]");
    for (int32_t t : p.tokens) masks += t == mask;
    if (masks == 0)
      warnings.push_back("the input has no [MASK]: nothing to fill in (mark each blank with [MASK], e.g. \"In the "
                         "beginning God cr[MASK]ated\")");
  }
  for (const std::string& w : warnings) fmt::print(stderr, "normlab: warning: {}\n", w);

  if (options.json) {
    auto tokens = [&](const std::vector<int32_t>& ids) {
      nlohmann::json list = nlohmann::json::array();
      for (int32_t id : ids) list.push_back(task.output_vocab.token(id));
      return list;
    };
    nlohmann::json out = {{"task", train::task_title(loaded.config)},
                          {"input", task.decode_input(p.tokens)},
                          {"predicted", tokens(p.predicted)},
                          {"input_ids", p.tokens},
                          {"predicted_ids", p.predicted},
                          {"probability", p.probability},
                          {"warnings", warnings}};
    if (p.expected) out["expected"] = tokens(*p.expected);
    fmt::print("{}\n", out.dump());
    return;
  }

  fmt::print("input:     {}\n", task.decode_input(p.tokens));
  if (per_sequence) {
    fmt::print("label:     {}  (p = {:.3f})\n", task.output_vocab.token(p.predicted[0]), p.probability[0]);
    if (p.expected) fmt::print("expected:  {}\n", task.output_vocab.token((*p.expected)[0]));
    return;
  }
  if (task.is_masked_lm()) {
    // Characters: show the input with each [MASK] replaced by the model's guess.
    const int32_t mask = task.input_vocab.id("[MASK]");
    std::string filled;
    for (size_t i = 0; i < p.tokens.size(); ++i) {
      filled += p.tokens[i] == mask ? task.output_vocab.token(p.predicted[i]) : task.input_vocab.token(p.tokens[i]);
    }
    fmt::print("filled:    {}\n", filled);
    std::string guesses;
    for (size_t i = 0; i < p.tokens.size(); ++i) {
      if (p.tokens[i] == mask) {
        guesses += fmt::format("{}{} '{}' (p = {:.2f})", guesses.empty() ? "" : ", ", i + 1,
                               task.output_vocab.token(p.predicted[i]), p.probability[i]);
      }
    }
    if (!guesses.empty()) fmt::print("masks:     {}\n", guesses);
    return;
  }
  fmt::print("predicted: {}\n", task.decode_targets(p.predicted));
  if (p.expected) {
    int64_t correct = 0;
    for (size_t i = 0; i < p.predicted.size(); ++i) correct += p.predicted[i] == (*p.expected)[i] ? 1 : 0;
    fmt::print("expected:  {}  ({}/{} correct)\n", task.decode_targets(*p.expected), correct, p.predicted.size());
  }
}

}  // namespace

void add_predict(CLI::App& app) {
  auto options = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand("predict", "Run a trained model on one input sequence");
  cmd->add_option("--run", options->run_dir, "Run directory (holds checkpoint.safetensors)")->required();
  cmd->add_option("--input", options->input,
                  "The sequence: symbols like \"3 1 4\" or \"(()\", text for mlm_text ([MASK] marks a blank), or "
                  "whitespace-separated words for a data-defined task")
      ->required();
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
