#include "normlab/train/trainer.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "normlab/dist/data_parallel.hpp"
#include "normlab/error.hpp"
#include "normlab/ops.hpp"
#include "normlab/parallel.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/metrics.hpp"
#include "normlab/train/setup.hpp"
#include "run_output.hpp"

namespace normlab::train {

namespace {

using nlohmann::json;

}  // namespace

// ---------------------------------------------------------------- construction

Trainer::Trainer(RunConfig config, TrainLogger* logger, io::StopFlag stop)
    : config_(std::move(config)),
      stop_flag_(stop),
      data_files_(fingerprint_data(config_, stop)),
      task_(build_task(config_, stop)),
      train_set_(load_train_set(config_, task_, stop, &train_use_)),
      valid_set_(load_valid_set(config_, task_, stop, &valid_use_)) {
  // data-parallel: the ranks of this run (mpirun -np N; one process otherwise), recorded in the
  // resolved config so that a resume on another N is refused. Rank 0 (or the one process) owns
  // the run's output; the other ranks follow (run_output.hpp).
  dp_ = std::make_unique<dist::DataParallel>(dist::world(), config_);
  config_.train.world_size = dp_->size();
  output_ = dp_->is_writer() ? make_run_owner(logger) : make_run_follower();
  logger_ = &output_->logger();
  valid_batches_ = evaluation_batches(valid_set_, config_, stop);
  train_max_len_ = train_max_length(config_, train_set_);
  buckets_ = data::make_length_buckets(static_cast<int32_t>(config_.task.eval_max_len),
                                       static_cast<int32_t>(config_.task.bucket_width), train_max_len_);
  baselines_ = {task_.num_classes(), majority_label(config_, task_, train_set_), task_.output_vocab.tokens()};

  // The data stream gets its own seed, so changing the model's initialization does not change the batches.
  const uint64_t data_seed = data::derive_seed(static_cast<uint64_t>(config_.train.seed), 1);
  if (train_set_) {
    data::SamplerOptions options;
    options.batch_size = config_.train.batch_size;
    options.shuffle = true;
    options.drop_last = false;
    options.seed = data_seed;
    options.mask = build_mask_config(config_);
    batch_sampler_ = std::make_unique<data::BatchSampler>(*train_set_, options);
  } else {
    data::GeneratorOptions options;
    options.batch_size = config_.train.batch_size;
    options.min_len = static_cast<int32_t>(config_.task.min_len);
    options.max_len = static_cast<int32_t>(config_.task.max_len);
    options.seed = data_seed;
    options.regime = data::parse_length_regime(config_.task.length_regime);
    options.bucket_width = static_cast<int32_t>(config_.task.bucket_width);
    generator_ = std::make_unique<data::GeneratorSampler>(task_, options);
  }

  model_ = std::make_unique<nn::EncoderModel>(build_model_options(config_, task_));
  model_->train();

  optim::OptimizerOptions optimizer_options;
  optimizer_options.name = config_.optim.name;
  optimizer_options.lr = static_cast<float>(config_.optim.lr);
  optimizer_options.momentum = static_cast<float>(config_.optim.momentum);
  optimizer_options.beta1 = static_cast<float>(config_.optim.beta1);
  optimizer_options.beta2 = static_cast<float>(config_.optim.beta2);
  optimizer_options.eps = static_cast<float>(config_.optim.eps);
  optimizer_options.weight_decay = static_cast<float>(config_.optim.weight_decay);
  optimizer_options.decay_all = config_.optim.decay_all;
  optimizer_ = std::make_unique<optim::Optimizer>(optimizer_options, model_->named_parameters());

  schedule_.name = config_.optim.schedule;
  schedule_.warmup_steps = config_.optim.warmup_steps;
  schedule_.total_steps = config_.train.steps;
  schedule_.min_lr_ratio = static_cast<float>(config_.optim.min_lr_ratio);
}

Trainer::~Trainer() = default;

// ---------------------------------------------------------------- one step

data::Batch Trainer::next_batch() { return batch_sampler_ ? batch_sampler_->next() : generator_->next(); }

StepRecord Trainer::train_step(const data::Batch& batch, bool diagnostics) {
  StepRecord record;
  record.step = step_ + 1;
  record.tokens = batch.num_real_tokens;
  record.sequences = batch.batch_size();
  record.shortest = batch.min_length();
  record.longest = batch.max_length();
  const float lr = static_cast<float>(config_.optim.lr) * optim::lr_factor(schedule_, step_);
  record.lr = shortest(lr);

  model_->train();
  if (dp_->active()) return data_parallel_step(batch, diagnostics, std::move(record), lr);  // data-parallel
  nn::Diagnostics diag;
  const nn::DropoutStep dropout{uint64_t(record.step), 0};  // this update's masks
  Tensor logits = model_->forward(batch.tokens, batch.offsets, diagnostics ? &diag : nullptr, dropout);  // (rows, V)
  Tensor loss = ops::cross_entropy(logits, batch.targets);
  const float loss_value = loss.item();
  record.loss = shortest(loss_value);
  record.accuracy = batch.num_targets ? double(count_correct(logits, batch.targets)) / double(batch.num_targets) : 0.0;
  if (diagnostics) record.residual_rms = diag.residual_rms;
  if (!std::isfinite(loss_value)) {
    record.diverged = true;
    record.grad_norm = std::numeric_limits<double>::quiet_NaN();
    return record;
  }

  optimizer_->zero_grad();
  loss.backward();
  apply_update(record, lr, diagnostics);
  return record;
}

void Trainer::apply_update(StepRecord& record, float lr, bool diagnostics) {
  if (diagnostics) record.layer_grad_norms = nn::per_layer_grad_norms(*model_, config_.model.layers);
  record.grad_norm = optim::clip_grad_norm(optimizer_->params(), config_.optim.clip_grad_norm);
  if (!std::isfinite(record.grad_norm)) {
    record.diverged = true;
    optimizer_->zero_grad();
    return;
  }
  optimizer_->step(lr);
  ++step_;
}

std::optional<EvalMetrics> Trainer::evaluate_valid() {
  // data-parallel: rank 0 evaluates alone while the others wait at the next step's reduction, so
  // it finishes the evaluation (the ranks agree on a stop only inside that reduction).
  return evaluate_unless_stopped(*model_, valid_batches_, buckets_, dp_->active() ? nullptr : stop_flag_, false,
                                 baselines_);
}

int Trainer::stop_request() const { return dp_->active() ? dp_->agreed_stop() : io::stop_signal(stop_flag_); }

// ---------------------------------------------------------------- the run directory

void Trainer::start(const std::string& dir) {
  // vocab.json: the ids of every token and label (docs/run-directory.md).
  output_->open_new(dir, config_,
                    nlohmann::ordered_json{{"tokens", task_.input_vocab.tokens()}, {"labels", task_.output_vocab.tokens()}}
                            .dump(1) +
                        "\n",
                    DataRecord{data_files_});
}

void Trainer::resume(const std::string& dir, bool accept_changed_data) {
  accept_changed_data_ = accept_changed_data;
  accepted_changes_.clear();
  load_checkpoint(output_->open_existing(dir));
  output_->resumed(config_, step_, data_files_, accepted_changes_);
  for (const DataChange& change : accepted_changes_)
    logger_->info(fmt::format("--accept-changed-data: {}; continuing on the new content (recorded in {}/data.json)",
                              change.describe(), dir));
  logger_->info(fmt::format("resumed {} at step {}", dir, step_));
  if (schedule_.restart_step == step_) {
    const double base = config_.optim.lr;
    const double floor = base * config_.optim.min_lr_ratio;
    logger_->info(fmt::format("lr schedule: train.steps is now {}; the cosine continues from the lr reached at step {} "
                              "({:.3e}) down to {:.3e} (optim.min_lr_ratio) at step {}, without a jump{}",
                              config_.train.steps, step_, base * schedule_.restart_factor, floor, config_.train.steps,
                              base * schedule_.restart_factor == 0.0
                                  ? "; the lr is 0 from here, so the extra steps leave the weights unchanged"
                                  : ""));
  }
}

// ---------------------------------------------------------------- the loop

bool Trainer::record_eval() {
  if (!output_->evaluates()) return true;
  std::optional<EvalMetrics> metrics = evaluate_valid();
  if (!metrics) return false;
  json record = to_json(*metrics);
  record["step"] = step_;
  record["split"] = "valid";
  output_->append_metrics(record);
  logger_->eval(step_, *metrics);
  last_eval_step_ = step_;
  last_eval_ = metrics;
  // Chosen on trained lengths: the loss on unseen lengths can grow while the task is being learned.
  // Strict comparisons keep the earliest of equal evaluations.
  const ValidPoint point = valid_point(step_, *metrics);
  if (!best_loss_ || selection_loss(point) < selection_loss(*best_loss_)) best_loss_ = point;
  if (!best_accuracy_ || selection_accuracy(point) > selection_accuracy(*best_accuracy_)) best_accuracy_ = point;
  return true;
}

TrainSummary Trainer::fit() {
  if (!output_->is_open()) throw UsageError("Trainer::fit: call start() or resume() first");
  if (config_.train.threads > 0) set_num_threads(static_cast<int>(config_.train.threads));
  session_start_ = std::chrono::steady_clock::now();
  const TrainConfig& t = config_.train;
  logger_->info(describe_run());
  auto checkpoint = [&] {
    last_checkpoint_step_ = step_;
    output_->checkpoint(step_, [&](const std::string& path) { save_checkpoint(path); });
  };
  std::optional<int64_t> diverged_at;
  // Polled between steps (a step is never cut in half, so the checkpoint holds exactly the state
  // after the last step in metrics.jsonl) and between evaluation batches.
  auto stopped = [&] { return stop_request() != 0; };
  // An evaluation due at the checkpoint's step that a stop request abandoned comes first.
  if (t.eval_every > 0 && step_ > 0 && step_ % t.eval_every == 0 && last_eval_step_ != step_ && !stopped()) {
    record_eval();
  }
  while (step_ < t.steps && !stopped()) {
    const bool diagnostics = t.diagnostics_every > 0 && (step_ + 1) % t.diagnostics_every == 0;
    data::Batch batch = next_batch();
    const auto begin = std::chrono::steady_clock::now();
    StepRecord record = train_step(batch, diagnostics);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    record.tokens_per_s = seconds > 0 ? double(record.tokens) / seconds : 0.0;
    output_->append_metrics(to_json(record));
    last_record_ = record;
    logger_->step(record, t.steps);
    if (record.diverged) {
      diverged_at = record.step;
      break;
    }
    if (t.eval_every > 0 && step_ % t.eval_every == 0 && !record_eval()) break;
    if (t.checkpoint_every > 0 && step_ % t.checkpoint_every == 0) checkpoint();
  }
  // Finished: a last evaluation. Finished or stopped on request: a checkpoint of the final state
  // (a diverged run keeps its last periodic one: the broken state is not worth resuming).
  if (!diverged_at && !stopped() && last_eval_step_ != step_) record_eval();
  if (!diverged_at && last_checkpoint_step_ != step_) checkpoint();

  TrainSummary summary = make_summary();
  summary.stop_request = stop_request();
  summary.diverged = diverged_at.has_value();
  summary.diverged_at_step = diverged_at;
  // A stop that came after the last step and its evaluation changes nothing: the run is finished.
  if (summary.interrupted() && step_ == t.steps && last_eval_step_ == step_) summary.stop_request = 0;
  if (summary.interrupted()) return summary;  // not finished: no summary.json, so resume continues it
  output_->write_summary(to_json(summary));
  return summary;
}

std::string Trainer::describe_run() const {
  const std::string title = task_title(config_);
  const std::string kind = task_.is_data_defined()
                               ? fmt::format(" ({}: {} tokens, {} labels)", task_.name,
                                             task_.input_vocab_size() - task_.input_vocab.num_specials(), task_.num_classes())
                               : title != task_.name ? fmt::format(" ({})", task_.name) : "";
  return fmt::format("task {}{}, {} parameters, {} threads; training on {}, validating on {}", title, kind,
                     model_->num_parameters(), num_threads(),
                     train_set_ ? fmt::format("{} examples of {} ({})", train_set_->size(), *config_.task.train_file,
                                              train_use_.describe())
                                : fmt::format("generated sequences of lengths {}-{}{}", config_.task.min_len,
                                              config_.task.max_len,
                                              config_.task.length_regime == "mixed"
                                                  ? ""
                                                  : fmt::format(" in {} batches (task.length_regime)",
                                                                config_.task.length_regime)),
                     config_.task.valid_file ? fmt::format("{} examples of {} ({})", valid_set_.size(),
                                                           *config_.task.valid_file, valid_use_.describe())
                                             : fmt::format("{} generated examples", valid_set_.size()));
}

TrainSummary Trainer::make_summary() const {
  TrainSummary summary;
  summary.steps = step_;
  summary.planned_steps = config_.train.steps;
  summary.wall_time_s =
      previous_wall_time_s_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - session_start_).count();
  summary.threads = num_threads();
  summary.world_size = dp_->size();  // data-parallel
  summary.num_parameters = model_->num_parameters();
  summary.train_max_len = train_max_len_;
  summary.final_train = last_record_;
  summary.final_valid_step = last_eval_step_;
  summary.final_valid = last_eval_;
  summary.best_valid = best_loss_;
  summary.best_valid_accuracy = best_accuracy_;
  return summary;
}

}  // namespace normlab::train
