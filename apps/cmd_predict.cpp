// normlab predict --run DIR --input "..." [--json]
// normlab predict --run DIR --data FILE|- | --lines FILE|- [--out FILE] [--format json|csv] [--batch-size N] [--threads
// N]
#include <fmt/core.h>

#include <cmath>
#include <optional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/text.hpp"
#include "normlab/parallel.hpp"
#include "normlab/train/baseline.hpp"
#include "normlab/train/predict_file.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::cli {

namespace {

struct PredictOptions {
  std::string run_dir;
  std::string input;
  std::string data;   // a file in the task's format (CSV/TSV/JSONL); "-": standard input
  std::string lines;  // a file of raw inputs, one a line; "-": standard input
  std::string out;    // "": standard output
  std::string format = "json";
  int64_t batch_size = 256;
  int threads = 0;  // 0: as OMP_NUM_THREADS / all cores
  bool json = false;
  std::string checkpoint;  // "", "best" or "last"
};

// Four decimals: what a reader compares, and a line a third as long.
double rounded(float probability) { return std::round(double(probability) * 1e4) / 1e4; }

std::vector<std::string> class_names(const data::Task& task) {
  std::vector<std::string> names;
  for (int32_t k = 0; k < task.num_classes(); ++k) names.push_back(task.output_vocab.token(k));
  return names;
}

// The one output shape of predict (--input, --data and --lines; JSON and CSV):
//   per sequence  "label": L, "probability": p, "probabilities": {class: p, ...}
//   per token     "tags": [L, ...], "probability": [p, ...], "probabilities": {class: [p per token], ...}
// after "line", "input", "unknown" and "read_as" (the words the model read, a list). A file's
// labels come as "expected". CSV: the same columns, lists space-separated, one p_CLASS column per
// class.
nlohmann::ordered_json prediction_json(const train::LinePrediction& p, const data::Task& task,
                                       const std::optional<std::vector<std::string>>& expected) {
  const bool per_sequence = task.target_kind == data::TargetKind::per_sequence;
  nlohmann::ordered_json out = {{"line", p.line}, {"input", p.input}};
  if (!p.error.empty()) {
    out["error"] = p.error;
    return out;
  }
  out["unknown"] = p.unknown;
  nlohmann::ordered_json read_as = nlohmann::ordered_json::array();
  for (int32_t id : p.tokens) read_as.push_back(task.input_vocab.token(id));
  out["read_as"] = std::move(read_as);
  const size_t K = size_t(task.num_classes());
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  if (per_sequence) {
    out["label"] = task.output_vocab.token(p.predicted.front());
    out["probability"] = rounded(p.probability.front());
    for (size_t k = 0; k < K; ++k) all[task.output_vocab.token(int32_t(k))] = rounded(p.distribution[k]);
  } else {
    nlohmann::ordered_json tags = nlohmann::ordered_json::array(), each = nlohmann::ordered_json::array();
    for (int32_t id : p.predicted) tags.push_back(task.output_vocab.token(id));
    for (float q : p.probability) each.push_back(rounded(q));
    out["tags"] = std::move(tags);
    out["probability"] = std::move(each);
    for (size_t k = 0; k < K; ++k) {
      nlohmann::ordered_json column = nlohmann::ordered_json::array();
      for (size_t row = 0; row < p.predicted.size(); ++row) column.push_back(rounded(p.distribution[row * K + k]));
      all[task.output_vocab.token(int32_t(k))] = std::move(column);
    }
  }
  out["probabilities"] = std::move(all);
  if (expected)
    out["expected"] = per_sequence ? nlohmann::ordered_json(expected->front()) : nlohmann::ordered_json(*expected);
  return out;
}

std::string dumped(const nlohmann::ordered_json& out) {
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + words[i];
  return out;
}

std::string csv_header(const data::Task& task, bool with_expected) {
  const bool per_sequence = task.target_kind == data::TargetKind::per_sequence;
  std::string header = fmt::format("line,input,unknown,read_as,{},probability", per_sequence ? "label" : "tags");
  for (const std::string& name : class_names(task)) header += "," + io::csv_field("p_" + name);
  return header + (with_expected ? ",expected" : "") + ",error\n";
}

// The same prediction as a CSV row (every text cell through io::csv_field: formula-looking text
// neutralised, valid UTF-8).
std::string prediction_csv(const train::LinePrediction& p, const data::Task& task,
                           const std::optional<std::vector<std::string>>& expected, bool with_expected) {
  std::vector<std::string> read_as, tags, probabilities;
  std::vector<std::string> row = {fmt::format("{}", p.line), io::csv_field(p.input)};
  const size_t K = size_t(task.num_classes());
  if (p.error.empty()) {
    for (int32_t id : p.tokens) read_as.push_back(task.input_vocab.token(id));
    for (int32_t id : p.predicted) tags.push_back(task.output_vocab.token(id));
    for (float q : p.probability) probabilities.push_back(fmt::format("{:.4f}", q));
    row.insert(row.end(), {fmt::format("{}", p.unknown), io::csv_field(joined(read_as)), io::csv_field(joined(tags)),
                           joined(probabilities)});
    for (size_t k = 0; k < K; ++k) {
      std::vector<std::string> column;
      for (size_t r = 0; r < p.predicted.size(); ++r)
        column.push_back(fmt::format("{:.4f}", p.distribution[r * K + k]));
      row.push_back(joined(column));
    }
  } else {
    row.insert(row.end(), 4 + K, "");
  }
  if (with_expected) row.push_back(expected ? io::csv_field(joined(*expected)) : "");
  row.push_back(io::csv_field(p.error));
  std::string line;
  for (size_t i = 0; i < row.size(); ++i) line += (i ? "," : "") + row[i];
  return line;
}

// --masked-LM input as text: the input with each [MASK] replaced by the model's guess, then the guesses.
void print_filled(const train::LinePrediction& p, const data::Task& task) {
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
}

// --input's answer as text: the input, the words read, and the label, the filled masks or the tags.
void print_text(const train::InputPrediction& one, const data::Task& task) {
  const train::LinePrediction& p = one.prediction;
  fmt::print("input:     {}\n", io::escape_control(one.input));
  if (task.is_data_defined()) {
    fmt::print("read as:   {}{}\n", task.decode_input(p.tokens),
               p.unknown
                   ? fmt::format("  ({} word{} not in the training vocabulary)", p.unknown, p.unknown == 1 ? "" : "s")
                   : "");
  }
  if (task.target_kind == data::TargetKind::per_sequence) {
    fmt::print("label:     {}  (p = {:.3f})\n", task.output_vocab.token(p.predicted[0]), p.probability[0]);
    std::string all;
    for (int32_t k = 0; k < task.num_classes(); ++k)
      all += fmt::format("{}{} {:.3f}", k ? ", " : "", task.output_vocab.token(k), p.distribution[size_t(k)]);
    fmt::print("classes:   {}\n", io::escape_control(all));
    if (one.expected) fmt::print("expected:  {}\n", one.expected->front());
    return;
  }
  if (task.is_masked_lm()) return print_filled(p, task);
  fmt::print("predicted: {}\n", task.decode_targets(p.predicted));
  if (one.expected) {
    int64_t correct = 0;
    for (size_t i = 0; i < p.predicted.size(); ++i)
      correct += task.output_vocab.token(p.predicted[i]) == (*one.expected)[i];
    fmt::print("expected:  {}  ({}/{} correct)\n", joined(*one.expected), correct, p.predicted.size());
  }
}

void run_one(const PredictOptions& options, train::LoadedRun& loaded) {
  // Refused inputs are errors here (one line, exit 2), not an "error" field.
  const train::InputPrediction one = train::predict_input(loaded, options.input);
  const data::Task& task = loaded.task;
  for (const std::string& w : one.warnings) fmt::print(stderr, "normlab: warning: {}\n", io::escape_control(w));
  if (options.format == "csv") {
    const bool with_expected = one.expected.has_value();
    fmt::print("{}{}\n", csv_header(task, with_expected),
               prediction_csv(one.prediction, task, one.expected, with_expected));
  } else if (options.json) {
    nlohmann::ordered_json out = {{"task", train::task_title(loaded.config)}};
    out.update(prediction_json(one.prediction, task, one.expected));
    out["warnings"] = one.warnings;
    fmt::print("{}\n", dumped(out));
  } else {
    print_text(one, task);
  }
}

// The closing lines on standard error: what was predicted by which checkpoint, what could not be
// read, and the score against the file's labels.
void print_file_summary(const train::FileTally& tally, const train::LoadedRun& loaded, const PredictOptions& options) {
  if (tally.replaced > 0)
    fmt::print(stderr, "normlab: warning: {} line{} held invalid UTF-8, read as U+FFFD\n", tally.replaced,
               tally.replaced == 1 ? "" : "s");
  fmt::print(stderr, "normlab: {} inputs predicted{}{}{}{}{}\n", tally.predicted,
             loaded.is_best ? fmt::format(" by the best checkpoint (best.safetensors, step {})", loaded.step)
                            : fmt::format(" by the last checkpoint (checkpoint.safetensors, step {})", loaded.step),
             tally.failed ? fmt::format(", {} could not be read (their \"error\")", tally.failed) : "",
             tally.unknown ? fmt::format(", {} words not in the training vocabulary read as [UNK]", tally.unknown) : "",
             tally.longer
                 ? fmt::format(", {} inputs longer than any training sequence ({})", tally.longer, loaded.train_max_len)
                 : "",
             options.out.empty() ? "" : fmt::format("; written to {}", options.out));
  if (tally.labelled > 0 && !tally.confusion.empty()) {
    const train::HeldOutScore score = train::held_out_score(tally.confusion);
    fmt::print(stderr,
               "normlab: against the labels of {} of them{}: accuracy {:.4f} [{:.4f}, {:.4f}], macro-F1 {:.4f} "
               "[{:.4f}, {:.4f}] (95% intervals: Wilson, bootstrap)\n",
               tally.labelled, loaded.task.target_kind == data::TargetKind::per_token ? " (per tag)" : "",
               score.accuracy, score.accuracy_low, score.accuracy_high, score.macro_f1, score.macro_f1_low,
               score.macro_f1_high);
  }
}

void run_file(const PredictOptions& options, train::LoadedRun& loaded) {
  if (options.format != "json" && options.format != "csv")
    throw InputError(fmt::format("--format: must be json or csv, got \"{}\"", options.format));
  if (options.batch_size < 1 || options.batch_size > 65536)
    throw InputError(fmt::format("--batch-size: must be between 1 and 65536 (got {})", options.batch_size));
  const bool task_format = !options.data.empty();
  const std::string& source = task_format ? options.data : options.lines;
  const std::string contents = train::read_predict_source(loaded, source, task_format);
  // Written a group at a time; --out is published whole at the end.
  std::optional<io::AtomicFileWriter> file;
  if (!options.out.empty()) file.emplace(options.out);
  const auto emit = [&](const std::string& text) {
    if (file) file->write(text);
    else fmt::print("{}", text);
  };
  const bool csv = options.format == "csv";
  train::PredictionWriter writer;
  writer.start = [&](bool with_expected) {
    if (csv) emit(csv_header(loaded.task, with_expected));
  };
  writer.group = [&](const train::PredictedGroup& group) {
    std::string text;
    for (size_t i = 0; i < group.predictions.size(); ++i) {
      const train::LinePrediction& p = group.predictions[i];
      text += (csv ? prediction_csv(p, loaded.task, group.expected[i], group.with_expected)
                   : dumped(prediction_json(p, loaded.task, group.expected[i]))) +
              "\n";
    }
    emit(text);
  };
  const train::FileTally tally = train::predict_file(loaded, contents, source, task_format, options.batch_size, writer);
  if (file) file->commit();
  print_file_summary(tally, loaded, options);
}

void run(const PredictOptions& options) {
  refuse_compare_dir(options.run_dir, "predict");
  if (int(!options.input.empty()) + int(!options.data.empty()) + int(!options.lines.empty()) != 1)
    throw InputError(
        "predict: give one of --input \"...\" (one sequence), --data FILE (a file in the task's own "
        "format: CSV/TSV with a header or JSONL, read through task.text_field) or --lines FILE (one raw "
        "input a line); - reads standard input");
  if (options.threads < 0 || options.threads > 1024)
    throw InputError(fmt::format("--threads: must be between 0 and 1024 (got {})", options.threads));
  if (options.threads > 0) set_num_threads(options.threads);
  train::LoadedRun loaded = train::load_run(options.run_dir, checkpoint_choice(options.checkpoint));
  if (!options.data.empty() || !options.lines.empty()) return run_file(options, loaded);
  run_one(options, loaded);
  // Said after the answer, so that a refused input's error stays the one line on stderr.
  if (loaded.is_best) fmt::print(stderr, "normlab: note: checkpoint {}\n", train::describe_checkpoint(loaded));
}

}  // namespace

