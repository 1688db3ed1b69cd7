#include "normlab/train/predict_lines.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/train/metrics.hpp"

namespace normlab::train {

namespace {

// The input encoded as the task reads it, or `error` set.
void encode_input(const LoadedRun& run, LinePrediction& p) {
  try {
    p.tokens = run.task.encode(p.input, fmt::format("line {}", p.line));
  } catch (const InputError& e) {
    p.error = e.what();
    return;
  }
  if (static_cast<int64_t>(p.tokens.size()) > run.config.model.max_len) {
    p.error = fmt::format("line {}: {} tokens, longer than this model's model.max_len {}", p.line, p.tokens.size(),
                          run.config.model.max_len);
    p.tokens.clear();
    return;
  }
  if (const std::optional<int32_t> unk = run.task.input_vocab.find(data::kUnkToken))
    p.unknown = std::count(p.tokens.begin(), p.tokens.end(), *unk);
}

// Softmax of one row of logits over the task's K classes (a model with extra head outputs never
// predicts a class the task cannot name), its argmax and the argmax's probability.
int32_t predict_row(const float* z, int64_t V, int64_t K, float& probability, std::vector<float>* distribution) {
  // distribution: (K) appended, every class's probability
  const int64_t best = argmax_row(z, std::min(V, K));
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - double(z[best]));
  probability = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < K; ++k)
    distribution->push_back(static_cast<float>(std::exp(double(z[k]) - double(z[best])) / sum));
  return static_cast<int32_t>(best);
}

// One packed forward over the encodable predictions in [begin, end).
void predict_batch(LoadedRun& run, std::vector<LinePrediction>& out, size_t begin, size_t end) {
  std::vector<int32_t> tokens;      // (T_total)
  std::vector<int64_t> offsets{0};  // (B+1)
  std::vector<LinePrediction*> members;
  for (size_t i = begin; i < end; ++i) {
    if (!out[i].error.empty()) continue;
    tokens.insert(tokens.end(), out[i].tokens.begin(), out[i].tokens.end());
    offsets.push_back(static_cast<int64_t>(tokens.size()));
    members.push_back(&out[i]);
  }
  if (members.empty()) return;
  Tensor logits = run.model->forward(tokens, offsets);  // (rows, V): B pooled rows or T_total token rows
  const int64_t V = logits.size(1), K = run.task.num_classes();
  const float* values = logits.data();
  const bool per_sequence = run.task.target_kind == data::TargetKind::per_sequence;
  for (size_t b = 0; b < members.size(); ++b) {
    LinePrediction& p = *members[b];
    const int64_t first = per_sequence ? int64_t(b) : offsets[b], last = per_sequence ? int64_t(b) + 1 : offsets[b + 1];
    for (int64_t row = first; row < last; ++row) {
      float probability = 0;
      p.predicted.push_back(predict_row(values + row * V, V, K, probability, &p.distribution));
      p.probability.push_back(probability);
    }
  }
}

}  // namespace

std::vector<LinePrediction> predict_lines(LoadedRun& run, const std::vector<std::string>& inputs, int64_t batch_size,
                                          int64_t first_line) {
  if (batch_size < 1) throw UsageError(fmt::format("predict_lines: batch_size {} < 1", batch_size));
  std::vector<LinePrediction> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    out[i].line = first_line + int64_t(i);
    out[i].input = inputs[i];
    encode_input(run, out[i]);
  }
  run.model->eval();
  NoGradGuard no_grad;
  for (size_t begin = 0; begin < out.size(); begin += size_t(batch_size))
    predict_batch(run, out, begin, std::min(out.size(), begin + size_t(batch_size)));
  return out;
}

}  // namespace normlab::train
