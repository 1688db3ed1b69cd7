#include "normlab/train/evaluate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "normlab/autograd.hpp"
#include "normlab/error.hpp"
#include "normlab/io/test_pause.hpp"
#include "normlab/nn/norm.hpp"
#include "normlab/train/metrics.hpp"

namespace normlab::train {

namespace {

struct Totals {
  int64_t sequences = 0, targets = 0, correct = 0, sequences_correct = 0, majority_correct = 0;
  double loss_sum = 0.0;
};

void fill(double& loss, double& accuracy, double& sequence_accuracy, const Totals& t) {
  loss = t.targets ? t.loss_sum / double(t.targets) : 0.0;
  accuracy = t.targets ? double(t.correct) / double(t.targets) : 0.0;
  sequence_accuracy = t.sequences ? double(t.sequences_correct) / double(t.sequences) : 0.0;
}

}  // namespace

GroupMetrics group_metrics(const std::vector<BucketMetrics>& buckets, bool beyond, bool majority_known) {
  GroupMetrics group;
  double loss_sum = 0.0, correct = 0.0, sequences_correct = 0.0;
  int64_t majority_correct = 0;
  for (const BucketMetrics& b : buckets) {
    if (b.bucket.beyond_train_max != beyond) continue;
    group.sequences += b.sequences;
    group.targets += b.targets;
    loss_sum += b.loss * double(b.targets);
    correct += b.accuracy * double(b.targets);
    sequences_correct += b.sequence_accuracy * double(b.sequences);
    majority_correct += b.majority_correct;
    group.confusion.merge(b.confusion);
  }
  if (group.targets > 0) {
    group.loss = loss_sum / double(group.targets);
    group.accuracy = correct / double(group.targets);
    if (majority_known) group.majority_accuracy = double(majority_correct) / double(group.targets);
  }
  if (group.sequences > 0) group.sequence_accuracy = sequences_correct / double(group.sequences);
  return group;
}

namespace {

// The evaluation's totals as metrics: overall, per bucket, the two length groups, the baselines.
EvalMetrics summed_metrics(const Totals& total, const std::vector<Totals>& per_bucket,
                           const std::vector<data::LengthBucket>& buckets, const Baselines& baselines,
                           int64_t num_labels, const std::vector<int64_t>& trained_predictions,
                           const std::vector<Confusion>& bucket_confusion, const Confusion& confusion) {
  EvalMetrics metrics;
  metrics.confusion = confusion;
  metrics.labels = baselines.label_names;
  metrics.sequences = total.sequences;
  metrics.targets = total.targets;
  fill(metrics.loss, metrics.accuracy, metrics.sequence_accuracy, total);
  for (size_t i = 0; i < buckets.size(); ++i) {
    BucketMetrics bucket;
    bucket.bucket = buckets[i];
    bucket.sequences = per_bucket[i].sequences;
    bucket.targets = per_bucket[i].targets;
    fill(bucket.loss, bucket.accuracy, bucket.sequence_accuracy, per_bucket[i]);
    bucket.majority_correct = per_bucket[i].majority_correct;
    bucket.confusion = bucket_confusion[i];
    metrics.buckets.push_back(bucket);
  }
  metrics.majority_known = baselines.majority_label >= 0;
  metrics.trained = group_metrics(metrics.buckets, false, metrics.majority_known);
  // A model that answers one label everywhere has collapsed, whatever that label's accuracy.
  if (metrics.trained.targets > 0 && !trained_predictions.empty())
    metrics.trained.top_prediction_share =
        double(*std::max_element(trained_predictions.begin(), trained_predictions.end())) /
        double(metrics.trained.targets);
  GroupMetrics unseen = group_metrics(metrics.buckets, true, metrics.majority_known);
  if (unseen.targets > 0) metrics.unseen = unseen;
  if (num_labels > 0) {
    metrics.uniform_loss = std::log(double(num_labels));
    metrics.uniform_accuracy = 1.0 / double(num_labels);
  }
  return metrics;
}

}  // namespace

EvalMetrics evaluate(nn::EncoderModel& model, const std::vector<data::Batch>& batches,
                     const std::vector<data::LengthBucket>& buckets, const Baselines& baselines) {
  return *evaluate_unless_stopped(model, batches, buckets, nullptr, false, baselines);
}

std::optional<EvalMetrics> evaluate_unless_stopped(nn::EncoderModel& model, const std::vector<data::Batch>& batches,
                                                   const std::vector<data::LengthBucket>& buckets, io::StopFlag stop,
                                                   bool batch_statistics, const Baselines& baselines) {
  const bool was_training = model.is_training();
  model.eval();
  if (batch_statistics) {
    for (auto& layer : model.encoder.layers)
      for (nn::NormLayer* norm : {layer->norm1.get(), layer->norm2.get()})
        if (dynamic_cast<nn::BatchNorm*>(norm) != nullptr) norm->train(true);
    if (dynamic_cast<nn::BatchNorm*>(model.encoder.norm.get()) != nullptr) model.encoder.norm->train(true);
  }
  NoGradGuard no_grad;
  int64_t num_labels = baselines.num_labels;
  Totals total;
  std::vector<Totals> per_bucket(buckets.size());
  std::vector<int64_t> trained_predictions;  // (V) how often each label was predicted on trained lengths
  Confusion confusion;                       // (V, V) all targets
  std::vector<Confusion> bucket_confusion(buckets.size());
  for (const data::Batch& batch : batches) {
    if (&batch == batches.data() + 1) io::test_pause("eval", 0, stop);  // a test hook: held before the second batch
    if (io::stop_signal(stop) != 0) {
      model.train(was_training);
      return std::nullopt;
    }
    Tensor logits = model.forward(batch.tokens, batch.offsets);  // (rows, V)
    const int64_t V = logits.size(1);
    if (num_labels <= 0) num_labels = V;
    const float* values = logits.data();
    const bool per_sequence = batch.target_kind == data::TargetKind::per_sequence;
    trained_predictions.resize(size_t(V), 0);
    if (confusion.labels == 0) {
      confusion = Confusion(static_cast<int32_t>(V));
      for (Confusion& c : bucket_confusion) c = Confusion(static_cast<int32_t>(V));
    }
    for (int64_t b = 0; b < batch.batch_size(); ++b) {
      const int64_t index = data::find_bucket(buckets, static_cast<int32_t>(batch.length(b)));
      const bool trained_length = index >= 0 && !buckets[size_t(index)].beyond_train_max;
      // Rows of sequence b: its tokens, or its single pooled row.
      const int64_t first = per_sequence ? b : batch.offsets[size_t(b)];
      const int64_t last = per_sequence ? b + 1 : batch.offsets[size_t(b) + 1];
      Totals seq;
      seq.sequences = 1;
      for (int64_t row = first; row < last; ++row) {
        if (batch.targets[size_t(row)] < 0) continue;
        seq.targets += 1;
        const int32_t target = batch.targets[size_t(row)];
        seq.loss_sum += row_cross_entropy(values + row * V, V, target);
        const int64_t predicted = argmax_row(values + row * V, V);
        seq.correct += predicted == target ? 1 : 0;
        if (trained_length) ++trained_predictions[size_t(predicted)];
        confusion.add(target, static_cast<int32_t>(predicted));
        if (index >= 0) bucket_confusion[size_t(index)].add(target, static_cast<int32_t>(predicted));
        seq.majority_correct += target == baselines.majority_label ? 1 : 0;
      }
      seq.sequences_correct = seq.correct == seq.targets ? 1 : 0;
      auto add = [&seq](Totals& into) {
        into.sequences += seq.sequences;
        into.targets += seq.targets;
        into.correct += seq.correct;
        into.sequences_correct += seq.sequences_correct;
        into.loss_sum += seq.loss_sum;
        into.majority_correct += seq.majority_correct;
      };
      add(total);
      if (index >= 0) add(per_bucket[size_t(index)]);
    }
  }
  model.train(was_training);
  return summed_metrics(total, per_bucket, buckets, baselines, num_labels, trained_predictions, bucket_confusion,
                        confusion);
}

namespace {

nlohmann::json number_or_null(bool present, double value) {
  return present ? nlohmann::json(value) : nlohmann::json(nullptr);
}

}  // namespace

bool has_length_buckets(const EvalMetrics& metrics) {
  return !(metrics.buckets.size() == 1 && metrics.buckets[0].bucket.min_len == 1 &&
           !metrics.buckets[0].bucket.beyond_train_max);
}

std::string describe_groups(const EvalMetrics& metrics) {
  if (!has_length_buckets(metrics)) {
    // No length split asked for: one held-out figure set. Sequence accuracy is only said where it
    // differs from accuracy (a target per token).
    const GroupMetrics& g = metrics.trained;
    if (g.targets == 0) return "held-out: no targets";
    std::string out = fmt::format("held-out: loss {:.4f}, accuracy {:.4f}", g.loss, g.accuracy);
    if (!g.confusion.empty()) out += fmt::format(", macro-F1 {:.4f}", macro_f1(g.confusion));
    if (g.targets != g.sequences) out += fmt::format(", sequence accuracy {:.4f}", g.sequence_accuracy);
    if (g.majority_accuracy) out += fmt::format(" (majority-label baseline {:.4f})", *g.majority_accuracy);
    if (metrics.uniform_accuracy > 0)
      out += fmt::format("; chance: loss {:.4f}, accuracy {:.4f}", metrics.uniform_loss, metrics.uniform_accuracy);
    return out;
  }
  auto describe = [&](const char* name, const GroupMetrics& g, bool beyond) {
    int32_t lo = 0, hi = 0;
    for (const BucketMetrics& b : metrics.buckets) {
      if (b.bucket.beyond_train_max != beyond || b.sequences == 0) continue;
      lo = lo == 0 ? b.bucket.min_len : std::min(lo, b.bucket.min_len);
      hi = std::max(hi, b.bucket.max_len);
    }
    const std::string lengths = lo == 0 ? "" : lo == hi ? fmt::format(" {}", lo) : fmt::format(" {}-{}", lo, hi);
    if (g.targets == 0) return fmt::format("{} lengths: no targets", name);
    return fmt::format("{} lengths{}: loss {:.4f}, accuracy {:.4f}, sequence accuracy {:.4f}{}", name, lengths, g.loss,
                       g.accuracy, g.sequence_accuracy,
                       g.majority_accuracy ? fmt::format(" (majority-label baseline {:.4f})", *g.majority_accuracy)
                                           : "");
  };
  std::string out = describe("trained", metrics.trained, false);
  if (metrics.unseen) out += "; " + describe("unseen", *metrics.unseen, true);
  if (metrics.uniform_accuracy > 0)
    out += fmt::format("; chance: loss {:.4f}, accuracy {:.4f}", metrics.uniform_loss, metrics.uniform_accuracy);
  return out;
}

nlohmann::json to_json(const GroupMetrics& g, const std::vector<std::string>& label_names) {
  const bool any = g.targets > 0;
  nlohmann::json out = {{"loss", number_or_null(any, g.loss)},
                        {"accuracy", number_or_null(any, g.accuracy)},
                        {"sequence_accuracy", number_or_null(g.sequences > 0, g.sequence_accuracy)},
                        {"sequences", g.sequences},
                        {"targets", g.targets},
                        {"majority_accuracy",
                         number_or_null(g.majority_accuracy.has_value(), g.majority_accuracy.value_or(0.0))},
                        {"top_prediction_share",
                         number_or_null(g.top_prediction_share.has_value(), g.top_prediction_share.value_or(0.0))}};
  out.update(class_metrics_json(g.confusion, label_names));
  return out;
}

nlohmann::json to_json(const EvalMetrics& metrics) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const BucketMetrics& b : metrics.buckets) {
    const bool empty = b.targets == 0;
    buckets.push_back(
        {{"min_len", b.bucket.min_len},
         {"max_len", b.bucket.max_len},
         {"beyond_train", b.bucket.beyond_train_max},
         {"loss", empty ? nlohmann::json(nullptr) : nlohmann::json(b.loss)},
         {"accuracy", empty ? nlohmann::json(nullptr) : nlohmann::json(b.accuracy)},
         {"sequence_accuracy", b.sequences == 0 ? nlohmann::json(nullptr) : nlohmann::json(b.sequence_accuracy)},
         {"count", b.sequences},
         {"targets", b.targets}});
  }
  nlohmann::json out = {{"loss", metrics.loss},
                        {"accuracy", metrics.accuracy},
                        {"sequence_accuracy", metrics.sequence_accuracy},
                        {"sequences", metrics.sequences},
                        {"targets", metrics.targets},
                        {"buckets", buckets},
                        {"trained", to_json(metrics.trained, metrics.labels)},
                        {"unseen", metrics.unseen ? to_json(*metrics.unseen, metrics.labels) : nlohmann::json(nullptr)},
                        {"uniform_loss", metrics.uniform_loss},
                        {"uniform_accuracy", metrics.uniform_accuracy},
                        {"labels", metrics.labels}};
  out.update(class_metrics_json(metrics.confusion, metrics.labels));
  return out;
}

