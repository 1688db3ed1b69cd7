#include "normlab/train/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "normlab/dist/data_parallel.hpp"
#include "normlab/error.hpp"
#include "normlab/io/test_pause.hpp"
#include "normlab/nn/diagnostics.hpp"
#include "normlab/ops.hpp"
#include "normlab/parallel.hpp"
#include "normlab/train/checkpoint.hpp"
#include "normlab/train/memory.hpp"
#include "normlab/train/metrics.hpp"
#include "normlab/train/setup.hpp"
#include "run_output.hpp"

namespace normlab::train {

namespace {

using nlohmann::json;

double max_keep_nan(double a, double b) { return a != a || b <= a ? a : b; }

// The figures a step's ranks add up beside the gradients (StepReduction::reduce's extra), where
// each lives in that buffer. In order: the z-loss sum (optim.z_loss > 0), then on diagnostics steps
//   residual sum of squares (layers), its count | attention entropy sums (layers x heads), query
//   count | log Z sum, rows | per rank r: max |logit| (layers) and max |log Z|, in slots only rank r
//   fills, so that a sum over ranks (zeros elsewhere) carries every rank's maximum.
// One process is one rank; the same buffer then holds its own figures.
class DiagnosticSums {
 public:
  DiagnosticSums(int64_t layers, int64_t heads, int ranks, bool z_loss, bool diagnostics)
      : layers_(size_t(layers)), heads_(size_t(heads)), ranks_(size_t(ranks)), first_(z_loss ? 1 : 0),
        diagnostics_(diagnostics) {}
  size_t size() const { return first_ + (diagnostics_ ? maxima() + ranks_ * (layers_ + 1) : 0); }
  size_t z_loss() const { return 0; }

  void fill(std::vector<double>& extra, const nn::Diagnostics& diag, const Tensor& logits,
            const std::vector<int64_t>& offsets, int rank) const {
    std::copy(diag.residual_sum_sq.begin(), diag.residual_sum_sq.end(), extra.begin() + long(residual()));
    extra[residual() + layers_] = double(diag.residual_values);
    double* slots = extra.data() + maxima() + size_t(rank) * (layers_ + 1);
    for (size_t l = 0; l < layers_; ++l) {
      const nn::AttentionStatistics a = nn::attention_statistics(diag.attention_qkv[l], offsets, int64_t(heads_));
      std::copy(a.entropy_sum.begin(), a.entropy_sum.end(), extra.begin() + long(entropy() + l * heads_));
      extra[entropy() + layers_ * heads_] = double(a.queries);
      slots[l] = a.max_abs_logit;
    }
    const nn::LogZStatistics log_z = nn::log_z_statistics(logits);
    extra[log_z_sums()] = log_z.sum;
    extra[log_z_sums() + 1] = double(log_z.rows);
    slots[layers_] = log_z.max_abs;
  }

  // The global batch's figures, from the summed buffer.
  void read(const std::vector<double>& extra, StepRecord& record) const {
    const double values = extra[residual() + layers_];
    const double queries = extra[entropy() + layers_ * heads_];
    for (size_t l = 0; l < layers_; ++l) {
      record.residual_rms.push_back(values > 0 ? std::sqrt(extra[residual() + l] / values) : 0.0);
      double sum = 0.0, least = std::numeric_limits<double>::infinity();
      for (size_t h = 0; h < heads_; ++h) {
        const double mean = queries > 0 ? extra[entropy() + l * heads_ + h] / queries : 0.0;
        sum += mean;
        least = h == 0 ? mean : std::min(least, mean);
      }
      record.attention_entropy_mean.push_back(sum / double(heads_));
      record.attention_entropy_min.push_back(least);
      double largest = 0.0;
      for (size_t r = 0; r < ranks_; ++r) largest = max_keep_nan(largest, extra[maxima() + r * (layers_ + 1) + l]);
      record.attention_max_logit.push_back(largest);
    }
    const double rows = extra[log_z_sums() + 1];
    record.log_z_mean = rows > 0 ? extra[log_z_sums()] / rows : 0.0;
    double largest = 0.0;
    for (size_t r = 0; r < ranks_; ++r) largest = max_keep_nan(largest, extra[maxima() + r * (layers_ + 1) + layers_]);
    record.log_z_max_abs = largest;
  }

 private:
  size_t residual() const { return first_; }
  size_t entropy() const { return residual() + layers_ + 1; }
  size_t log_z_sums() const { return entropy() + layers_ * heads_ + 1; }
  size_t maxima() const { return log_z_sums() + 2; }

