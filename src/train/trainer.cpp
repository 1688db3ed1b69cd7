#include "normlab/train/trainer.hpp"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "normlab/autograd.hpp"
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

// The figures a step's ranks add up beside the gradients (StepReduction::reduce's extra), each a
// named field: the z-loss sum (optim.z_loss > 0), and on diagnostics steps the sums behind the
// residual RMS, the attention entropies and log Z, each beside the count it is divided by. A maximum
// cannot be summed, so rank r writes its maxima into row r of its own (zeros elsewhere) and the sum
// over ranks carries every rank's maximum. One process is one rank; the fields then hold its own.
struct StepFigures {
  StepFigures(int64_t layers, int64_t heads, int ranks, bool diagnostics)
      : layers(size_t(layers)), heads(size_t(heads)), ranks(size_t(ranks)) {
    if (!diagnostics) return;
    residual_sum_sq.assign(this->layers, 0.0);
    entropy_sum.assign(this->layers * this->heads, 0.0);
    max_abs_logit.assign(this->ranks * this->layers, 0.0);
    max_abs_log_z.assign(this->ranks, 0.0);
  }

  double z_loss_sum = 0.0;              // sum over targets of log(Z)^2
  std::vector<double> residual_sum_sq;  // (layers): after each block, the sum of x^2
  double residual_values = 0.0;         // tokens x d_model behind each of them
  std::vector<double> entropy_sum;      // (layers, heads): attention entropies summed over queries
  double queries = 0.0;                 // the queries behind each of them
  double log_z_sum = 0.0, log_z_rows = 0.0;
  std::vector<double> max_abs_logit;  // (ranks, layers): rank r's largest |attention logit| in row r
  std::vector<double> max_abs_log_z;  // (ranks): rank r's largest |log Z|

  // Every field, in one order on every rank, for the reduction.
  dist::SumFields fields() {
    return {{&z_loss_sum, 1}, residual_sum_sq,  {&residual_values, 1}, entropy_sum,  {&queries, 1},
            {&log_z_sum, 1},  {&log_z_rows, 1}, max_abs_logit,         max_abs_log_z};
  }

  void fill(const nn::Diagnostics& diag, const Tensor& logits, const std::vector<int64_t>& offsets, int rank) {
    residual_sum_sq = diag.residual_sum_sq;
    residual_values = double(diag.residual_values);
    for (size_t l = 0; l < layers; ++l) {
      const nn::AttentionStatistics a = nn::attention_statistics(diag.attention_qkv[l], offsets, int64_t(heads));
      std::copy(a.entropy_sum.begin(), a.entropy_sum.end(), entropy_sum.begin() + long(l * heads));
      queries = double(a.queries);
      max_abs_logit[size_t(rank) * layers + l] = a.max_abs_logit;
    }
    const nn::LogZStatistics log_z = nn::log_z_statistics(logits);
    log_z_sum = log_z.sum;
    log_z_rows = double(log_z.rows);
    max_abs_log_z[size_t(rank)] = log_z.max_abs;
  }

  // The global batch's diagnostics, from the fields summed over the ranks.
  void read(StepRecord& record) const {
    for (size_t l = 0; l < layers; ++l) {
      record.residual_rms.push_back(residual_values > 0 ? std::sqrt(residual_sum_sq[l] / residual_values) : 0.0);
      double sum = 0.0, least = std::numeric_limits<double>::infinity();
      for (size_t h = 0; h < heads; ++h) {
        const double mean = queries > 0 ? entropy_sum[l * heads + h] / queries : 0.0;
        sum += mean;
        least = h == 0 ? mean : std::min(least, mean);
      }
      record.attention_entropy_mean.push_back(sum / double(heads));
      record.attention_entropy_min.push_back(least);
      double largest = 0.0;
      for (size_t r = 0; r < ranks; ++r) largest = max_keep_nan(largest, max_abs_logit[r * layers + l]);
      record.attention_max_logit.push_back(largest);
    }
    record.log_z_mean = log_z_rows > 0 ? log_z_sum / log_z_rows : 0.0;
    double largest = 0.0;
    for (size_t r = 0; r < ranks; ++r) largest = max_keep_nan(largest, max_abs_log_z[r]);
    record.log_z_max_abs = largest;
  }

  size_t layers, heads, ranks;
};

}  // namespace

// ---------------------------------------------------------------- construction

