// Bag-of-words logistic regression: the yardstick for own-data sequence classification
// (train/baseline.hpp says what it computes).
#include "normlab/train/baseline.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "normlab/error.hpp"
#include "normlab/rng.hpp"
#include "normlab/train/setup.hpp"

namespace normlab::train {

BagOfWords::BagOfWords(int32_t vocab_size, const std::vector<data::Example>& training) : vocab_size_(vocab_size) {
  for (const data::Example& example : training)
    for (size_t i = 0; i + 1 < example.tokens.size(); ++i)
      bigrams_.emplace(std::pair{example.tokens[i], example.tokens[i + 1]}, 0);
  int32_t index = 0;
  for (auto& [pair, id] : bigrams_) id = vocab_size_ + index++;
}

std::vector<std::pair<int32_t, double>> BagOfWords::features(const std::vector<int32_t>& tokens) const {
  std::map<int32_t, double> counts;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= 0 && tokens[i] < vocab_size_) counts[tokens[i]] += 1.0;
    if (i + 1 < tokens.size())
      if (const auto it = bigrams_.find({tokens[i], tokens[i + 1]}); it != bigrams_.end()) counts[it->second] += 1.0;
  }
  double sum_sq = 0;
  for (const auto& [feature, count] : counts) sum_sq += count * count;
  const double scale = sum_sq > 0 ? 1.0 / std::sqrt(sum_sq) : 0.0;
  std::vector<std::pair<int32_t, double>> out;
  for (const auto& [feature, count] : counts) out.emplace_back(feature, count * scale);
  return out;
}

namespace {

using Features = std::vector<std::pair<int32_t, double>>;

// logits (classes) = W x + bias, then softmax in place.
void softmax_of(const std::vector<double>& weights, int32_t classes, int32_t stride, const Features& x,
                std::vector<double>& p) {
  p.assign(size_t(classes), 0.0);
  double max_logit = -INFINITY;
  for (int32_t k = 0; k < classes; ++k) {
    const double* row = weights.data() + size_t(k) * size_t(stride);
    double z = row[stride - 1];
    for (const auto& [f, v] : x) z += row[f] * v;
    p[size_t(k)] = z;
    max_logit = std::max(max_logit, z);
  }
  double sum = 0;
  for (double& z : p) sum += (z = std::exp(z - max_logit));
  for (double& z : p) z /= sum;
}

}  // namespace

std::vector<double> BaselineModel::probabilities(const std::vector<int32_t>& tokens) const {
  std::vector<double> p;
  softmax_of(weights, classes, bag.num_features() + 1, bag.features(tokens), p);
  return p;
}

int32_t BaselineModel::predict(const std::vector<int32_t>& tokens) const {
  const std::vector<double> p = probabilities(tokens);
  return int32_t(std::max_element(p.begin(), p.end()) - p.begin());  // ties: the lowest class id
}

BaselineModel fit_baseline(const data::Dataset& training, int32_t vocab_size, int32_t classes,
                           const BaselineOptions& options, std::vector<double>* objective) {
  if (training.size() == 0 || classes < 2 || options.iterations < 0 || !(options.l2 >= 0))
    throw UsageError("fit_baseline: needs examples, two classes or more, iterations >= 0 and l2 >= 0");
  BaselineModel model;
  model.bag = BagOfWords(vocab_size, training.examples());
  model.classes = classes;
  const int32_t stride = model.bag.num_features() + 1;
  const size_t size = size_t(classes) * size_t(stride);
  std::vector<Features> xs;
  std::vector<int32_t> ys;
  for (const data::Example& example : training.examples()) {
    xs.push_back(model.bag.features(example.tokens));
    ys.push_back(example.targets.at(0));
  }
  const double n = double(xs.size()), step = 1.0 / (1.0 + options.l2);
  // FISTA: gradient at the look-ahead point y, w_next = y - step * grad, y = w_next + t-momentum.
  std::vector<double> w(size, 0.0), y(size, 0.0), grad(size), p;
  double t = 1.0;
  for (int64_t it = 0; it <= options.iterations; ++it) {
    std::fill(grad.begin(), grad.end(), 0.0);
    double loss = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      softmax_of(y, classes, stride, xs[i], p);
      loss -= std::log(std::max(p[size_t(ys[i])], 1e-300));
      for (int32_t k = 0; k < classes; ++k) {
        const double g = (p[size_t(k)] - (k == ys[i] ? 1.0 : 0.0)) / n;
        double* row = grad.data() + size_t(k) * size_t(stride);
        for (const auto& [f, v] : xs[i]) row[f] += g * v;
        row[stride - 1] += g;
      }
    }
    double penalty = 0;
    for (int32_t k = 0; k < classes; ++k)
      for (int32_t f = 0; f + 1 < stride; ++f) {
        const size_t at = size_t(k) * size_t(stride) + size_t(f);
        penalty += y[at] * y[at];
        grad[at] += options.l2 * y[at];
      }
    if (objective) objective->push_back(loss / n + 0.5 * options.l2 * penalty);
    if (it == options.iterations) break;
    const double t_next = 0.5 * (1.0 + std::sqrt(1.0 + 4.0 * t * t)), momentum = (t - 1.0) / t_next;
    for (size_t j = 0; j < size; ++j) {
      const double w_next = y[j] - step * grad[j];
      y[j] = w_next + momentum * (w_next - w[j]);
      w[j] = w_next;
    }
    t = t_next;
  }
  model.weights = std::move(w);
  return model;
}

