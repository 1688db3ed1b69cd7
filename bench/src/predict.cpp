#include "normlab/bench/predict.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "normlab/data/jsonl.hpp"
#include "normlab/error.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/parallel.hpp"
#include "normlab/stats.hpp"
#include "normlab/train/predict_lines.hpp"

namespace normlab::bench {

std::vector<std::string> validation_inputs(const train::LoadedRun& run) {
  if (!run.config.task.valid_file || !run.task.is_data_defined())
    throw InputError(
        fmt::format("{}: bench predict reads the inputs of a data-defined task's task.valid_file; give "
                    "--data FILE for this run",
                    run.paths.dir));
  std::vector<std::string> inputs;
  for (const data::StringExample& example :
       data::load_string_examples(*run.config.task.valid_file, run.task, run.task.file.max_file_bytes)) {
    std::string line;
    for (const std::string& token : example.tokens) line += (line.empty() ? "" : " ") + token;
    inputs.push_back(std::move(line));
  }
  return inputs;
}

BenchPredictResult bench_predict(train::LoadedRun& run, const std::vector<std::string>& inputs, int64_t batch_size,
                                 int repeats) {
  if (repeats < 1) throw UsageError(fmt::format("bench_predict: repeats {} < 1", repeats));
  if (inputs.empty()) throw UsageError("bench_predict: no inputs");
  BenchPredictResult result;
  result.threads = num_threads();
  result.repeats = repeats;
  result.batch_size = batch_size;
  result.inputs = static_cast<int64_t>(inputs.size());
  for (const train::LinePrediction& p : train::predict_lines(run, inputs, batch_size))  // warm-up, untimed
    result.tokens += static_cast<int64_t>(p.tokens.size());
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto begin = std::chrono::steady_clock::now();
    const std::vector<train::LinePrediction> out = train::predict_lines(run, inputs, batch_size);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  }
  result.median_s = median(seconds);
  result.min_s = *std::min_element(seconds.begin(), seconds.end());
  result.max_s = *std::max_element(seconds.begin(), seconds.end());
  result.sequences_per_s = double(result.inputs) / result.median_s;
  result.tokens_per_s = double(result.tokens) / result.median_s;
  result.kernels = kernels::active_isa_name();
  return result;
}

}  // namespace normlab::bench