void add_predict(CLI::App& app) {
  auto options = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand("predict", "Run a trained model on one input sequence or on a file of them");
  cmd->add_option("--run", options->run_dir, "Run directory (holds checkpoint.safetensors)")->required();
  cmd->add_option("--input", options->input,
                  "The sequence: symbols like \"3 1 4\" or \"(()\", text for mlm_text ([MASK] marks a blank), or "
                  "whitespace-separated words for a data-defined task");
  cmd->add_option("--data", options->data,
                  "A file in the task's own format (CSV/TSV with a header, JSONL; - reads standard input as JSONL): "
                  "the text field is the input, labels when present are scored; one JSON object (or CSV row) per "
                  "record out");
  cmd->add_option("--lines", options->lines, "A file of raw inputs, one a line (- reads standard input)");
  cmd->add_option("--out", options->out,
                  "With --data or --lines: write the predictions to this file (default: standard output)");
  cmd->add_option("--format", options->format,
                  "json (one object a line, default) or csv (a header row, one p_CLASS column per class)");
  cmd->add_option("--batch-size", options->batch_size,
                  "With --data or --lines: sequences per forward pass (default 256)");
  cmd->add_option("--threads", options->threads, "Threads (default: OMP_NUM_THREADS or all cores)");
  cmd->add_flag("--json", options->json, "With --input: print one JSON object");
  add_checkpoint_option(*cmd, options->checkpoint);
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
