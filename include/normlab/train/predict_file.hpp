#pragma once
// `normlab predict`'s work, apart from its printing (apps/cmd_predict.cpp): one input (--input) with
// what to warn about, or a file of inputs (--data in the task's own format, --lines one raw input a
// line) predicted a group of batches at a time and scored against the file's labels. Memory holds
// the file's text and one group's predictions, however many lines it has.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/train/class_metrics.hpp"
#include "normlab/train/predict_lines.hpp"
#include "normlab/train/saved_run.hpp"

namespace normlab::train {

// The labels a prediction is compared with, as the output vocabulary names them: per sequence one,
// per token one a word ("" where a file gives none). nullopt: none known.
using ExpectedLabels = std::optional<std::vector<std::string>>;

struct InputPrediction {
  std::string input;                  // as read: invalid UTF-8 as U+FFFD
  LinePrediction prediction;          // line 1
  ExpectedLabels expected;            // the task's rule's answer (the generated tasks)
  std::vector<std::string> warnings;  // one line each: replaced bytes, a length never trained on, no [MASK]
};

// `text` read and predicted. An input the task cannot read, or longer than model.max_len, is an
// InputError ("--input: ..."), not a prediction with an error.
InputPrediction predict_input(LoadedRun& run, const std::string& text);

// The text of --data or --lines (`task_format`): the file `source`, or standard input ("-"), bounded
// by the run's task.max_file_mb (standard input is refused once it passes it). InputError when it is
// empty, or when --data names a file whose extension is none of the task's formats (task.format auto).
std::string read_predict_source(const LoadedRun& run, const std::string& source, bool task_format);

struct PredictedGroup {
  const std::vector<LinePrediction>& predictions;  // .line: the line in the file
  const std::vector<ExpectedLabels>& expected;     // the file's labels, per prediction
  bool with_expected;                              // the file has labels (as its first group says)
};

// What predict_file hands its caller: `start` once, before anything is predicted, with whether the
// file has labels; then `group` for each group of predictions, in the file's order.
struct PredictionWriter {
  std::function<void(bool with_expected)> start;
  std::function<void(const PredictedGroup&)> group;
};

// What a file's predictions add up to: counts for the closing line, and the confusion matrix
// against the file's labels when it has them.
struct FileTally {
  int64_t predicted = 0;  // inputs with an answer
  int64_t failed = 0;     // inputs that could not be read (their LinePrediction::error)
  int64_t unknown = 0;    // words read as [UNK]
  int64_t longer = 0;     // inputs longer than any training sequence
  int64_t replaced = 0;   // --lines: lines that held invalid UTF-8
  int64_t labelled = 0;   // inputs scored against their labels
  Confusion confusion;    // (K, K) over the labelled inputs' words or sequences
};

// Predicts `contents` (read_predict_source's; `source` names it in messages) `batch_size` sequences a
// forward pass, about 8192 lines a group. --data: the text field is the input, and a record's labels
// are scored (InputError "PATH:LINE: ..." for a label that is not one of the run's classes, or a
// count of tags that is not the count of words); --lines: each line is an input.
FileTally predict_file(LoadedRun& run, std::string_view contents, const std::string& source, bool task_format,
                       int64_t batch_size, const PredictionWriter& writer);

}  // namespace normlab::train
