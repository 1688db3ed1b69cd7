// normlab predict --run DIR --input "..." [--json]
// normlab predict --run DIR --data FILE|- [--out FILE] [--format json|csv] [--batch-size N] [--threads N]
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/text.hpp"
#include "normlab/parallel.hpp"
#include "normlab/train/predict_lines.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::cli {

namespace {

int64_t unknown_count(const data::Task& task, const std::vector<int32_t>& tokens) {
  const std::optional<int32_t> unk = task.is_data_defined() ? task.input_vocab.find(data::kUnkToken) : std::nullopt;
  return unk ? std::count(tokens.begin(), tokens.end(), *unk) : 0;
}

struct PredictOptions {
  std::string run_dir;
  std::string input;
  std::string data;  // a file of inputs, one a line; "-": standard input
  std::string out;   // "": standard output
  std::string format = "json";
  int64_t batch_size = 256;
  int threads = 0;   // 0: as OMP_NUM_THREADS / all cores
  bool json = false;
  std::string checkpoint;  // "", "best" or "last"
};

void run_one(const PredictOptions& options, train::LoadedRun& loaded) {
  // Text given to predict is read with U+FFFD for bytes that are not UTF-8 (io/text.hpp), and said so.
  int64_t replaced = 0;
  const std::string input = io::replace_invalid_utf8(options.input, &replaced);
  train::Prediction p = train::predict(loaded, input);
  const data::Task& task = loaded.task;
  const bool per_sequence = task.target_kind == data::TargetKind::per_sequence;

  // Say when the answer is one the model was never trained to give.
  std::vector<std::string> warnings;
  if (replaced > 0)
    warnings.push_back(fmt::format("--input: {} invalid UTF-8 sequence{} read as U+FFFD", replaced,
                                   replaced == 1 ? "" : "s"));
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
  for (const std::string& w : warnings) fmt::print(stderr, "normlab: warning: {}\n", io::escape_control(w));

  if (options.json) {
    auto tokens = [&](const std::vector<int32_t>& ids) {
      nlohmann::json list = nlohmann::json::array();
      for (int32_t id : ids) list.push_back(task.output_vocab.token(id));
      return list;
    };
    nlohmann::json out = {{"task", train::task_title(loaded.config)},
                          {"input", input},
                          {"read_as", task.decode_input(p.tokens)},
                          {"unknown", unknown_count(task, p.tokens)},
                          {"predicted", tokens(p.predicted)},
                          {"input_ids", p.tokens},
                          {"predicted_ids", p.predicted},
                          {"probability", p.probability},
                          {"warnings", warnings}};
    if (p.expected) out["expected"] = tokens(*p.expected);
    fmt::print("{}\n", out.dump());
    return;
  }

  fmt::print("input:     {}\n", io::escape_control(input));
  if (task.is_data_defined()) {
    const int64_t unknown = unknown_count(task, p.tokens);
    fmt::print("read as:   {}{}\n", task.decode_input(p.tokens),
               unknown ? fmt::format("  ({} word{} not in the training vocabulary)", unknown, unknown == 1 ? "" : "s") : "");
  }
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


// The text of --data: a file, or standard input (-). Standard input is bounded by the same limit as
// a file, the run's task.max_file_mb: it is read in chunks and refused once it passes the limit,
// before anything is predicted.
std::string read_source(const std::string& source, const train::LoadedRun& loaded) {
  const size_t limit = size_t(loaded.task.file.max_file_bytes);
  std::string contents = source == "-" ? io::read_stream(STDIN_FILENO, limit, "standard input") : io::read_file(source, limit);
  if (contents.empty()) throw InputError(fmt::format("{}: no input lines", source == "-" ? "standard input" : source));
  return contents;
}

// The next `count` inputs of `contents` from `pos` on: one a line, a final newline ending the last
// (CRLF tolerated), invalid UTF-8 read as U+FFFD (`replaced` counts such lines).
std::vector<std::string> next_inputs(std::string_view contents, size_t& pos, size_t count, int64_t& replaced) {
  std::vector<std::string> lines;
  while (pos < contents.size() && lines.size() < count) {
    size_t end = contents.find('\n', pos);
    if (end == std::string::npos) end = contents.size();
    std::string_view line = contents.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    int64_t bad = 0;
    lines.push_back(io::replace_invalid_utf8(line, &bad));
    replaced += bad > 0;
    pos = end + 1;
  }
  return lines;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + words[i];
  return out;
}

// Four decimals: what a reader compares, and a line a third as long.
double rounded(float probability) { return std::round(double(probability) * 1e4) / 1e4; }

// One output line (JSON object or CSV row) for a prediction.
std::string format_prediction(const train::LinePrediction& p, const data::Task& task, bool csv) {
  const bool per_sequence = task.target_kind == data::TargetKind::per_sequence;
  std::vector<std::string> read_as, tags, probabilities;
  for (int32_t id : p.tokens) read_as.push_back(task.input_vocab.token(id));
  for (int32_t id : p.predicted) tags.push_back(task.output_vocab.token(id));
  for (float q : p.probability) probabilities.push_back(fmt::format("{:.4f}", q));
  if (csv) {
    // Every text cell through io::csv_field: formula-looking text neutralised, valid UTF-8.
    std::vector<std::string> row = {fmt::format("{}", p.line), io::csv_field(p.input), fmt::format("{}", p.unknown),
                                    io::csv_field(joined(read_as)), io::csv_field(joined(tags)), joined(probabilities),
                                    io::csv_field(p.error)};
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) line += (i ? "," : "") + row[i];
    return line;
  }
  nlohmann::ordered_json out = {{"line", p.line}, {"input", p.input}};
  if (!p.error.empty()) {
    out["error"] = p.error;
    return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  out["unknown"] = p.unknown;
  out["read_as"] = read_as;
  if (per_sequence) {
    out["label"] = tags.front();
    out["probability"] = rounded(p.probability.front());
    nlohmann::ordered_json all = nlohmann::ordered_json::object();
    for (size_t k = 0; k < p.distribution.size(); ++k) all[task.output_vocab.token(int32_t(k))] = rounded(p.distribution[k]);
    out["probabilities"] = std::move(all);
  } else {
    out["tags"] = tags;
    nlohmann::ordered_json each = nlohmann::ordered_json::array();
    for (float q : p.probability) each.push_back(rounded(q));
    out["probabilities"] = std::move(each);
  }
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void run_file(const PredictOptions& options, train::LoadedRun& loaded) {
  if (options.format != "json" && options.format != "csv")
    throw InputError(fmt::format("--format: must be json or csv, got \"{}\"", options.format));
  if (options.batch_size < 1 || options.batch_size > 65536)
    throw InputError(fmt::format("--batch-size: must be between 1 and 65536 (got {})", options.batch_size));
  const std::string contents = read_source(options.data, loaded);
  const bool csv = options.format == "csv";
  // Predicted and written a group of batches at a time: memory holds the input and one group's
  // predictions and text, however many lines there are. --out is published whole at the end.
  std::optional<io::AtomicFileWriter> file;
  if (!options.out.empty()) file.emplace(options.out);
  auto emit = [&](const std::string& text) {
    if (file) file->write(text);
    else fmt::print("{}", text);
  };
  if (csv) emit("line,input,unknown,read_as,predicted,probability,error\n");
  const size_t group = size_t(options.batch_size) * size_t(std::max<int64_t>(1, 8192 / options.batch_size));
  int64_t predicted = 0, failed = 0, unknown = 0, longer = 0, replaced = 0;
  for (size_t pos = 0; pos < contents.size();) {
    const std::vector<std::string> inputs = next_inputs(contents, pos, group, replaced);
    const std::vector<train::LinePrediction> predictions =
        train::predict_lines(loaded, inputs, options.batch_size, predicted + failed + 1);
    std::string text;
    for (const train::LinePrediction& p : predictions) {
      text += format_prediction(p, loaded.task, csv) + "\n";
      failed += !p.error.empty();
      predicted += p.error.empty();
      unknown += p.unknown;
      longer += loaded.train_max_len > 0 && int64_t(p.tokens.size()) > loaded.train_max_len;
    }
    emit(text);
  }
  if (file) file->commit();
  if (replaced > 0)
    fmt::print(stderr, "normlab: warning: {} line{} held invalid UTF-8, read as U+FFFD\n", replaced,
               replaced == 1 ? "" : "s");
  fmt::print(stderr, "normlab: {} inputs predicted{}{}{}{}{}\n", predicted,
             loaded.is_best ? fmt::format(" by the best checkpoint (best.safetensors, step {})", loaded.step) : "",
             failed ? fmt::format(", {} could not be read (their \"error\")", failed) : "",
             unknown ? fmt::format(", {} words not in the training vocabulary read as [UNK]", unknown) : "",
             longer ? fmt::format(", {} inputs longer than any training sequence ({})", longer, loaded.train_max_len) : "",
             options.out.empty() ? "" : fmt::format("; written to {}", options.out));
}

void run(const PredictOptions& options) {
  refuse_compare_dir(options.run_dir, "predict");
  if (options.input.empty() == options.data.empty())
    throw InputError("predict: give either --input \"...\" (one sequence) or --data FILE (one input a line; - for "
                     "standard input)");
  if (options.threads < 0 || options.threads > 1024)
    throw InputError(fmt::format("--threads: must be between 0 and 1024 (got {})", options.threads));
  if (options.threads > 0) set_num_threads(options.threads);
  train::LoadedRun loaded = train::load_run(options.run_dir, checkpoint_choice(options.checkpoint));
  if (!options.data.empty()) return run_file(options, loaded);
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
                  "A file of inputs, one a line (- reads standard input): one JSON object (or CSV row) per line out");
  cmd->add_option("--out", options->out, "With --data: write the predictions to this file (default: standard output)");
  cmd->add_option("--format", options->format, "With --data: json (one object a line, default) or csv");
  cmd->add_option("--batch-size", options->batch_size, "With --data: sequences per forward pass (default 256)");
  cmd->add_option("--threads", options->threads, "Threads (default: OMP_NUM_THREADS or all cores)");
  cmd->add_flag("--json", options->json, "With --input: print one JSON object");
  add_checkpoint_option(*cmd, options->checkpoint);
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