Trainer::Trainer(RunConfig config, TrainLogger* logger, io::StopFlag stop)
    : config_(fits_in_memory(std::move(config))),  // before anything is read or allocated
      stop_flag_(stop), data_files_(fingerprint_data(config_, stop)), task_(build_task(config_, stop)),
      train_set_(load_train_set(config_, task_, stop, &train_use_)),
      valid_set_(load_valid_set(config_, task_, stop, &valid_use_)) {
  // data-parallel: the ranks of this run (mpirun -np N; one process otherwise), recorded in the
  // resolved config so that a resume on another N is refused. Rank 0 (or the one process) owns
  // the run's output; the other ranks follow (run_output.hpp).
  ranks_ = dist::make_step_reduction(dist::world(),
                                     {config_.model.norm == "batchnorm" && config_.model.batchnorm_stats == "sync",
                                      config_.train.batch_size});
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
  dist::StepSums local{.targets = batch.num_targets,
                       .tokens = batch.num_real_tokens,
                       .stop_request = io::stop_signal(stop_flag_)};
  // The figures the ranks add up beside the gradients: the z-loss, and the diagnostics' sums.
  const bool z_loss = config_.optim.z_loss > 0;
  StepFigures figures(config_.model.num_layers, config_.model.num_heads, ranks_->size(), diagnostics);
  LeafGradientCheck finite_check;  // every gradient finite, as the backward leaves it?
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
      figures.z_loss_sum = double(z.item()) * double(batch.num_targets);
      objective = ops::add(mean_loss, ops::mul_scalar(z, float(config_.optim.z_loss)));
    }
    ranks_->loss_to_backpropagate(objective, batch.num_targets).backward();
    if (diagnostics) {
      clock_.charge(RunPart::steps);
      figures.fill(diag, logits, batch.offsets, ranks_->rank());
      clock_.charge(RunPart::diagnostics);
    }
  }
  const dist::StepSums sums = ranks_->reduce(optimizer_->params(), local, figures.fields());

  // The global batch's figures. The loss is the mean's float exactly: loss_sum = mean * targets is
  // exact in double, and so is the division back.
  record.tokens = sums.tokens;
  const float loss_value = sums.targets > 0 ? float(sums.loss_sum / double(sums.targets)) : 0.0f;
  record.loss = shortest(loss_value);
  record.accuracy = sums.targets ? double(sums.correct) / double(sums.targets) : 0.0;
  if (z_loss) record.z_loss = sums.targets > 0 ? figures.z_loss_sum / double(sums.targets) : 0.0;
  if (diagnostics) figures.read(record);
  if (!std::isfinite(loss_value)) {
    record.diverged = true;
    record.grad_norm = std::numeric_limits<double>::quiet_NaN();
    optimizer_->zero_grad();
    return record;
  }
  // With several ranks the sum over ranks has changed the gradients the backward checked.
  const bool grads_finite = !ranks_->active() && finite_check.leaves_checked() > 0 && finite_check.all_finite();
  apply_update(record, lr, diagnostics, grads_finite);  // with the global gradients: the same on every rank
  if (!record.diverged) ranks_->check_parameters(*model_, step_);
  return record;
}

void Trainer::apply_update(StepRecord& record, double lr, bool diagnostics, bool grads_finite) {
  std::vector<std::vector<float>> before;  // each block's weights before the update, for update_ratio
  if (diagnostics) {
    clock_.charge(RunPart::steps);
    record.layer_grad_norms = nn::per_layer_grad_norms(*model_, config_.model.num_layers);
    before = nn::block_parameter_values(*model_);
    clock_.charge(RunPart::diagnostics);
  }
  if (grads_finite && !(config_.optim.clip_grad_norm > 0.0)) {
    // Nothing to clip, and a finite norm known in advance: the norm from the update's own pass
    // over the gradients (the same bits as clip_grad_norm's).
    record.grad_norm = optimizer_->step_and_grad_norm(lr);
  } else {
    record.grad_norm = optim::clip_grad_norm(optimizer_->params(), config_.optim.clip_grad_norm);
    if (!std::isfinite(record.grad_norm)) {  // no update: parameters and optimizer state as they were
      record.diverged = true;
      optimizer_->zero_grad();
      return;
    }
    optimizer_->step(lr);
  }
  if (diagnostics) {
    clock_.charge(RunPart::steps);
    record.update_ratio = nn::per_layer_update_ratios(*model_, config_.model.num_layers, before);
    clock_.charge(RunPart::diagnostics);
  }
  ++step_;
}

std::optional<EvalMetrics> Trainer::evaluate_valid() {
  // The training step's activations and gradients are free now, in holes of the heap that the
  // evaluation's buffers (other sizes: whole validation buckets) may not fit; give their pages back
  // first, so that the peak resident set is what is live, not where the allocator placed it. Only
  // when the holes are large (fordblks counts the top chunk too, keepcost is that top chunk): a
  // small model's few MB are not worth the next step's page faults.
  const struct mallinfo2 heap = ::mallinfo2();
  if (heap.fordblks - heap.keepcost >= (size_t{16} << 20)) ::malloc_trim(0);
  // data-parallel: rank 0 evaluates alone while the others wait at the next step's reduction, so
  // it finishes the evaluation (the ranks agree on a stop only inside that reduction).
  return evaluate_unless_stopped(*model_, valid_batches_, buckets_, ranks_->active() ? nullptr : stop_flag_, false,
                                 baselines_);
}

