#include "normlab/train/records.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "normlab/error.hpp"
#include "normlab/provenance.hpp"

namespace normlab::train {

namespace {

using nlohmann::json;

json finite_or_null(double value) { return std::isfinite(value) ? json(value) : json(nullptr); }

double number_or_nan(const json& object, const char* key) {
  if (!object.contains(key) || !object.at(key).is_number()) return std::numeric_limits<double>::quiet_NaN();
  return object.at(key).get<double>();
}

// The step every record read back carries; InputError "WHERE: malformed WHAT {...}" without one.
int64_t step_of(const json& value, const std::string& where, const char* what) {
  if (!value.is_object() || !value.contains("step") || !value.at("step").is_number_integer()) {
    throw InputError(fmt::format("{}: malformed {} {}", where, what, value.dump()));
  }
  return value.at("step").get<int64_t>();
}

}  // namespace

ValidPoint valid_point(int64_t step, const EvalMetrics& metrics) {
  return ValidPoint{step,           metrics.loss,  metrics.accuracy, metrics.sequence_accuracy, metrics.trained,
                    metrics.unseen, metrics.labels};
}

double selection_loss(const ValidPoint& point) {
  return point.trained && point.trained->targets > 0 ? point.trained->loss : point.loss;
}

double selection_accuracy(const ValidPoint& point) {
  return point.trained && point.trained->targets > 0 ? point.trained->accuracy : point.accuracy;
}

json to_json(const ValidPoint& point) {
  json out = {{"step", point.step},
              {"loss", point.loss},
              {"accuracy", point.accuracy},
              {"sequence_accuracy", point.sequence_accuracy}};
  if (point.trained) {
    out["trained"] = to_json(*point.trained, point.labels);
    out["unseen"] = point.unseen ? to_json(*point.unseen, point.labels) : json(nullptr);
  }
  if (!point.labels.empty()) out["labels"] = point.labels;
  return out;
}

std::optional<ValidPoint> valid_point_from_json(const json& value, const std::string& where) {
  if (value.is_null()) return std::nullopt;
  ValidPoint point;
  point.step = step_of(value, where, "validation point");
  point.loss = number_or_nan(value, "loss");
  point.accuracy = number_or_nan(value, "accuracy");
  point.sequence_accuracy = number_or_nan(value, "sequence_accuracy");
  if (value.contains("trained")) {
    point.trained = group_metrics_from_json(value.at("trained"), where + ": trained");
    if (value.contains("unseen") && !value.at("unseen").is_null())
      point.unseen = group_metrics_from_json(value.at("unseen"), where + ": unseen");
  }
  if (value.contains("labels") && value.at("labels").is_array())
    for (const json& label : value.at("labels"))
      if (label.is_string()) point.labels.push_back(label.get<std::string>());
  return point;
}

std::string record_line(const json& record) {
  nlohmann::ordered_json line;
  for (const char* key : {"step", "split"}) {
    if (record.contains(key)) line[key] = record.at(key);
  }
  for (const auto& [key, value] : record.items()) {
    if (key != "step" && key != "split") line[key] = value;
  }
  return line.dump();
}

json to_json(const StepRecord& record) {
  json out = {{"step", record.step},
              {"loss", finite_or_null(record.loss)},
              {"accuracy", record.accuracy},
              {"lr", record.lr},
              {"grad_norm", finite_or_null(record.grad_norm)},
              {"tokens", record.tokens},
              {"sequences", record.sequences},
              {"shortest", record.shortest},
              {"longest", record.longest},
              {"tokens_per_s", record.tokens_per_s}};
  if (record.z_loss) out["z_loss"] = finite_or_null(*record.z_loss);
  const std::pair<const char*, const std::vector<double>*> lists[] =
      {{"residual_rms", &record.residual_rms},
       {"layer_grad_norms", &record.layer_grad_norms},
       {"attention_max_logit", &record.attention_max_logit},
       {"attention_entropy_mean", &record.attention_entropy_mean},
       {"attention_entropy_min", &record.attention_entropy_min},
       {"update_ratio", &record.update_ratio}};
  for (const auto& [key, list] : lists) {
    if (list->empty()) continue;
    json values = json::array();
    for (double v : *list) values.push_back(finite_or_null(v));
    out[key] = values;
  }
  if (record.log_z_mean) out["log_z_mean"] = finite_or_null(*record.log_z_mean);
  if (record.log_z_max_abs) out["log_z_max_abs"] = finite_or_null(*record.log_z_max_abs);
  if (record.diverged) out["diverged"] = true;
  return out;
}

std::string step_record_line(const StepRecord& record) {
  // The keys in record_line's order ("step", then sorted), each value as to_json gives it.
  using ordered = nlohmann::ordered_json;
  const auto finite = [](double value) { return std::isfinite(value) ? ordered(value) : ordered(nullptr); };
  const auto list = [&](const std::vector<double>& values) {
    ordered out = ordered::array();
    for (double v : values) out.push_back(finite(v));
    return out;
  };
  ordered line;
  line["step"] = record.step;
  line["accuracy"] = record.accuracy;
  const std::pair<const char*, const std::vector<double>*> attention[] = {
      {"attention_entropy_mean", &record.attention_entropy_mean},
      {"attention_entropy_min", &record.attention_entropy_min},
      {"attention_max_logit", &record.attention_max_logit}};
  for (const auto& [key, values] : attention)
    if (!values->empty()) line[key] = list(*values);
  if (record.diverged) line["diverged"] = true;
  line["grad_norm"] = finite(record.grad_norm);
  if (!record.layer_grad_norms.empty()) line["layer_grad_norms"] = list(record.layer_grad_norms);
  if (record.log_z_max_abs) line["log_z_max_abs"] = finite(*record.log_z_max_abs);
  if (record.log_z_mean) line["log_z_mean"] = finite(*record.log_z_mean);
  line["longest"] = record.longest;
  line["loss"] = finite(record.loss);
  line["lr"] = record.lr;
  if (!record.residual_rms.empty()) line["residual_rms"] = list(record.residual_rms);
  line["sequences"] = record.sequences;
  line["shortest"] = record.shortest;
  line["tokens"] = record.tokens;
  line["tokens_per_s"] = record.tokens_per_s;
  if (!record.update_ratio.empty()) line["update_ratio"] = list(record.update_ratio);
  if (record.z_loss) line["z_loss"] = finite(*record.z_loss);
  return line.dump();
}

StepRecord step_record_from_json(const json& value, const std::string& where) {
  StepRecord record;
  record.step = step_of(value, where, "step record");
  record.loss = number_or_nan(value, "loss");
  record.accuracy = number_or_nan(value, "accuracy");
  record.lr = number_or_nan(value, "lr");
  record.grad_norm = number_or_nan(value, "grad_norm");
  record.tokens_per_s = number_or_nan(value, "tokens_per_s");
  const std::pair<const char*, int64_t*> composition[] = {{"tokens", &record.tokens},
                                                          {"sequences", &record.sequences},
                                                          {"shortest", &record.shortest},
                                                          {"longest", &record.longest}};
  for (auto [key, into] : composition) {
    if (!value.contains(key)) continue;
    if (!value.at(key).is_number_integer() || value.at(key).get<int64_t>() < 0)
      throw InputError(fmt::format("{}: step record: \"{}\" must be a non-negative integer", where, key));
    *into = value.at(key).get<int64_t>();
  }
  auto read_list = [&](const char* key, std::vector<double>& into) {
    if (!value.contains(key)) return;
    if (!value.at(key).is_array()) throw InputError(fmt::format("{}: step record: \"{}\" must be a list", where, key));
    for (const json& v : value.at(key)) into.push_back(v.is_number() ? v.get<double>() : std::nan(""));
  };
  read_list("residual_rms", record.residual_rms);
  read_list("layer_grad_norms", record.layer_grad_norms);
  read_list("attention_max_logit", record.attention_max_logit);
  read_list("attention_entropy_mean", record.attention_entropy_mean);
  read_list("attention_entropy_min", record.attention_entropy_min);
  read_list("update_ratio", record.update_ratio);
  for (auto [key, into] : {std::pair{"log_z_mean", &record.log_z_mean},
                           std::pair{"log_z_max_abs", &record.log_z_max_abs}, std::pair{"z_loss", &record.z_loss}}) {
    if (value.contains(key)) *into = number_or_nan(value, key);
  }
  if (value.contains("diverged")) {
    if (!value.at("diverged").is_boolean())
      throw InputError(fmt::format("{}: step record: \"diverged\" must be true or false", where));
    record.diverged = value.at("diverged").get<bool>();
  }
  return record;
}

json to_json(const TrainSummary& summary) {
  json final_valid = nullptr;
  if (summary.final_valid) {
    final_valid = to_json(*summary.final_valid);
    final_valid["step"] = summary.final_valid_step.value_or(0);
  }
  json final_train = nullptr;
  if (summary.final_train) {
    const StepRecord& r = *summary.final_train;
    final_train = {{"step", r.step},
                   {"loss", finite_or_null(r.loss)},
                   {"accuracy", r.accuracy},
                   {"lr", r.lr},
                   {"grad_norm", finite_or_null(r.grad_norm)}};
  }
  return {{"steps", summary.steps},
          {"planned_steps", summary.planned_steps},
          {"diverged", summary.diverged},
          {"diverged_at_step", summary.diverged_at_step ? json(*summary.diverged_at_step) : json(nullptr)},
          {"wall_time_s", summary.wall_time_s},
          {"threads", summary.threads},
          {"normlab_version", NORMLAB_VERSION},  // what produced it (provenance.hpp)
          {"cpu", cpu_model()},
          {"kernels", kernels_in_use()},
          {"world_size", summary.world_size},  // data-parallel
          {"num_parameters", summary.num_parameters},
          {"train_max_len", summary.train_max_len},
          {"final_train", final_train},
          {"final_valid", final_valid},
          {"best_valid", summary.best_valid ? to_json(*summary.best_valid) : json(nullptr)},
          {"best_valid_accuracy", summary.best_valid_accuracy ? to_json(*summary.best_valid_accuracy) : json(nullptr)},
          {"best_checkpoint", summary.best_checkpoint_step ? json{{"file", "best.safetensors"},
                                                                  {"metric", summary.best_checkpoint_metric},
                                                                  {"step", *summary.best_checkpoint_step},
                                                                  {"value", summary.best_checkpoint_value}}
                                                           : json(nullptr)},
          {"early_stopped_at_step",
           summary.early_stopped_at_step ? json(*summary.early_stopped_at_step) : json(nullptr)}};
}

}  // namespace normlab::train