  size_t layers_, heads_, ranks_, first_;
  bool diagnostics_;
};

}  // namespace

// ---------------------------------------------------------------- construction

Trainer::Trainer(RunConfig config, TrainLogger* logger, io::StopFlag stop)
    : config_(fits_in_memory(std::move(config))),  // before anything is read or allocated
      stop_flag_(stop),
      data_files_(fingerprint_data(config_, stop)),
      task_(build_task(config_, stop)),
      train_set_(load_train_set(config_, task_, stop, &train_use_)),
      valid_set_(load_valid_set(config_, task_, stop, &valid_use_)) {
  // data-parallel: the ranks of this run (mpirun -np N; one process otherwise), recorded in the
  // resolved config so that a resume on another N is refused. Rank 0 (or the one process) owns
  // the run's output; the other ranks follow (run_output.hpp).
  ranks_ = dist::make_step_reduction(
      dist::world(), {config_.model.norm == "batchnorm" && config_.model.batchnorm_stats == "sync", config_.train.batch_size});
  ranks_->watch_stop_flag(stop_flag_);
  config_.train.world_size = ranks_->size();
  output_ = ranks_->is_writer() ? make_run_owner(logger) : make_run_follower();
  logger_ = &output_->logger();
  valid_batches_ = evaluation_batches(valid_set_, config_, stop);
  train_max_len_ = train_max_length(config_, train_set_);
  buckets_ = data::make_length_buckets(static_cast<int32_t>(config_.task.eval_max_len),
                                       static_cast<int32_t>(config_.task.bucket_width), train_max_len_);
  if (config_.task.length_regime == data::LengthRegime::single)  // its one trained length in a bucket of its own
    buckets_ = data::cut_buckets_before(std::move(buckets_), static_cast<int32_t>(config_.task.max_len));
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
    options.regime = config_.task.length_regime;
    options.bucket_width = static_cast<int32_t>(config_.task.bucket_width);
    generator_ = std::make_unique<data::GeneratorSampler>(task_, options);
  }

  model_ = std::make_unique<nn::EncoderModel>(build_model_options(config_, task_));
  model_->sum_batch_norm_statistics(ranks_->batch_norm_ranks());  // data-parallel sync BatchNorm
  model_->train();

  optim::OptimizerOptions optimizer_options;
  optimizer_options.name = config_.optim.name;
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

StepRecord Trainer::train_step(const data::Batch& global, bool diagnostics) {
  StepRecord record;
  record.step = step_ + 1;
  record.sequences = global.batch_size();
  record.shortest = global.min_length();
  record.longest = global.max_length();
  const double lr = optim::scheduled_lr(schedule_, config_.optim.lr, step_);
  record.lr = lr;
  model_->train();

  // This process's share (the whole batch for one process): forward and backward.
  const dist::Share share = ranks_->shard(global);
  const data::Batch& batch = share.batch;
  optimizer_->zero_grad();
  dist::StepSums local{.targets = batch.num_targets, .tokens = batch.num_real_tokens,
                       .stop_request = io::stop_signal(stop_flag_)};
  // The sums the ranks add up beside the gradients (StepSums' extra): the z-loss, then on
  // diagnostics steps the figures of DiagnosticSums.
  const bool z_loss = config_.optim.z_loss > 0;
  DiagnosticSums sums_layout(config_.model.num_layers, config_.model.num_heads, ranks_->size(), z_loss, diagnostics);
  std::vector<double> extra(sums_layout.size(), 0.0);
  if (batch.batch_size() > 0) {  // an empty share still joins the reduction below
    nn::Diagnostics diag;
    // The masks one process draws for these sequences of the global batch.
    const nn::DropoutStep dropout{uint64_t(record.step), share.first_sequence};
    Tensor logits = model_->forward(batch.tokens, batch.offsets, diagnostics ? &diag : nullptr, dropout);  // (rows, V)
    Tensor mean_loss = ops::cross_entropy(logits, batch.targets);
    local.loss_sum = double(mean_loss.item()) * double(batch.num_targets);
    local.correct = count_correct(logits, batch.targets);
    Tensor objective = mean_loss;
    if (z_loss) {  // mean log(Z)^2 over the same rows as the cross-entropy, so ranks weigh it alike
      Tensor z = ops::z_loss(logits, batch.targets);
      extra[sums_layout.z_loss()] = double(z.item()) * double(batch.num_targets);
      objective = ops::add(mean_loss, ops::mul_scalar(z, float(config_.optim.z_loss)));
    }
    ranks_->loss_to_backpropagate(objective, batch.num_targets).backward();
    if (diagnostics) sums_layout.fill(extra, diag, logits, batch.offsets, ranks_->rank());
  }
  const dist::StepSums sums = ranks_->reduce(optimizer_->params(), local, extra);

  // The global batch's figures. The loss is the mean's float exactly: loss_sum = mean * targets is
  // exact in double, and so is the division back.
  record.tokens = sums.tokens;
  const float loss_value = sums.targets > 0 ? float(sums.loss_sum / double(sums.targets)) : 0.0f;
  record.loss = shortest(loss_value);
  record.accuracy = sums.targets ? double(sums.correct) / double(sums.targets) : 0.0;
  if (z_loss) record.z_loss = sums.targets > 0 ? extra[sums_layout.z_loss()] / double(sums.targets) : 0.0;
  if (diagnostics) sums_layout.read(extra, record);
  if (!std::isfinite(loss_value)) {
    record.diverged = true;
    record.grad_norm = std::numeric_limits<double>::quiet_NaN();
    optimizer_->zero_grad();
    return record;
  }
  apply_update(record, lr, diagnostics);  // with the global gradients: the same on every rank
  if (!record.diverged) ranks_->check_parameters(*model_, step_);
  return record;
}

void Trainer::apply_update(StepRecord& record, double lr, bool diagnostics) {
  if (diagnostics) record.layer_grad_norms = nn::per_layer_grad_norms(*model_, config_.model.num_layers);
  std::vector<std::vector<float>> before;  // each block's weights before the update, for update_ratio
  if (diagnostics) before = nn::block_parameter_values(*model_);
  record.grad_norm = optim::clip_grad_norm(optimizer_->params(), config_.optim.clip_grad_norm);
  if (!std::isfinite(record.grad_norm)) {
    record.diverged = true;
    optimizer_->zero_grad();
    return;
  }
  optimizer_->step(lr);
  if (diagnostics) record.update_ratio = nn::per_layer_update_ratios(*model_, config_.model.num_layers, before);
  ++step_;
}

std::optional<EvalMetrics> Trainer::evaluate_valid() {
  // data-parallel: rank 0 evaluates alone while the others wait at the next step's reduction, so
  // it finishes the evaluation (the ranks agree on a stop only inside that reduction).
  return evaluate_unless_stopped(*model_, valid_batches_, buckets_, ranks_->active() ? nullptr : stop_flag_, false,
                                 baselines_);
}

int Trainer::stop_request() const { return ranks_->active() ? ranks_->agreed_stop() : io::stop_signal(stop_flag_); }

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
  update_monitor(point, *metrics);
  return true;
}

