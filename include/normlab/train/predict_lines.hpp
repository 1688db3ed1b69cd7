#pragma once
// Predictions for many inputs at once (`normlab predict --data FILE`, `normlab bench predict`):
// the inputs are encoded as the task reads text (data-defined tasks: task.lowercase,
// task.split_punctuation, unknown words as [UNK]), packed `batch_size` sequences a batch and run
// through the model's packed eval forward, so a file costs a few forward passes instead of one
// process per line.
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/train/saved_run.hpp"

namespace normlab::train {

struct LinePrediction {
  int64_t line = 0;                 // 1-based, in the input
  std::string input;                // as typed
  std::vector<int32_t> tokens;      // the encoded input
  int64_t unknown = 0;              // words read as [UNK] (not in the training vocabulary)
  std::vector<int32_t> predicted;   // per token: one class per position; per sequence: one class
  std::vector<float> probability;   // softmax probability of each predicted class
  std::vector<float> distribution;  // every class's probability, (rows, K): one row per sequence, or per token
  std::string error;                // not empty: the input could not be read (empty, unknown symbol, too long)
};

// Predicts `inputs[i]` (line first_line + i) in order. A failing input gets `error` and no
// prediction; the others are unaffected. UsageError if batch_size < 1.
std::vector<LinePrediction> predict_lines(LoadedRun& run, const std::vector<std::string>& inputs, int64_t batch_size,
                                          int64_t first_line = 1);

}  // namespace normlab::train
