#pragma once
// The yardstick for own-data sequence classification: a bag-of-words logistic regression on the
// same training file, read through the same tokenization (task.lowercase, task.split_punctuation,
// task.min_count: the model's input ids), so a Transformer's figures have something to beat.
//
//   features   counts of every unigram (input id) and of every bigram (adjacent pair of ids) seen in
//              the training file, each example's vector scaled to unit L2 norm, plus a bias of 1
//   model      multinomial logistic regression: p = softmax(W x), W (K, F+1)
//   objective  mean cross-entropy over the training examples + (l2 / 2) * ||W||^2 (bias excluded)
//   fit        full-batch gradient descent with Nesterov momentum (FISTA's schedule), step 1 / L,
//              L = 1 + l2 (softmax's Hessian is at most 1/2 ||x||^2 and ||x||^2 = 2 with the bias),
//              for a fixed number of iterations: no held-out data is looked at while fitting
//
// Everything is double and in a fixed order, so a fit is the same on every machine.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "normlab/data/dataset.hpp"
#include "normlab/stats.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/train/class_metrics.hpp"
#include "normlab/train/config.hpp"

namespace normlab::train {

// A weak penalty, fitted close to its optimum: with unit-norm features a penalty of 1e-4 already
// underfits (held-out accuracy 0.745 against 0.804 at 1e-6 on data/debian, 0.845 against 0.933 on
// data/reviews), and fewer steps stop short of the optimum.
struct BaselineOptions {
  int64_t iterations = 1000;
  double l2 = 1e-6;
};

// Unigram and bigram features of a sequence of input ids: feature u is unigram id u (u < vocab_size),
// feature vocab_size + j is the j-th bigram of the training file (in (first, second) id order).
class BagOfWords {
 public:
  BagOfWords() = default;
  BagOfWords(int32_t vocab_size, const std::vector<data::Example>& training);
  int32_t num_features() const { return vocab_size_ + int32_t(bigrams_.size()); }
  int32_t num_bigrams() const { return int32_t(bigrams_.size()); }
  // (feature, value) sorted by feature, values scaled to unit L2 norm; unseen bigrams are dropped.
  std::vector<std::pair<int32_t, double>> features(const std::vector<int32_t>& tokens) const;

 private:
  int32_t vocab_size_ = 0;
  std::map<std::pair<int32_t, int32_t>, int32_t> bigrams_;
};

struct BaselineModel {
  BagOfWords bag;
  int32_t classes = 0;
  std::vector<double> weights;  // (classes, num_features + 1); the last column is the bias
  std::vector<double> probabilities(const std::vector<int32_t>& tokens) const;  // (classes)
  int32_t predict(const std::vector<int32_t>& tokens) const;
};

// The objective at every iteration (entry 0: at W = 0, which is ln K) when `objective` is given.
BaselineModel fit_baseline(const data::Dataset& training, int32_t vocab_size, int32_t classes,
                           const BaselineOptions& options = {}, std::vector<double>* objective = nullptr);

struct BaselineScore {
  int64_t examples = 0;
  double loss = 0;  // mean cross-entropy (nats)
  double accuracy = 0;
  double accuracy_low = 0, accuracy_high = 0;  // Wilson 95% interval
  double macro_f1 = 0;
  double macro_f1_low = 0, macro_f1_high = 0;  // percentile bootstrap 95% over examples (1000, seed 0)
  Confusion confusion;
};
BaselineScore score_baseline(const BaselineModel& model, const data::Dataset& examples);

// The Wilson score interval (95%) of `correct` out of `total`.
std::pair<double, double> wilson_interval(int64_t correct, int64_t total);

// Held-out accuracy and macro-F1 with their 95% intervals, from the confusion matrix of one
// classifier's answers (the baseline's, or a model's): Wilson for accuracy, a percentile bootstrap
// over examples for macro-F1 (1000 resamples of the matrix's (target, predicted) pairs, Rng(0)).
struct HeldOutScore {
  int64_t examples = 0;
  double accuracy = 0, accuracy_low = 0, accuracy_high = 0;
  double macro_f1 = 0, macro_f1_low = 0, macro_f1_high = 0;
};
HeldOutScore held_out_score(const Confusion& confusion);

// The baseline fitted on a run's training file (as the run read it: `task` is the run's) and scored
// on `scored`; nullopt when the task is not sequence_classification or the training file is gone.
// The baseline of a config (its training file, its validation set): nullopt as run_baseline's.
std::optional<BaselineScore> config_baseline(const RunConfig& config, io::StopFlag stop = nullptr);

std::optional<BaselineScore> run_baseline(const RunConfig& config, const data::Task& task, const data::Dataset& scored,
                                          io::StopFlag stop = nullptr);

}  // namespace normlab::train