std::pair<double, double> wilson_interval(int64_t correct, int64_t total) {
  if (total <= 0) return {NAN, NAN};
  const double z = 1.959963984540054, n = double(total), phat = double(correct) / n;
  const double centre = (phat + z * z / (2 * n)) / (1 + z * z / n);
  const double half = z / (1 + z * z / n) * std::sqrt(phat * (1 - phat) / n + z * z / (4 * n * n));
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

HeldOutScore held_out_score(const Confusion& confusion) {
  HeldOutScore score;
  // The (target, predicted) pairs the matrix counts, in cell order: a resample of examples is a
  // resample of these.
  std::vector<std::pair<int32_t, int32_t>> pairs;
  int64_t correct = 0;
  for (const auto& [cell, count] : confusion.cells)
    for (int64_t i = 0; i < count; ++i) pairs.push_back(cell);
  for (const auto& [target, predicted] : pairs) correct += target == predicted;
  score.examples = int64_t(pairs.size());
  if (pairs.empty()) return score;
  score.accuracy = double(correct) / double(pairs.size());
  std::tie(score.accuracy_low, score.accuracy_high) = wilson_interval(correct, score.examples);
  score.macro_f1 = train::macro_f1(confusion);
  // Percentile bootstrap over examples: 1000 resamples from Rng(0), the 2.5th and 97.5th values.
  Rng rng(0, 11);
  std::vector<double> resampled;
  for (int b = 0; b < 1000; ++b) {
    Confusion c(confusion.labels);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const auto& [target, predicted] = pairs[rng.below(uint32_t(pairs.size()))];
      c.add(target, predicted);
    }
    resampled.push_back(train::macro_f1(c));
  }
  std::sort(resampled.begin(), resampled.end());
  score.macro_f1_low = resampled[24];
  score.macro_f1_high = resampled[974];
  return score;
}

BaselineScore score_baseline(const BaselineModel& model, const data::Dataset& examples) {
  BaselineScore score;
  score.confusion = Confusion(model.classes);
  for (const data::Example& example : examples.examples()) {
    const std::vector<double> p = model.probabilities(example.tokens);
    const int32_t target = example.targets.at(0);
    const int32_t predicted = int32_t(std::max_element(p.begin(), p.end()) - p.begin());
    score.loss -= std::log(std::max(p[size_t(target)], 1e-300));
    score.confusion.add(target, predicted);
  }
  const HeldOutScore held_out = held_out_score(score.confusion);
  score.examples = held_out.examples;
  if (score.examples == 0) return score;
  score.loss /= double(score.examples);
  score.accuracy = held_out.accuracy;
  score.accuracy_low = held_out.accuracy_low;
  score.accuracy_high = held_out.accuracy_high;
  score.macro_f1 = held_out.macro_f1;
  score.macro_f1_low = held_out.macro_f1_low;
  score.macro_f1_high = held_out.macro_f1_high;
  return score;
}

std::optional<BaselineScore> run_baseline(const RunConfig& config, const data::Task& task, const data::Dataset& scored,
                                          io::StopFlag stop) {
  if (config.task.name != data::TaskKind::sequence_classification || !config.task.train_file) return std::nullopt;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(*config.task.train_file, ec)) return std::nullopt;
  const std::optional<data::Dataset> training = load_train_set(config, task, stop);
  const BaselineModel model = fit_baseline(*training, task.input_vocab_size(), task.num_classes());
  return score_baseline(model, scored);
}

std::optional<BaselineScore> config_baseline(const RunConfig& config, io::StopFlag stop) {
  if (config.task.name != data::TaskKind::sequence_classification || !config.task.train_file || !config.task.valid_file)
    return std::nullopt;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(*config.task.train_file, ec) ||
      !std::filesystem::is_regular_file(*config.task.valid_file, ec))
    return std::nullopt;
  const data::Task task = build_task(config, stop);
  return run_baseline(config, task, load_valid_set(config, task, stop), stop);
}

}  // namespace normlab::train