// train.keep_best and early stopping watch one metric: keep_best's, or the loss when no checkpoint
// is kept. An evaluation improves on the best only by more than early_stopping_min_delta.
KeepBest Trainer::kept_metric() const {
  const KeepBest keep = config_.train.keep_best;
  if (keep != KeepBest::automatic) return keep;
  return task_.is_data_defined() ? KeepBest::loss : KeepBest::none;
}

KeepBest Trainer::watched_metric() const {
  const KeepBest kept = kept_metric();
  return kept == KeepBest::none ? KeepBest::loss : kept;
}

void Trainer::update_monitor(const ValidPoint& point, const EvalMetrics& metrics) {
  const KeepBest kept = kept_metric(), watched = watched_metric();
  const Confusion& confusion = metrics.trained.confusion.empty() ? metrics.confusion : metrics.trained.confusion;
  const double value = watched == KeepBest::loss       ? selection_loss(point)
                       : watched == KeepBest::accuracy ? selection_accuracy(point)
                                                       : macro_f1(confusion);
  if (!std::isfinite(value)) return;
  const double delta = config_.train.early_stopping_min_delta;
  const bool improved = !monitor_best_ || (watched == KeepBest::loss ? value < monitor_best_->value - delta
                                                                     : value > monitor_best_->value + delta);
  if (!improved) return;
  monitor_best_ = MonitorBest{step_, value};
  if (kept != KeepBest::none) output_->save_best(step_, [&](const std::string& path) { save_checkpoint(path); });
}

bool Trainer::patience_ran_out() const {
  const int64_t patience = config_.train.early_stopping_patience;
  if (patience == 0 || !monitor_best_ || !last_eval_step_) return false;
  return (*last_eval_step_ - monitor_best_->step) / config_.train.eval_every >= patience;
}

