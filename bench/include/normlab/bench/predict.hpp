#pragma once
// `normlab bench predict`: how many input lines a trained run predicts per second through
// train::predict_lines (encoding, packed eval forward in batches, softmax), as `normlab predict
// --data` runs it; reading the file and writing the output are not timed.
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/train/saved_run.hpp"

namespace normlab::bench {

struct BenchPredictResult {
  int threads = 1;
  int repeats = 0;
  int64_t inputs = 0;  // lines predicted per repeat
  int64_t tokens = 0;  // their tokens
  int64_t batch_size = 0;
  double median_s = 0.0;  // one pass over the inputs, median over the repeats
  double min_s = 0.0, max_s = 0.0;
  double sequences_per_s = 0.0;  // inputs / median_s
  double tokens_per_s = 0.0;
  std::string kernels;  // the kernel path that ran
};

// The inputs of a run's validation file, one text a line as a user would type it (a data-defined
// task's tokens joined by spaces); InputError when the run has no validation file.
std::vector<std::string> validation_inputs(const train::LoadedRun& run);

// One untimed pass, then `repeats` timed ones. UsageError if repeats < 1 or inputs is empty.
BenchPredictResult bench_predict(train::LoadedRun& run, const std::vector<std::string>& inputs, int64_t batch_size,
                                 int repeats);

}  // namespace normlab::bench
