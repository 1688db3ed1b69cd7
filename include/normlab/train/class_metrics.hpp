#pragma once
// Per-class metrics from a confusion matrix: what accuracy hides when the classes are unequal or
// when the errors gather in a few of them (a tagger that ignores context is right on most words and
// wrong on every word whose tag depends on its neighbour).
//
//   confusion (K, K)   counts[true * K + predicted]; row = the target, column = the model's answer
//   precision_k        correct_k / predicted_k      (0 when the model never answers k)
//   recall_k           correct_k / support_k        (0 when k never occurs)
//   f1_k               2 p r / (p + r)              (0 when p + r = 0)
//   macro_f1           mean of f1_k over the classes that occur as a target or as an answer
//                      (sklearn's f1_score(average="macro") on the labels present)
//   balanced_accuracy  mean of recall_k over the classes that occur as a target
//
// Reports judge data-defined ("own data") runs by macro-F1 beside accuracy: unlike balanced
// accuracy it also falls when a model over-answers a class (precision), and like it, it gives a rare
// class the weight of a frequent one, so errors concentrated in a few classes are not averaged away.
#include <cstdint>
#include <map>
#include <utility>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace normlab::train {

// Sparse: only the (target, predicted) pairs that occurred are stored, so a task with thousands of
// classes (a token vocabulary) costs what its evaluation saw, not K * K counts.
struct Confusion {
  int32_t labels = 0;                                    // K
  std::map<std::pair<int32_t, int32_t>, int64_t> cells;  // (target, predicted) -> count, non-zero only

  Confusion() = default;
  explicit Confusion(int32_t num_labels) : labels(num_labels) {}
  void add(int32_t target, int32_t predicted, int64_t n = 1) {
    if (n != 0) cells[{target, predicted}] += n;
  }
  int64_t at(int32_t target, int32_t predicted) const {
    const auto it = cells.find({target, predicted});
    return it == cells.end() ? 0 : it->second;
  }
  int64_t total() const;
  bool empty() const { return total() == 0; }
  // Adds another matrix of the same size (an empty one adopts the other's size).
  void merge(const Confusion& other);
  bool operator==(const Confusion&) const = default;
};

struct ClassMetrics {
  int64_t support = 0;    // targets of this class
  int64_t predicted = 0;  // answers of this class
  int64_t correct = 0;
  double precision = 0.0, recall = 0.0, f1 = 0.0;
};

// One entry per class, k = 0..K-1.
std::vector<ClassMetrics> class_metrics(const Confusion& confusion);
// NaN for an empty matrix.
double macro_f1(const Confusion& confusion);
double balanced_accuracy(const Confusion& confusion);

// {"macro_f1", "balanced_accuracy", "confusion": [[...], ...] (K rows of K counts; for K > 256,
//  {"labels": K, "cells": [[target, predicted, count], ...]} with the non-zero cells only),
//  "classes": [{"label", "support", "precision", "recall", "f1"}, ...] (classes that occur as a
//  target or an answer)}; label names from `names` (the class id when a name is missing).
nlohmann::json class_metrics_json(const Confusion& confusion, const std::vector<std::string>& names);
// The matrix from class_metrics_json's "confusion" (an empty matrix when absent or null).
// InputError "<where>: confusion: ..." when it is not a square array of non-negative integers.
Confusion confusion_from_json(const nlohmann::json& object, const std::string& where);

// The per-class table and the matrix as text, for `normlab eval`:
//   class         support  precision  recall      f1
//   negative          120     0.9500  0.9000  0.9243
//   ...
//   macro-F1 0.9012, balanced accuracy 0.9000
//   confusion (rows: target, columns: predicted)
//                negative  neutral positive
//   negative          108       10        2
std::string describe_class_metrics(const Confusion& confusion, const std::vector<std::string>& names);

}  // namespace normlab::train
