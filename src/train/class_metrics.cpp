#include "normlab/train/class_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "normlab/error.hpp"

namespace normlab::train {

int64_t Confusion::total() const {
  int64_t sum = 0;
  for (const auto& [cell, n] : cells) sum += n;
  return sum;
}

void Confusion::merge(const Confusion& other) {
  if (other.labels == 0) return;
  if (labels == 0) {
    *this = other;
    return;
  }
  if (other.labels != labels)
    throw UsageError(fmt::format("Confusion::merge: {} labels and {} labels", labels, other.labels));
  for (const auto& [cell, n] : other.cells) cells[cell] += n;
}

std::vector<ClassMetrics> class_metrics(const Confusion& confusion) {
  const int32_t K = confusion.labels;
  std::vector<ClassMetrics> out(static_cast<size_t>(K));
  for (const auto& [cell, n] : confusion.cells) {
    const auto [t, p] = cell;
    if (t < 0 || p < 0 || t >= K || p >= K) continue;  // confusion_from_json refuses these
    out[size_t(t)].support += n;
    out[size_t(p)].predicted += n;
    if (t == p) out[size_t(t)].correct += n;
  }
  for (ClassMetrics& c : out) {
    c.precision = c.predicted ? double(c.correct) / double(c.predicted) : 0.0;
    c.recall = c.support ? double(c.correct) / double(c.support) : 0.0;
    c.f1 = c.precision + c.recall > 0 ? 2 * c.precision * c.recall / (c.precision + c.recall) : 0.0;
  }
  return out;
}

double macro_f1(const Confusion& confusion) {
  double sum = 0.0;
  int64_t classes = 0;
  for (const ClassMetrics& c : class_metrics(confusion)) {
    if (c.support == 0 && c.predicted == 0) continue;
    sum += c.f1;
    ++classes;
  }
  return classes ? sum / double(classes) : NAN;
}

double balanced_accuracy(const Confusion& confusion) {
  double sum = 0.0;
  int64_t classes = 0;
  for (const ClassMetrics& c : class_metrics(confusion)) {
    if (c.support == 0) continue;
    sum += c.recall;
    ++classes;
  }
  return classes ? sum / double(classes) : NAN;
}

namespace {

std::string name_of(const std::vector<std::string>& names, int32_t k) {
  return size_t(k) < names.size() ? names[size_t(k)] : fmt::format("{}", k);
}

// Up to this many classes the matrix is written whole (K rows of K counts), as people read it.
constexpr int32_t kDenseConfusionLabels = 256;

nlohmann::json finite_or_null(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json class_metrics_json(const Confusion& confusion, const std::vector<std::string>& names) {
  nlohmann::json matrix = nlohmann::json::array();
  if (confusion.labels > kDenseConfusionLabels) {  // a vocabulary: the cells that occurred
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& [cell, n] : confusion.cells) cells.push_back({cell.first, cell.second, n});
    matrix = {{"labels", confusion.labels}, {"cells", std::move(cells)}};
  }
  for (int32_t t = 0; t < confusion.labels && confusion.labels <= kDenseConfusionLabels; ++t) {
    nlohmann::json row = nlohmann::json::array();
    for (int32_t p = 0; p < confusion.labels; ++p) row.push_back(confusion.at(t, p));
    matrix.push_back(std::move(row));
  }
  nlohmann::json classes = nlohmann::json::array();
  const std::vector<ClassMetrics> per_class = class_metrics(confusion);
  for (int32_t k = 0; k < confusion.labels; ++k) {
    const ClassMetrics& c = per_class[size_t(k)];
    if (c.support == 0 && c.predicted == 0) continue;
    classes.push_back({{"label", name_of(names, k)},
                       {"support", c.support},
                       {"precision", c.precision},
                       {"recall", c.recall},
                       {"f1", c.f1}});
  }
  return {{"macro_f1", finite_or_null(macro_f1(confusion))},
          {"balanced_accuracy", finite_or_null(balanced_accuracy(confusion))},
          {"confusion", std::move(matrix)},
          {"classes", std::move(classes)}};
}

Confusion confusion_from_json(const nlohmann::json& object, const std::string& where) {
  if (!object.is_object() || !object.contains("confusion") || object.at("confusion").is_null()) return Confusion{};
  const nlohmann::json& matrix = object.at("confusion");
  auto bad = [&] {
    return InputError(
        fmt::format("{}: confusion: must be a square array of arrays of counts, or "
                    "{{\"labels\": K, \"cells\": [[target, predicted, count], ...]}}",
                    where));
  };
  auto count = [&](const nlohmann::json& n) {
    if (!n.is_number_integer() || n.get<int64_t>() < 0) throw bad();
    return n.get<int64_t>();
  };
  if (matrix.is_object()) {  // sparse
    if (!matrix.contains("labels") || !matrix.contains("cells") || !matrix.at("cells").is_array()) throw bad();
    const int64_t K = count(matrix.at("labels"));
    if (K > (int64_t(1) << 24)) throw bad();
    Confusion confusion(static_cast<int32_t>(K));
    for (const nlohmann::json& cell : matrix.at("cells")) {
      if (!cell.is_array() || cell.size() != 3) throw bad();
      const int64_t t = count(cell[0]), p = count(cell[1]);
      if (t >= K || p >= K) throw bad();
      confusion.add(static_cast<int32_t>(t), static_cast<int32_t>(p), count(cell[2]));
    }
    return confusion;
  }
  if (!matrix.is_array() || matrix.size() > size_t(kDenseConfusionLabels)) throw bad();
  Confusion confusion(static_cast<int32_t>(matrix.size()));
  for (size_t t = 0; t < matrix.size(); ++t) {
    if (!matrix[t].is_array() || matrix[t].size() != matrix.size()) throw bad();
    for (size_t p = 0; p < matrix.size(); ++p) confusion.add(int32_t(t), int32_t(p), count(matrix[t][p]));
  }
  return confusion;
}

std::string describe_class_metrics(const Confusion& confusion, const std::vector<std::string>& names) {
  if (confusion.empty()) return "";
  const std::vector<ClassMetrics> per_class = class_metrics(confusion);
  std::vector<int32_t> shown;  // classes that occur as a target or an answer
  size_t width = 8;
  for (int32_t k = 0; k < confusion.labels; ++k) {
    if (per_class[size_t(k)].support == 0 && per_class[size_t(k)].predicted == 0) continue;
    shown.push_back(k);
    width = std::max(width, name_of(names, k).size() + 1);
  }
  std::string out =
      fmt::format("{:<{}} {:>9} {:>9} {:>9} {:>9}\n", "class", width, "support", "precision", "recall", "f1");
  for (int32_t k : shown) {
    const ClassMetrics& c = per_class[size_t(k)];
    out += fmt::format("{:<{}} {:>9} {:>9.4f} {:>9.4f} {:>9.4f}\n", name_of(names, k), width, c.support, c.precision,
                       c.recall, c.f1);
  }
  out += fmt::format("macro-F1 {:.4f}, balanced accuracy {:.4f}\n", macro_f1(confusion), balanced_accuracy(confusion));
  if (shown.size() > 32) return out + fmt::format("confusion matrix: {} classes, in --json\n", shown.size());
  out += "confusion (rows: target, columns: predicted)\n" + fmt::format("{:<{}}", "", width);
  for (int32_t p : shown) out += fmt::format(" {:>{}}", name_of(names, p), width - 1);
  out += '\n';
  for (int32_t t : shown) {
    out += fmt::format("{:<{}}", name_of(names, t), width);
    for (int32_t p : shown) out += fmt::format(" {:>{}}", confusion.at(t, p), width - 1);
    out += '\n';
  }
  return out;
}

}  // namespace normlab::train
