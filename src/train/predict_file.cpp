#include "normlab/train/predict_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "normlab/data/jsonl.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/text.hpp"

namespace normlab::train {

namespace {

// Said when an input is an answer the model was never trained to give.
std::vector<std::string> input_warnings(const LoadedRun& run, const LinePrediction& p, int64_t replaced) {
  std::vector<std::string> warnings;
  if (replaced > 0)
    warnings.push_back(
        fmt::format("--input: {} invalid UTF-8 sequence{} read as U+FFFD", replaced, replaced == 1 ? "" : "s"));
  if (run.train_max_len > 0 && int64_t(p.tokens.size()) > int64_t(run.train_max_len))
    warnings.push_back(
        fmt::format("the input has {} tokens, longer than any training sequence ({}): the model has "
                    "never seen this length",
                    p.tokens.size(), run.train_max_len));
  if (run.task.is_masked_lm()) {
    const int32_t mask = run.task.input_vocab.id("[MASK]");
    if (std::count(p.tokens.begin(), p.tokens.end(), mask) == 0)
      warnings.push_back(
          "the input has no [MASK]: nothing to fill in (mark each blank with [MASK], e.g. \"In the "
          "beginning God cr[MASK]ated\")");
  }
  return warnings;
}

// The run's classes, space-separated: what a label must be one of.
std::string class_list(const data::Task& task) {
  std::string out;
  for (int32_t k = 0; k < task.num_classes(); ++k) out += (k ? " " : "") + task.output_vocab.token(k);
  return out;
}

// The file's labels of one input against its answers: per sequence one, per token one a word (none:
// "_" or empty, not scored).
void score_labels(const data::Task& task, const LinePrediction& p, const std::vector<std::string>& labels,
                  const std::string& where, Confusion& confusion) {
  if (labels.size() != p.predicted.size())
    throw InputError(fmt::format("{}: {} labels for {} words as the run reads the text (one tag per word)", where,
                                 labels.size(), p.predicted.size()));
  for (size_t t = 0; t < labels.size(); ++t) {
    if (labels[t].empty()) continue;
    const std::optional<int32_t> id = task.output_vocab.find(labels[t]);
    if (!id)
      throw InputError(fmt::format("{}: label \"{}\" is not one of the run's classes ({})", where,
                                   io::escape_control(labels[t]), class_list(task)));
    confusion.add(*id, p.predicted[t]);
  }
}

// The line number at the end of "PATH:LINE".
int64_t line_of(const std::string& where) {
  const size_t colon = where.rfind(':');
  return colon == std::string::npos ? 0 : std::strtoll(where.c_str() + colon + 1, nullptr, 10);
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

// The inputs gathered for the next group, and what is done with a full one: predicted, scored,
// counted and handed to the writer.
class Groups {
 public:
  Groups(LoadedRun& run, int64_t batch_size, const PredictionWriter& writer)
      : run_(run), batch_size_(batch_size), writer_(writer) {
    tally.confusion = Confusion(run.task.num_classes());
  }

  void add(std::string input, int64_t line, std::string where, ExpectedLabels expected) {
    inputs.push_back(std::move(input));
    lines_.push_back(line);
    where_.push_back(std::move(where));
    expected_.push_back(std::move(expected));
  }
  // Whether any gathered input has labels.
  bool any_labelled() const {
    return std::any_of(expected_.begin(), expected_.end(), [](const ExpectedLabels& e) { return e.has_value(); });
  }

  void flush(bool with_expected) {
    if (!started_) writer_.start(with_expected);
    started_ = true;
    if (!inputs.empty()) predict(with_expected);
    inputs.clear(), lines_.clear(), expected_.clear(), where_.clear();
  }

  std::vector<std::string> inputs;
  FileTally tally;

 private:
  void predict(bool with_expected) {
    std::vector<LinePrediction> predictions = predict_lines(run_, inputs, batch_size_, 1);
    for (size_t i = 0; i < predictions.size(); ++i) {
      LinePrediction& p = predictions[i];
      p.line = lines_[i];
      if (p.error.empty() && expected_[i]) {
        score_labels(run_.task, p, *expected_[i], where_[i], tally.confusion);
        ++tally.labelled;
      }
      tally.failed += !p.error.empty();
      tally.predicted += p.error.empty();
      tally.unknown += p.unknown;
      tally.longer += run_.train_max_len > 0 && int64_t(p.tokens.size()) > run_.train_max_len;
    }
    writer_.group(PredictedGroup{predictions, expected_, with_expected});
  }

  LoadedRun& run_;
  int64_t batch_size_;
  const PredictionWriter& writer_;
  bool started_ = false;
  std::vector<int64_t> lines_;
  std::vector<std::string> where_;
  std::vector<ExpectedLabels> expected_;
};

// --data: the records of the task's format; the text field is the input, its labels (when present)
// what the answers are scored against. Whether the file has labels is decided by its first group.
void predict_records(std::string_view contents, const std::string& name, const data::Task& task, size_t group_size,
                     Groups& groups) {
  bool with_expected = false, decided = false;
  data::for_each_input_record(contents, name, task, nullptr, [&](data::InputRecord&& record) {
    ExpectedLabels labels;
    if (record.labels) {
      labels.emplace();
      for (const auto& l : *record.labels) labels->push_back(l.value_or(""));
    }
    const int64_t line = line_of(record.where);
    groups.add(std::move(record.text), line, std::move(record.where), std::move(labels));
    if (groups.inputs.size() == group_size) {
      if (!decided) with_expected = groups.any_labelled(), decided = true;
      groups.flush(with_expected);
    }
  });
  if (!decided) with_expected = groups.any_labelled();
  groups.flush(with_expected);
}

// --lines: each line an input, no labels.
void predict_raw_lines(std::string_view contents, const std::string& name, size_t group_size, Groups& groups) {
  int64_t next_line = 1;
  for (size_t pos = 0; pos < contents.size();) {
    for (std::string& input : next_inputs(contents, pos, group_size, groups.tally.replaced)) {
      groups.add(std::move(input), next_line, fmt::format("{}:{}", name, next_line), std::nullopt);
      ++next_line;
    }
    groups.flush(false);
  }
}

}  // namespace

InputPrediction predict_input(LoadedRun& run, const std::string& text) {
  // Text given to predict is read with U+FFFD for bytes that are not UTF-8 (io/text.hpp), and said so.
  InputPrediction out;
  int64_t replaced = 0;
  out.input = io::replace_invalid_utf8(text, &replaced);
  const data::Task& task = run.task;
  const std::vector<int32_t> encoded = task.encode(out.input, "--input");
  if (int64_t(encoded.size()) > run.config.model.max_len)
    throw InputError(fmt::format("--input: {} tokens is longer than this model's model.max_len {}", encoded.size(),
                                 run.config.model.max_len));
  out.prediction = predict_lines(run, {out.input}, 1).front();
  const LinePrediction& p = out.prediction;
  if (!p.error.empty()) throw InputError(p.error);
  if (task.has_generator()) {
    out.expected.emplace();
    for (int32_t id : data::compute_targets(task, p.tokens)) out.expected->push_back(task.output_vocab.token(id));
  }
  out.warnings = input_warnings(run, p, replaced);
  return out;
}

std::string read_predict_source(const LoadedRun& run, const std::string& source, bool task_format) {
  // A FIFO or a device is refused before the extension is looked at.
  const size_t limit = size_t(run.task.file.max_file_bytes);
  std::string contents =
      source == "-" ? io::read_stream(STDIN_FILENO, limit, "standard input") : io::read_file(source, limit);
  if (contents.empty()) throw InputError(fmt::format("{}: no input lines", source == "-" ? "standard input" : source));
  if (task_format && source != "-" && run.task.is_data_defined() && run.task.file.format == "auto") {
    const std::string extension = std::filesystem::path(source).extension().string();
    if (extension != ".csv" && extension != ".tsv" && extension != ".jsonl" && extension != ".json" &&
        extension != ".conll" && extension != ".conllu")
      throw InputError(
          fmt::format("{}: --data reads the task's own format (CSV or TSV with a header, JSONL, CoNLL: "
                      "by extension), and \"{}\" is none of them; for one raw input a line use --lines {}",
                      source, extension, source));
  }
  return contents;
}

FileTally predict_file(LoadedRun& run, std::string_view contents, const std::string& source, bool task_format,
                       int64_t batch_size, const PredictionWriter& writer) {
  if (batch_size < 1) throw UsageError(fmt::format("predict_file: batch_size {} < 1", batch_size));
  const std::string name = source == "-" ? "standard input" : source;
  const size_t group_size = size_t(batch_size) * size_t(std::max<int64_t>(1, 8192 / batch_size));
  Groups groups(run, batch_size, writer);
  if (task_format) predict_records(contents, name, run.task, group_size, groups);
  else predict_raw_lines(contents, name, group_size, groups);
  return groups.tally;
}

}  // namespace normlab::train
