// The trainer's part of a checkpoint: what it writes into checkpoint.safetensors beside the model
// and the optimizer state (train/checkpoint.hpp writes and reads the file itself), and how a resume
// checks and restores it. The layout is in docs/run-directory.md.
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/metrics.hpp"
#include "normlab/train/setup.hpp"
#include "normlab/train/trainer.hpp"
#include "run_output.hpp"

namespace normlab::train {

using nlohmann::json;

namespace {

uint64_t json_u64(const json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number_unsigned()) {
    if (object.is_object() && object.contains(key) && object.at(key).is_number_integer() &&
        object.at(key).get<int64_t>() >= 0) {
      return static_cast<uint64_t>(object.at(key).get<int64_t>());
    }
    throw InputError(fmt::format("{}: \"{}\" must be a non-negative integer", where, key));
  }
  return object.at(key).get<uint64_t>();
}

}  // namespace

json Trainer::trainer_state() const {
  const double session = std::chrono::duration<double>(std::chrono::steady_clock::now() - session_start_).count();
  return {{"wall_time_s", previous_wall_time_s_ + session},
          {"last_record", last_record_ ? to_json(*last_record_) : json(nullptr)},
          {"last_eval_step", last_eval_step_ ? json(*last_eval_step_) : json(nullptr)},
          {"last_eval", last_eval_ ? to_json(*last_eval_) : json(nullptr)},
          {"best_valid", best_loss_ ? to_json(*best_loss_) : json(nullptr)},
          {"best_valid_accuracy", best_accuracy_ ? to_json(*best_accuracy_) : json(nullptr)},
          {"monitor_best",
           monitor_best_ ? json{{"step", monitor_best_->step}, {"value", monitor_best_->value}} : json(nullptr)},
          {"timing", clock_.state_json()}};
}

void Trainer::restore_trainer_state(const json& state, const std::string& where) {
  if (!state.is_object()) throw InputError(fmt::format("{}: metadata 'trainer' must be a JSON object", where));
  auto get = [&](const char* key) -> const json& {
    if (!state.contains(key)) throw InputError(fmt::format("{}: metadata 'trainer': missing \"{}\"", where, key));
    return state.at(key);
  };
  const json& wall = get("wall_time_s");
  previous_wall_time_s_ = wall.is_number() ? wall.get<double>() : 0.0;
  const json& record = get("last_record");
  last_record_.reset();
  if (!record.is_null()) last_record_ = step_record_from_json(record, where + ": metadata 'trainer'");
  const json& eval_step = get("last_eval_step");
  last_eval_step_.reset();
  last_eval_.reset();
  if (!eval_step.is_null()) {
    if (!eval_step.is_number_integer())
      throw InputError(fmt::format("{}: metadata 'trainer': bad last_eval_step", where));
    last_eval_step_ = eval_step.get<int64_t>();
    last_eval_ = eval_metrics_from_json(get("last_eval"), where + ": metadata 'trainer': last_eval");
  }
  best_loss_ = valid_point_from_json(get("best_valid"), where);
  best_accuracy_ = valid_point_from_json(get("best_valid_accuracy"), where);
  // Checkpoints written before train.keep_best have no monitor_best: the next evaluation starts it.
  monitor_best_.reset();
  if (const auto it = state.find("monitor_best"); it != state.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("step") || !it->at("step").is_number_integer() || !it->contains("value") ||
        !it->at("value").is_number())
      throw InputError(
          fmt::format("{}: metadata 'trainer': monitor_best must be {{\"step\": N, \"value\": X}}", where));
    monitor_best_ = MonitorBest{it->at("step").get<int64_t>(), it->at("value").get<double>()};
  }
  // Checkpoints written before timing records have none: the earlier sessions' time is unknown.
  if (const auto it = state.find("timing"); it != state.end()) clock_.restore(*it, where + ": metadata 'trainer'");
}

void Trainer::save_checkpoint(const std::string& path) const {
  write_checkpoint(path, *model_, optimizer_.get(), checkpoint_metadata());
}

std::unique_ptr<io::AtomicFileWriter> Trainer::stage_checkpoint_file(const std::string& path) const {
  return stage_checkpoint(path, *model_, optimizer_.get(), checkpoint_metadata());
}

std::map<std::string, std::string> Trainer::checkpoint_metadata() const {
  std::map<std::string, std::string> metadata;
  metadata["normlab_version"] = NORMLAB_VERSION;
  metadata["config"] = to_json(config_).dump();
  metadata["step"] = std::to_string(step_);
  metadata["optimizer_step_count"] = std::to_string(optimizer_->step_count());
  metadata["train_max_len"] = std::to_string(train_max_len_);
  if (batch_sampler_) {
    metadata["sampler"] =
        json{{"kind", "dataset"}, {"state", data::sampler_state_to_json(batch_sampler_->state())}}.dump();
  } else {
    metadata["sampler"] =
        json{{"kind", "generator"}, {"state", data::generator_state_to_json(generator_->state())}}.dump();
  }
  // The vocabulary and labels, so the checkpoint alone maps strings to ids (every task).
  metadata["vocabulary"] = json(task_.input_vocab.tokens()).dump();
  metadata["labels"] = json(task_.output_vocab.tokens()).dump();
  if (baselines_.majority_label >= 0) metadata["majority_label"] = task_.output_vocab.token(baselines_.majority_label);
  if (schedule_.restart_step >= 0) {
    metadata["schedule"] =
        json{{"restart_step", schedule_.restart_step}, {"restart_factor", schedule_.restart_factor}}.dump();
  }
  metadata["data"] = to_json(data_files_).dump();
  if (task_.is_masked_lm()) metadata["task_characters"] = json(text_task_characters(task_)).dump();
  metadata["trainer"] = trainer_state().dump();
  return metadata;
}