TrainSummary Trainer::fit() {
  if (!output_->is_open()) throw UsageError("Trainer::fit: call start() or resume() first");
  if (config_.train.threads > 0) set_num_threads(static_cast<int>(config_.train.threads));
  session_start_ = std::chrono::steady_clock::now();
  const TrainConfig& t = config_.train;
  // Only the writing rank evaluates, so the others could not know when to stop with it.
  if (t.early_stopping_patience > 0 && ranks_->size() > 1)
    throw InputError(fmt::format("train.early_stopping_patience: not available for a data-parallel run ({} ranks); "
                                 "set it to 0 or train in one process",
                                 ranks_->size()));
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
    // The first step too: its forward and gradients are those of the initial weights (step 0).
    const bool diagnostics = t.diagnostics_every > 0 && (step_ == 0 || (step_ + 1) % t.diagnostics_every == 0);
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
    if (patience_ran_out()) {
      early_stopped_at_ = step_;
      logger_->info(fmt::format("early stopping at step {}: held-out {} has not improved by more than {} for {} "
                                "evaluations (best at step {})",
                                step_, to_string(watched_metric()),
                                t.early_stopping_min_delta, t.early_stopping_patience, monitor_best_->step));
      break;
    }
    if (t.checkpoint_every > 0 && step_ % t.checkpoint_every == 0) checkpoint();
    io::test_pause("step", step_, stop_flag_);
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
                                              config_.task.length_regime == data::LengthRegime::mixed
                                                  ? ""
                                                  : fmt::format(" in {} batches (task.length_regime)",
                                                                data::to_string(config_.task.length_regime))),
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
  summary.world_size = ranks_->size();
  summary.num_parameters = model_->num_parameters();
  summary.train_max_len = train_max_len_;
  summary.final_train = last_record_;
  summary.final_valid_step = last_eval_step_;
  summary.final_valid = last_eval_;
  summary.best_valid = best_loss_;
  summary.best_valid_accuracy = best_accuracy_;
  if (kept_metric() != KeepBest::none && monitor_best_) {
    summary.best_checkpoint_metric = to_string(kept_metric());
    summary.best_checkpoint_step = monitor_best_->step;
    summary.best_checkpoint_value = monitor_best_->value;
  }
  summary.early_stopped_at_step = early_stopped_at_;
  return summary;
}

// ---------------------------------------------------------------- the checkpoint
// What the trainer writes into checkpoint.safetensors beside the model and the optimizer state
// (train/checkpoint.hpp writes and reads the file itself), and how a resume checks and restores
// it. The layout is in docs/run-directory.md.

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
          {"monitor_best", monitor_best_ ? json{{"step", monitor_best_->step}, {"value", monitor_best_->value}}
                                         : json(nullptr)}};
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
    if (!eval_step.is_number_integer()) throw InputError(fmt::format("{}: metadata 'trainer': bad last_eval_step", where));
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
      throw InputError(fmt::format("{}: metadata 'trainer': monitor_best must be {{\"step\": N, \"value\": X}}", where));
    monitor_best_ = MonitorBest{it->at("step").get<int64_t>(), it->at("value").get<double>()};
  }
}

void Trainer::save_checkpoint(const std::string& path) const {
  std::map<std::string, std::string> metadata;
  metadata["normlab_version"] = NORMLAB_VERSION;
  metadata["config"] = to_json(config_).dump();
  metadata["step"] = std::to_string(step_);
  metadata["optimizer_step_count"] = std::to_string(optimizer_->step_count());
  metadata["train_max_len"] = std::to_string(train_max_len_);
  if (batch_sampler_) {
    metadata["sampler"] = json{{"kind", "dataset"}, {"state", data::sampler_state_to_json(batch_sampler_->state())}}.dump();
  } else {
    metadata["sampler"] = json{{"kind", "generator"}, {"state", data::generator_state_to_json(generator_->state())}}.dump();
  }
  // The vocabulary and labels, so the checkpoint alone maps strings to ids (every task).
  metadata["vocabulary"] = json(task_.input_vocab.tokens()).dump();
  metadata["labels"] = json(task_.output_vocab.tokens()).dump();
  if (baselines_.majority_label >= 0) metadata["majority_label"] = task_.output_vocab.token(baselines_.majority_label);
  if (schedule_.restart_step >= 0) {
    metadata["schedule"] = json{{"restart_step", schedule_.restart_step}, {"restart_factor", schedule_.restart_factor}}.dump();
  }
  metadata["data"] = to_json(data_files_).dump();
  if (task_.is_masked_lm()) metadata["task_characters"] = json(text_task_characters(task_)).dump();
  metadata["trainer"] = trainer_state().dump();
  write_checkpoint(path, *model_, optimizer_.get(), std::move(metadata));
}

void Trainer::check_data_unchanged(const io::SafetensorsFile& file, const std::string& path) {
  // A checkpoint of a build before data fingerprints records none: nothing to compare.
  if (file.metadata.count("data") == 0) return;
  const std::vector<DataChange> changes =
      changed_data(fingerprint_from_json(metadata_json(file, "data"), path + ": metadata 'data'"), data_files_);
  if (changes.empty()) return;
  if (!accept_changed_data_) {
    throw InputError(fmt::format("{} since the checkpoint {} was written; nothing was changed. Restore the file, or "
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
    throw InputError(fmt::format("{}: checkpoint is at step {}, beyond train.steps = {}", path, step,
                                 config_.train.steps));
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
  const std::string kind =
      sampler.is_object() && sampler.contains("kind") && sampler.at("kind").is_string() ? sampler.at("kind").get<std::string>() : "";
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