namespace {

const nlohmann::json& member(const nlohmann::json& json, const char* key, const std::string& where) {
  if (!json.is_object() || !json.contains(key)) throw InputError(fmt::format("{}: missing key \"{}\"", where, key));
  return json.at(key);
}

double number_or_zero(const nlohmann::json& json, const char* key, const std::string& where) {
  const nlohmann::json& value = member(json, key, where);
  if (value.is_null()) return 0.0;
  if (!value.is_number()) throw InputError(fmt::format("{}: {}: expected a number", where, key));
  return value.get<double>();
}

int64_t integer(const nlohmann::json& json, const char* key, const std::string& where) {
  const nlohmann::json& value = member(json, key, where);
  if (!value.is_number_integer()) throw InputError(fmt::format("{}: {}: expected an integer", where, key));
  return value.get<int64_t>();
}

// The totals every evaluation record has, a whole set's (EvalMetrics) and a group's (GroupMetrics).
template <class Metrics>
void read_totals(Metrics& metrics, const nlohmann::json& json, const std::string& where) {
  metrics.loss = number_or_zero(json, "loss", where);
  metrics.accuracy = number_or_zero(json, "accuracy", where);
  metrics.sequence_accuracy = number_or_zero(json, "sequence_accuracy", where);
  metrics.sequences = integer(json, "sequences", where);
  metrics.targets = integer(json, "targets", where);
}

}  // namespace