int Trainer::stop_request() const { return ranks_->active() ? ranks_->agreed_stop() : io::stop_signal(stop_flag_); }

// ---------------------------------------------------------------- the run directory

void Trainer::start(const std::string& dir) {
  // vocab.json: the ids of every token and label (docs/run-directory.md).
  output_->open_new(
      dir, config_,
      nlohmann::ordered_json{{"tokens", task_.input_vocab.tokens()}, {"labels", task_.output_vocab.tokens()}}.dump(1) +
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
    logger_->info(
        fmt::format("lr schedule: train.steps is now {}; the cosine continues from the lr reached at step {} "
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
  clock_.charge(RunPart::evaluation);
  if (!metrics) return false;
  json record = to_json(*metrics);
  record["step"] = step_;
  record["split"] = "valid";
  output_->append_metrics(record);
  logger_->eval(step_, *metrics);
  clock_.charge(RunPart::logs);
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
  if (kept == KeepBest::none) return;
  clock_.charge(RunPart::evaluation);
  output_->save_best(step_, [&](const std::string& path) { save_checkpoint(path); });
  clock_.charge(RunPart::checkpoints);
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
    throw InputError(
        fmt::format("train.early_stopping_patience: not available for a data-parallel run ({} ranks); "
                    "set it to 0 or train in one process",
                    ranks_->size()));
  logger_->info(describe_run());
  clock_.charge(RunPart::setup);
  auto checkpoint = [&] {
    clock_.charge(RunPart::steps);
    last_checkpoint_step_ = step_;
    output_->checkpoint(step_, [&](const std::string& path) { save_checkpoint(path); });
    clock_.charge(RunPart::checkpoints);
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
    clock_.charge(RunPart::steps);
    output_->append_step(record);
    last_record_ = record;
    logger_->step(record, t.steps);
    clock_.charge(RunPart::logs);
    if (record.diverged) {
      diverged_at = record.step;
      break;
    }
    if (t.eval_every > 0 && step_ % t.eval_every == 0 && !record_eval()) break;
    if (patience_ran_out()) {
      early_stopped_at_ = step_;
      logger_->info(
          fmt::format("early stopping at step {}: held-out {} has not improved by more than {} for {} "
                      "evaluations (best at step {})",
                      step_, to_string(watched_metric()), t.early_stopping_min_delta, t.early_stopping_patience,
                      monitor_best_->step));
      break;
    }
    // The last step's checkpoint is the run's final one, after the loop.
    if (t.checkpoint_every > 0 && step_ % t.checkpoint_every == 0 && step_ < t.steps) checkpoint();
    io::test_pause("step", step_, stop_flag_);
  }
  // Finished: a last evaluation. Finished or stopped on request: a checkpoint of the final state
  // (a diverged run keeps its last periodic one: the broken state is not worth resuming).
  if (!diverged_at && !stopped() && last_eval_step_ != step_) record_eval();
  // Written now and committed with summary.json (one journal commit for both files' data, one for
  // their renames), or alone when the run stops without a summary.
  if (!diverged_at && last_checkpoint_step_ != step_) {
    clock_.charge(RunPart::steps);
    last_checkpoint_step_ = step_;
    output_->stage_checkpoint(step_, [&](const std::string& path) { return stage_checkpoint_file(path); });
    clock_.charge(RunPart::checkpoints);
  }

  TrainSummary summary = make_summary();
  summary.stop_request = stop_request();
  summary.diverged = diverged_at.has_value();
  summary.diverged_at_step = diverged_at;
  // A stop that came after the last step and its evaluation changes nothing: the run is finished.
  if (summary.interrupted() && step_ == t.steps && last_eval_step_ == step_) summary.stop_request = 0;
  if (summary.interrupted()) {  // not finished: no summary.json, so resume continues it
    output_->commit_checkpoint();
    return summary;
  }
  clock_.charge(RunPart::finish);
  json summary_json = to_json(summary);
  summary_json["timing"] = clock_.summary_json();
  output_->write_summary(summary_json);
  return summary;
}

std::string Trainer::describe_run() const {
  const std::string title = task_title(config_);
  const std::string kind =
      task_.is_data_defined()
          ? fmt::format(" ({}: {} tokens, {} labels)", task_.name,
                        task_.input_vocab_size() - task_.input_vocab.num_specials(), task_.num_classes())
      : title != task_.name ? fmt::format(" ({})", task_.name)
                            : "";
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

}  // namespace normlab::train