void Trainer::check_data_unchanged(const io::SafetensorsFile& file, const std::string& path) {
  // A checkpoint of a build before data fingerprints records none: nothing to compare.
  if (file.metadata.count("data") == 0) return;
  const std::vector<DataChange> changes =
      changed_data(fingerprint_from_json(metadata_json(file, "data"), path + ": metadata 'data'"), data_files_);
  if (changes.empty()) return;
  if (!accept_changed_data_) {
    throw InputError(
        fmt::format("{} since the checkpoint {} was written; nothing was changed. Restore the file, or "
                    "resume with --accept-changed-data to continue on the new content (recorded in "
                    "data.json)",
                    changes.front().describe(), path));
  }
  accepted_changes_ = changes;
}

void Trainer::load_checkpoint(const std::string& path) {
  io::SafetensorsFile file = read_checkpoint(path);
  // The checkpoint's own config must describe this run (up to how long / how often).
  RunConfig saved = config_from_json(metadata_json(file, "config"), path + ": metadata 'config'", ".", false);
  check_resume_compatible(saved, config_, path);
  check_data_unchanged(file, path);
  if (task_.is_masked_lm()) {
    json characters = metadata_json(file, "task_characters");
    if (characters != json(text_task_characters(task_))) {
      throw InputError(fmt::format("{}: the characters of {} changed since this checkpoint was written", path,
                                   config_.task.train_file.value_or("the training file")));
    }
  }
  if (task_.is_data_defined()) {
    if (metadata_json(file, "vocabulary") != json(task_.input_vocab.tokens()) ||
        metadata_json(file, "labels") != json(task_.output_vocab.tokens())) {
      throw InputError(fmt::format("{}: the tokens or labels of {} changed since this checkpoint was written", path,
                                   config_.task.train_file.value_or("the training file")));
    }
  }
  const int64_t step = metadata_int(file, "step");
  if (step > config_.train.steps) {
    throw InputError(
        fmt::format("{}: checkpoint is at step {}, beyond train.steps = {}", path, step, config_.train.steps));
  }
  // Parse and check every piece before changing anything.
  std::map<std::string, std::vector<float>> optimizer_state = optimizer_tensors(file, *optimizer_);
  const int64_t optimizer_steps = metadata_int(file, "optimizer_step_count");
  // dropout_rng: a PCG32 state that checkpoints of early development builds carry. Dropout masks are keyed
  // on (seed, step) (kernels/dropout.hpp), so the field is validated and not used
  // (docs/run-directory.md).
  if (file.metadata.count("dropout_rng") != 0) {
    const json rng = metadata_json(file, "dropout_rng");
    json_u64(rng, "state", path + ": metadata 'dropout_rng'");
    json_u64(rng, "inc", path + ": metadata 'dropout_rng'");
  }
  const json sampler = metadata_json(file, "sampler");
  const std::string where = path + ": metadata 'sampler'";
  const std::string kind = sampler.is_object() && sampler.contains("kind") && sampler.at("kind").is_string()
                               ? sampler.at("kind").get<std::string>()
                               : "";
  if (kind != (batch_sampler_ ? "dataset" : "generator") || !sampler.contains("state")) {
    throw InputError(fmt::format("{}: expected a {} sampler state", where, batch_sampler_ ? "dataset" : "generator"));
  }
  const json saved_state = metadata_json(file, "trainer");
  // The schedule the checkpoint trained under (its train.steps and any earlier restart), continued
  // under this run's train.steps (optim/schedule.hpp: no jump in the lr).
  optim::ScheduleOptions saved_schedule = schedule_;
  saved_schedule.total_steps = saved.train.steps;
  saved_schedule.restart_step = -1;
  if (file.metadata.count("schedule") != 0) {
    const json restart = metadata_json(file, "schedule");
    const std::string at = path + ": metadata 'schedule'";
    const uint64_t restart_step = json_u64(restart, "restart_step", at);
    if (!restart.contains("restart_factor") || !restart.at("restart_factor").is_number() ||
        !(restart.at("restart_factor").get<double>() >= 0.0 && restart.at("restart_factor").get<double>() <= 1.0) ||
        restart_step > uint64_t(step)) {
      throw InputError(fmt::format("{}: expected restart_step <= step and restart_factor in [0, 1]", at));
    }
    saved_schedule.restart_step = static_cast<int64_t>(restart_step);
    saved_schedule.restart_factor = restart.at("restart_factor").get<float>();
  }
  const optim::ScheduleOptions continued = optim::extend_schedule(saved_schedule, step, config_.train.steps);

  load_model_state(file, *model_);
  optimizer_->load_state(optimizer_state, optimizer_steps, path);
  if (batch_sampler_) {
    batch_sampler_->restore(data::sampler_state_from_json(sampler.at("state"), where), where);
  } else {
    generator_->restore(data::generator_state_from_json(sampler.at("state"), where));
  }
  step_ = step;
  schedule_ = continued;
  restore_trainer_state(saved_state, path);
  last_checkpoint_step_ = step_;
}

}  // namespace normlab::train