GroupMetrics group_metrics_from_json(const nlohmann::json& g, const std::string& at) {
  GroupMetrics group;
  read_totals(group, g, at);
  const nlohmann::json& majority = member(g, "majority_accuracy", at);
  if (majority.is_number()) group.majority_accuracy = majority.get<double>();
  else if (!majority.is_null()) throw InputError(fmt::format("{}: majority_accuracy: expected a number", at));
  if (g.contains("top_prediction_share") && !g.at("top_prediction_share").is_null()) {  // absent in older records
    if (!g.at("top_prediction_share").is_number())
      throw InputError(fmt::format("{}: top_prediction_share: expected a number", at));
    group.top_prediction_share = g.at("top_prediction_share").get<double>();
  }
  group.confusion = confusion_from_json(g, at);  // absent in older records: empty
  return group;
}

EvalMetrics eval_metrics_from_json(const nlohmann::json& json, const std::string& where) {
  EvalMetrics metrics;
  read_totals(metrics, json, where);
  const nlohmann::json& buckets = member(json, "buckets", where);
  if (!buckets.is_array()) throw InputError(fmt::format("{}: buckets: expected an array", where));
  for (const nlohmann::json& b : buckets) {
    BucketMetrics bucket;
    bucket.bucket.min_len = static_cast<int32_t>(integer(b, "min_len", where));
    bucket.bucket.max_len = static_cast<int32_t>(integer(b, "max_len", where));
    const nlohmann::json& beyond = member(b, "beyond_train", where);
    if (!beyond.is_boolean()) throw InputError(fmt::format("{}: beyond_train: expected true or false", where));
    bucket.bucket.beyond_train_max = beyond.get<bool>();
    bucket.loss = number_or_zero(b, "loss", where);
    bucket.accuracy = number_or_zero(b, "accuracy", where);
    bucket.sequence_accuracy = number_or_zero(b, "sequence_accuracy", where);
    bucket.sequences = integer(b, "count", where);
    bucket.targets = integer(b, "targets", where);
    metrics.buckets.push_back(bucket);
  }
  // Records written before the groups existed: the groups from the buckets, majority unknown.
  auto read_group = [&](const char* key, bool beyond) -> std::optional<GroupMetrics> {
    if (!json.contains(key)) {
      GroupMetrics g = group_metrics(metrics.buckets, beyond, false);
      return beyond && g.targets == 0 ? std::nullopt : std::optional<GroupMetrics>(g);
    }
    const nlohmann::json& g = json.at(key);
    if (g.is_null()) return std::nullopt;
    return group_metrics_from_json(g, fmt::format("{}: {}", where, key));
  };
  metrics.trained = read_group("trained", false).value_or(GroupMetrics{});
  metrics.unseen = read_group("unseen", true);
  metrics.majority_known = metrics.trained.majority_accuracy.has_value();
  metrics.confusion = confusion_from_json(json, where);
  if (json.contains("labels") && json.at("labels").is_array())
    for (const nlohmann::json& name : json.at("labels"))
      if (name.is_string()) metrics.labels.push_back(name.get<std::string>());
  if (json.contains("uniform_loss")) {
    metrics.uniform_loss = number_or_zero(json, "uniform_loss", where);
    metrics.uniform_accuracy = number_or_zero(json, "uniform_accuracy", where);
  }
  return metrics;
}

}  // namespace normlab::train
