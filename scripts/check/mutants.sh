#!/usr/bin/env bash
# Mutation check: does the test suite notice plausible bugs?
#
#   scripts/check/mutants.sh [--scratch DIR] [--only 1,5,7] [--quick] [--list] [--check]
#
# Copies the current sources (tracked and untracked, as they are in the working tree) into a scratch
# directory (default /tmp/normlab-mutants) with its own build directory, then for each mutant below:
# applies ONE small text replacement to ONE source file, rebuilds normlab + normlab_tests (ccache
# makes the unchanged files cache hits), runs the mutant's focus tests and, if they all pass, the
# whole doctest suite; restores the file. A mutant is KILLED when a test fails (or the build
# fails, or a run exceeds the timeout), SURVIVED when the whole suite passes.
#
# Each replacement must match its file exactly once; otherwise the script stops with
# "mutant N: pattern not found" (or "found K times"): a refactoring that moved the code must update
# the pattern here, never make a mutant silently test nothing. Exit status: 0 when every mutant was
# killed, 1 when one survived, 2 on a setup error (pattern, baseline failure).
#
# --quick skips the baseline suite and runs only each mutant's focus tests: a mutant they do not
# kill is reported as "FOCUS-SURVIVED" (run it again without --quick to try the whole suite).
#
# --check only verifies that every pattern still matches the sources (no build; ctest runs it, so a
# refactoring cannot leave a mutant behind). The mutants themselves are not part of CI: one rebuild per mutant (docs/TESTING.md). The
# load_checkpoint_torch ctest entry (PyTorch) is not run here.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
scratch=/tmp/normlab-mutants
only=""
list=0
check=0
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --scratch) scratch="$2"; shift 2 ;;
    --only) only=",$2,"; shift 2 ;;
    --list) list=1; shift ;;
    --check) check=1; shift ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "mutants.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# ------------------------------------------------------------------------------------------ mutants
# mutant NAME FILE OLD NEW FOCUS   (FOCUS: a doctest -tc filter run first, to kill quickly)
# mutant_all ...: the same, replacing every occurrence (at least one), for a change that must be
# consistent in several places (forward and backward).
names=(); files=(); olds=(); news=(); focus=(); every=()
mutant() { names+=("$1"); files+=("$2"); olds+=("$3"); news+=("$4"); focus+=("$5"); every+=(0); }
mutant_all() { names+=("$1"); files+=("$2"); olds+=("$3"); news+=("$4"); focus+=("$5"); every+=(1); }

mutant "GELU backward: tanh-approximation derivative under the exact erf forward" \
  src/kernels/activations.cpp \
  'dinp[i] += dout[i] * (cdf + x * pdf);' \
  '(void)cdf; (void)pdf; const float u = 0.7978845608f * (x + 0.044715f * x * x * x), th = std::tanh(u); dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608f * (1.0f + 0.134145f * x * x));' \
  '*f64*,*golden*'
mutant "LayerNorm: eps outside the square root" \
  src/kernels/layer_norm.cpp \
  'double row_rstd(double var, float eps) { return 1.0 / std::sqrt(var + double(eps)); }' \
  'double row_rstd(double var, float eps) { return 1.0 / (std::sqrt(var) + double(eps)); }' \
  '*f64*,*golden*,*layer_norm*,*layernorm*'
mutant "make_norm: rmsnorm builds a LayerNorm" \
  src/nn/norms/rms_norm.cpp \
  '.make = [](int64_t dim, float eps) { return std::make_unique<RMSNorm>(dim, eps); }},' \
  '.make = [](int64_t dim, float eps) { return std::make_unique<LayerNorm>(Shape{dim}, eps); }},' \
  '*golden*,*registry*'
mutant "RMSNorm: square of the mean instead of the mean square" \
  src/kernels/rms_norm.cpp \
  'double mean_square = row_sum_squares(x, cols) / double(cols);' \
  'double mean_square = 0.0; for (int64_t c = 0; c < cols; c++) mean_square += x[c]; mean_square = (mean_square / double(cols)) * (mean_square / double(cols));' \
  '*golden*,*f64*,*rms*'
mutant "BatchNorm: normalizes with the unbiased variance" \
  src/kernels/batch_norm.cpp \
  'batch_var[k] = sum_squared_deviation / total_tokens;' \
  'batch_var[k] = sum_squared_deviation / (total_tokens > 1.0 ? total_tokens - 1.0 : total_tokens);' \
  '*golden*,*f64*,*batch*'
mutant "BatchNorm: running variance from the biased batch variance" \
  src/kernels/batch_norm.cpp \
  'const double unbiased_var = sum_squared_deviation / (total_tokens - 1.0);' \
  'const double unbiased_var = sum_squared_deviation / total_tokens;' \
  '*golden*,*batch*'
mutant "BatchNorm: momentum applied the wrong way round (running = m * running + (1 - m) * batch)" \
  src/kernels/batch_norm.cpp \
  'running_mean[c] = float((1.0 - double(momentum)) * double(running_mean[c]) + double(momentum) * batch_mean[k]);' \
  'running_mean[c] = float(double(momentum) * double(running_mean[c]) + (1.0 - double(momentum)) * batch_mean[k]);' \
  '*golden*,*batch*'
mutant_all "attention: scores scaled by 1/hd instead of 1/sqrt(hd), forward and backward alike" \
  src/kernels/attention.cpp \
  'const float scale = 1.0f / std::sqrt(float(hd));' \
  'const float scale = 1.0f / float(hd);' \
  '*f64*,*golden*,*attention*,*encoder*'
mutant "Adam: no bias correction of the first moment" \
  src/optim/optimizer.cpp \
  's.neg_step_size = static_cast<float>(-(lr / bias_correction1));' \
  's.neg_step_size = static_cast<float>(-lr);' \
  '*optim*,*adam*'
mutant "Adam: eps inside the square root" \
  src/kernels/adam.cpp \
  'const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;' \
  'const float denom = std::sqrt(v + s.eps) / s.bias_correction2_sqrt;' \
  '*optim*,*adam*'
mutant "AdamW: weight decay added to the gradient (Adam's L2) instead of decoupled" \
  src/optim/optimizer.cpp \
  's.decoupled = options_.name == OptimizerKind::adamw;' \
  's.decoupled = false;' \
  '*optim*,*adam*'
mutant "positions: sin and cos swapped" \
  src/nn/layers.cpp \
  'table[size_t(pos * dim + i)] = float(std::sin(angle));
      if (i + 1 < dim) table[size_t(pos * dim + i + 1)] = float(std::cos(angle));' \
  'table[size_t(pos * dim + i)] = float(std::cos(angle));
      if (i + 1 < dim) table[size_t(pos * dim + i + 1)] = float(std::sin(angle));' \
  '*golden*,*position*'
mutant "trainer: gradient clipping applied after the optimizer step" \
  src/train/trainer.cpp \
  '    record.grad_norm = optim::clip_grad_norm(optimizer_->params(), config_.optim.clip_grad_norm);
    if (!std::isfinite(record.grad_norm)) {  // no update: parameters and optimizer state as they were
      record.diverged = true;
      optimizer_->zero_grad();
      return;
    }
    optimizer_->step(lr);' \
  '    optimizer_->step(lr);
    record.grad_norm = optim::clip_grad_norm(optimizer_->params(), config_.optim.clip_grad_norm);
    if (!std::isfinite(record.grad_norm)) {
      record.diverged = true;
      optimizer_->zero_grad();
      return;
    }' \
  '*train step*,*clip*'
mutant "trainer: the update takes the gradient norm in its own pass without the backward's finite check" \
  src/train/trainer.cpp \
  'const bool grads_finite = !ranks_->active() && finite_check.leaves_checked() > 0 && finite_check.all_finite();' \
  'const bool grads_finite = !ranks_->active();' \
  '*non-finite gradient*'
mutant "clip_grad_norm: scales gradients up when the norm is below max_norm" \
  src/optim/optimizer.cpp \
  '  if (clip_coef >= 1.0) return norm;' \
  '' \
  '*clip*,*train step*'
mutant "cross-entropy: mean over all rows, ignored ones included" \
  src/kernels/cross_entropy.cpp \
  '  return float(total / double(count));' \
  '  return float(total / double(N));' \
  '*f64*,*cross*'
mutant "embedding backward: a repeated token's gradient overwritten instead of summed" \
  src/kernels/embedding.cpp \
  'for (int64_t c = c0; c < c1; c++) drow[c] += dy[c];' \
  'for (int64_t c = c0; c < c1; c++) drow[c] = dy[c];' \
  '*f64*,*golden*,*embedding*'
mutant "mean_pool: divides by the longest sequence, not each sequence's length" \
  src/ops/transformer.cpp \
  '    for (int64_t c = 0; c < C; ++c) y[b * C + c] /= static_cast<float>(len);' \
  '    for (int64_t c = 0; c < C; ++c) y[b * C + c] /= static_cast<float>(T > len ? T : len);' \
  '*f64*,*golden*'
mutant "dropout: survivors not rescaled by 1/(1-p)" \
  src/kernels/dropout.cpp \
  'const float scale = 1.0f / (1.0f - p);' \
  'const float scale = 1.0f;' \
  '*f64*,*dropout*'
mutant "ReZero: the feed-forward branch skips its alpha" \
  src/nn/residuals/rezero.cpp \
  'Tensor add(const Tensor& x, const Tensor& f, int) const override { return ops::add(x, ops::mul(f, resweight)); }' \
  'Tensor add(const Tensor& x, const Tensor& f, int k) const override { return k == 1 ? ops::add(x, f) : ops::add(x, ops::mul(f, resweight)); }' \
  '*golden*,*encoder*'
mutant "LayerScale: one gain for both sublayers" \
  src/nn/residuals/layer_scale.cpp \
  'ops::mul(f, sublayer == 0 ? gamma_1 : gamma_2)' \
  'ops::mul(f, gamma_1)' \
  '*residual*,LayerScale*,*golden*'
mutant "pre-norm stack: the final norm is never applied" \
  src/nn/encoder.cpp \
  '  if (norm) h = norm->forward(h);' \
  '' \
  '*golden*,*encoder*'
mutant "DyT backward: dalpha misses the x factor" \
  src/kernels/activations.cpp \
  'terms[c] = dt * x[c];' \
  'terms[c] = dt;' \
  '*f64*,*golden*,*dyt*'
mutant "warmup: step 0 gets no learning rate ((step) / warmup instead of (step + 1) / warmup)" \
  src/optim/schedule.cpp \
  'return static_cast<float>(static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps));' \
  'return static_cast<float>(static_cast<double>(step) / static_cast<double>(s.warmup_steps));' \
  '*optim*,*schedule*'

# ---- reference kernels against their float64 truth (test_reference_truth.cpp)
mutant "reference BatchNorm eval: divides by running_var + eps, not its square root" \
  src/kernels/reference/batch_norm.cpp \
  'const double s = 1.0 / std::sqrt(double(running_var[c]) + double(eps));' \
  'const double s = 1.0 / (double(running_var[c]) + double(eps));' \
  '*reference truth*'
mutant "reference LayerNorm: the unbiased variance (C - 1)" \
  src/kernels/reference/layer_norm.cpp \
  'const double var = sum_sq / double(C);' \
  'const double var = sum_sq / double(C - 1);' \
  '*reference truth*'
mutant "reference RMSNorm backward: dgamma without rstd" \
  src/kernels/reference/rms_norm.cpp \
  'if (dgamma) dgamma[i] += float(dy[i] * x[i] * s);' \
  'if (dgamma) dgamma[i] += float(dy[i] * x[i]);' \
  '*reference truth*'
mutant "reference attention backward: dk misses the scale" \
  src/kernels/reference/attention.cpp \
  'dk[d] += float(ds * q[d]);' \
  'dk[d] += float(ds * q[d] / scale);' \
  '*reference truth*'

# ---- the trainer's wiring, read back from real runs (test_wiring.cpp)
mutant "trainer: optim.min_lr_ratio never reaches the schedule" \
  src/train/trainer.cpp \
  'schedule_.min_lr_ratio = static_cast<float>(config_.optim.min_lr_ratio);' \
  'schedule_.min_lr_ratio = 0.0f;' \
  '*wiring*'
mutant "optimizer: weight decay on exactly the tensors that must not decay (inverted)" \
  src/optim/optimizer.cpp \
  'decay_.push_back(options_.decay_all || !no_decay_name(name, param));' \
  'decay_.push_back(options_.decay_all || no_decay_name(name, param));' \
  '*wiring*,*optim*'
mutant "trainer: optim.decay_all never reaches the optimizer" \
  src/train/trainer.cpp \
  'optimizer_options.decay_all = config_.optim.decay_all;' \
  'optimizer_options.decay_all = false;' \
  '*wiring*'
mutant "trainer: optim.beta2 never reaches the optimizer (PyTorch's default instead)" \
  src/train/trainer.cpp \
  'optimizer_options.beta2 = static_cast<float>(config_.optim.beta2);' \
  'optimizer_options.beta2 = 0.999f;' \
  '*wiring*'
mutant "trainer: optim.eps never reaches the optimizer" \
  src/train/trainer.cpp \
  'optimizer_options.eps = static_cast<float>(config_.optim.eps);' \
  'optimizer_options.eps = 1e-8f;' \
  '*wiring*'
mutant "trainer: optim.momentum never reaches SGD" \
  src/train/trainer.cpp \
  'optimizer_options.momentum = static_cast<float>(config_.optim.momentum);' \
  'optimizer_options.momentum = 0.0f;' \
  '*wiring*'
mutant "evaluation: runs in the model's current mode (the trainer's periodic validation in training mode)" \
  src/train/evaluate.cpp \
  '  const bool was_training = model.is_training();
  model.eval();' \
  '  const bool was_training = model.is_training();' \
  '*wiring*'

# ---- ties and boundaries (test_boundaries.cpp)
mutant "length buckets: no cut when the longest training length is a bucket's first length" \
  src/data/buckets.cpp \
  'if (train_max_len >= start && train_max_len < end) {' \
  'if (train_max_len > start && train_max_len < end) {' \
  '*boundaries*,*bucket*'
mutant "majority: a tie goes to 1 instead of the first token" \
  src/data/task.cpp \
  'int32_t winner = ones > zeros ? one : ones < zeros ? task.input_vocab.id("0") : tokens[0];' \
  'int32_t winner = ones >= zeros ? one : task.input_vocab.id("0");' \
  '*boundaries*,*majority*'

# ---- checkpoint layout (test_checkpoint_layout.cpp)
mutant "checkpoint: square weights saved transposed" \
  src/train/checkpoint.cpp \
  'views.push_back({name, "F32", tensor.shape(), tensor.data(), size_t(tensor.numel()) * sizeof(float)});' \
  '{ static std::vector<std::vector<float>> kept; kept.emplace_back(tensor.data(), tensor.data() + tensor.numel()); std::vector<float>& v = kept.back(); if (tensor.shape().size() == 2 && tensor.shape()[0] == tensor.shape()[1]) { const int64_t n = tensor.shape()[0]; for (int64_t i = 0; i < n; i++) for (int64_t j = 0; j < n; j++) v[size_t(i * n + j)] = tensor.data()[j * n + i]; } views.push_back({name, "F32", tensor.shape(), v.data(), v.size() * sizeof(float)}); }' \
  '*checkpoint layout*'

# ---- data-parallel runs (test_dist_mpi.cpp, test_compare_shards.cpp)
mutant "data-parallel: gradients divided by the rank count again (a mean of per-rank means)" \
  src/dist/data_parallel.cpp \
  'grad[i] = float(buffer_[at + size_t(i)] / denominator);' \
  'grad[i] = float(buffer_[at + size_t(i)] / denominator / double(comm_.size()));' \
  '*dist mpi: 2 and 3 ranks*'
mutant "data-parallel: the reduction keeps the last rank's slice instead of the sum" \
  src/dist/communicator.cpp \
  'for (int i = 0; i < mine; ++i) slice[size_t(i)] += received_[size_t(s) * size_t(mine) + size_t(i)];' \
  'for (int i = 0; i < mine; ++i) slice[size_t(i)] = received_[size_t(s) * size_t(mine) + size_t(i)];' \
  '*dist mpi: 2 and 3 ranks*'
mutant "train: a refusal before the first step is not agreed across ranks (the refused job hangs)" \
  src/train/session.cpp \
  'const dist::Communicator::Verdict verdict = comm.agree(code, line);' \
  'const dist::Communicator::Verdict verdict{code, comm.rank(), line};' \
  '*dist mpi: a second np=2 job*'
mutant "train: the stop line of an N-rank run says normlab train --resume" \
  src/train/session.cpp \
  'return ranks > 1 ? fmt::format("mpirun -np {} normlab train --resume {}", ranks, dir)' \
  'return ranks > 0 ? fmt::format("normlab train --resume {}", dir)' \
  '*dist mpi: SIGUSR1*'
mutant "train: SIGUSR1 (the grace-period stop under mpirun) not handled" \
  src/io/stop.cpp \
  '  if (options.sigusr1) sigaction(SIGUSR1, &action, nullptr);' \
  '' \
  '*dist mpi: SIGUSR1*'
mutant "compare: every shard locks every run of the grid (shards cannot share --out)" \
  src/study/scheduler.cpp \
  '    if (shard && !in_shard(plan, i, shard->first, shard->second)) continue;
    if (!locked.insert(plan.runs[i].name).second) continue;' \
  '    if (!locked.insert(plan.runs[i].name).second) continue;' \
  '*compare shards*'
mutant "lr search: refinement also below the peak (the slow side)" \
  src/study/search.cpp \
  'for (size_t i = peak; i + 1 < tested.size(); ++i) {' \
  'for (size_t i = 0; i + 1 < tested.size(); ++i) {' \
  '*lr search: rounds*'
mutant "lr search: no Firth penalty (separated outcomes have no finite fit)" \
  src/study/search_fit.cpp \
  'return ll + 0.5 * std::log(det);' \
  'return ll + 0.0 * std::log(det);' \
  '*lr search: separated*'
mutant "lr search: the interval at chi2/4 instead of chi2/2 (too narrow)" \
  src/study/search_fit.cpp \
  'const double cutoff = profile[peak] - kChi2Level95 / 2;' \
  'const double cutoff = profile[peak] - kChi2Level95 / 4;' \
  '*lr search: the fit finds*,*lr search: the 95% profile*'
mutant "normlab: eval under mpirun -np 2 runs on every rank" \
  apps/normlab.cpp \
  'if (verb != "train" && processes > 1 && !help) {' \
  'if (verb != "train" && verb != "eval" && processes > 1 && !help) {' \
  '*dist mpi: mpirun -np 2 around*'

# The report's judgement: outcome thresholds, "most seeds", pairing, intervals.
mutant "findings: exactly half of the seeds counts as most" \
  include/normlab/study/statistics.hpp \
  'bool mostly_learned() const { return 2 * learned_or_solved() > int(runs.size()); }' \
  'bool mostly_learned() const { return 2 * learned_or_solved() >= int(runs.size()); }' \
  '*most seeds*,*findings*'
mutant "outcome: solved only strictly above its threshold" \
  src/study/outcome.cpp \
  'if (solved_score(run) >= kSolvedAccuracy) return Outcome::solved;' \
  'if (solved_score(run) > kSolvedAccuracy) return Outcome::solved;' \
  '*outcome words*'
mutant "outcome: learned threshold forgets the chance level" \
  src/study/outcome.cpp \
  'if (a >= c + kLearnedShare * (1 - c)) return Outcome::learned;' \
  'if (a >= kLearnedShare) return Outcome::learned;' \
  '*outcome words*'
mutant "outcome: a diverged seed keeps its stale last evaluation" \
  src/study/results.cpp \
  'if (diverged) return std::isfinite(baseline.uniform_accuracy) ? baseline.uniform_accuracy : 0.0;' \
  'if (diverged && evals.empty()) return 0.0;' \
  '*outcome words*,*report numbers*'
mutant "report: trained lengths include the unseen buckets" \
  src/study/results.cpp \
  '[](const BucketResult& b) { return !b.beyond_train; });' \
  '[](const BucketResult&) { return true; });' \
  '*report numbers*'
mutant "report: seeds that saw different data are paired" \
  src/study/statistics.cpp \
  'if (other == ref_runs.end() || !same_data(*run, *other->second)) c.paired = false;' \
  'if (other == ref_runs.end()) c.paired = false;' \
  '*unpaired*'
mutant "answer: headroom judged on the lowest learned rate" \
  src/study/findings.cpp \
  'const double top = ok.empty() ? 0 : ok.back();' \
  'const double top = ok.empty() ? 0 : ok.front();' \
  '*findings and the Answer*'
mutant "outcome: collapsed at exactly the stated gradient ratio" \
  src/study/outcome.cpp \
  'return !run.diagnostics.empty() && early_gradient_ratio(run.diagnostics.back()) < kCollapseGradRatio;' \
  'return !run.diagnostics.empty() && early_gradient_ratio(run.diagnostics.back()) <= kCollapseGradRatio;' \
  '*outcomes: collapsed*'
mutant "outcome: slow without a falling loss at every evaluation" \
  src/study/outcome.cpp \
  'if (!(run.evals[i].trained.loss < run.evals[i - 1].trained.loss)) return false;' \
  'if (!(run.evals[i].trained.loss <= run.evals[i - 1].trained.loss)) return false;' \
  '*outcomes: slow*'
mutant "stats: Holm without its step-down multiplier" \
  src/stats.cpp \
  'running = std::max(running, std::min(1.0, double(m - k) * p[order[k]]));' \
  'running = std::max(running, std::min(1.0, p[order[k]]));' \
  '*holm*'
mutant "spikes: no floor near a zero loss" \
  src/study/results.cpp \
  'loss[t] - before > min_rise;' \
  'loss[t] - before > 0;' \
  '*spikes*'
mutant "stats: the paired difference flips its sign" \
  src/stats.cpp \
  'if (std::isfinite(a[i]) && std::isfinite(b[i])) differences.push_back(a[i] - b[i]);' \
  'if (std::isfinite(a[i]) && std::isfinite(b[i])) differences.push_back(b[i] - a[i]);' \
  '*paired*,*findings*'
mutant "stats: t quantile one degree of freedom off" \
  src/stats.cpp \
  'if (df <= table.size()) return table[df - 1];' \
  'if (df <= table.size()) return table[std::min(df, table.size() - 1)];' \
  '*t quantile*,*t interval*'
mutant "stats: a zero-width interval at 0 shows a difference" \
  include/normlab/stats.hpp \
  'bool contains_zero() const { return !(low > 0) && !(high < 0); }' \
  'bool contains_zero() const { return low < 0 && high > 0; }' \
  '*paired*,*findings*'
mutant "serve: a percent-encoded dot segment inside DIR is served" \
  src/serve/files.cpp \
  "if (segment[0] == '.') return segment == \"..\" ? 403 : 404;" \
  'if (segment == ".") return 404;' \
  '*dot segments*'

mutant "data-parallel: gradients clipped on each rank's local sum before the reduction" \
  src/train/trainer.cpp \
  '  const dist::StepSums sums = ranks_->reduce(optimizer_->params(), local, figures.fields());' \
  '  optim::clip_grad_norm(optimizer_->params(), config_.optim.clip_grad_norm); const dist::StepSums sums = ranks_->reduce(optimizer_->params(), local, figures.fields());' \
  '*gradient clipping active*'
mutant "dropout: every layer keyed as layer 0" \
  src/nn/encoder.cpp \
  'kernels::dropout_key(dropout_seed, dropout.step, l)' \
  'kernels::dropout_key(dropout_seed, dropout.step, 0)' \
  '*own index*'
mutant "train step: accuracy divided by every position, ignored ones included" \
  src/train/trainer.cpp \
  'record.accuracy = sums.targets ? double(sums.correct) / double(sums.targets) : 0.0;' \
  'record.accuracy = sums.targets ? double(sums.correct) / double(global.targets.size()) : 0.0;' \
  '*only real targets*'
mutant "data-parallel: the parameter hash covers only the first tensor" \
  src/dist/data_parallel.cpp \
  '    const auto* bytes = reinterpret_cast<const unsigned char*>(tensor.data());' \
  '    if (&tensor != &params.front().second) break; const auto* bytes = reinterpret_cast<const unsigned char*>(tensor.data());' \
  '*parameter hash*'
mutant "eval groups: accuracy weighted per sequence" \
  src/train/evaluate.cpp \
  '    group.accuracy = correct / double(group.targets);' \
  '    group.accuracy = [&] { double s = 0.0; for (const BucketMetrics& b : buckets) if (b.bucket.beyond_train_max == beyond) s += b.accuracy * double(b.sequences); return s / double(group.sequences); }();' \
  '*weight each target*'
mutant "resume: a changed data file is not checked" \
  src/train/trainer_checkpoint.cpp \
  '  if (changes.empty()) return;' \
  '  if (changes.empty() || !accept_changed_data_ || accept_changed_data_) return;' \
  '*resume: labels swapped*,*validation file edited*'
mutant "compare: a changed data file is reused" \
  src/study/reuse.cpp \
  '    if (data) changes = data_differences(dir, run.config, digests);' \
  '    if (data && digests.size() > 1000) changes = data_differences(dir, run.config, digests);' \
  '*training file changed*'
mutant "sha256: the length padding counts bytes, not bits" \
  src/io/sha256.cpp \
  'const uint64_t bits = total_bytes_ * 8;' \
  'const uint64_t bits = total_bytes_;' \
  '*sha256*'
mutant "data-parallel: ranks reading different data are not compared" \
  src/train/session.cpp \
  'agree(comm, disagreement.empty() ? 0 : kExitBadInput, line, setup, base)' \
  'agree(comm, 0, line, setup, base)' \
  '*reads other content than rank 0*'
# ---- six bugs an independent set of mutants showed the suite let through (each has its test now)
mutant "lr search: the ratio's open lower end taken from the reference's low end, not its high end" \
  src/study/search_fit.cpp \
  'out.low_open = variant.low_open || reference.high_open || !std::isfinite(low);' \
  'out.low_open = variant.low_open || reference.low_open || !std::isfinite(low);' \
  "*lr search: the ratio's interval is open*"
mutant "verdicts: the accuracy AUC judged against the accuracy margin" \
  src/study/statistics.cpp \
  'std::tuple{"accuracy AUC", &c.accuracy_auc, margins.accuracy_auc},' \
  'std::tuple{"accuracy AUC", &c.accuracy_auc, margins.accuracy},' \
  '*verdicts: each endpoint*'
mutant "outcome: the collapse onset not reset when the gradients recover" \
  src/study/outcome.cpp \
  '    if (!collapsed) onset = -1;' \
  '' \
  '*outcomes: a collapse is dated*'
mutant "csv: a newline inside a quoted field not counted as a line" \
  src/data/formats.cpp \
  "else field += c, line_ += c == '\n';" \
  'else field += c;' \
  '*csv: a newline inside*'
mutant "macro-F1: a class predicted but absent from the data left out instead of counting F1 0" \
  src/train/class_metrics.cpp \
  'if (c.support == 0 && c.predicted == 0) continue;
    sum += c.f1;' \
  'if (c.support == 0) continue;
    sum += c.f1;' \
  '*macro-F1 and balanced accuracy of a known matrix*'
mutant "pool: a region opened without a new generation (a late worker claims its part with the old task)" \
  src/parallel.cpp \
  'const uint64_t generation = (state_.load(std::memory_order_relaxed) >> 32) + 1;' \
  'const uint64_t generation = (state_.load(std::memory_order_relaxed) >> 32);' \
  '*threads: a worker held between*'
count=${#names[@]}
if [ "$list" = 1 ]; then
  for ((i = 0; i < count; i++)); do printf '%2d  %-40s %s\n' $((i + 1)) "${files[$i]}" "${names[$i]}"; done
  exit 0
fi

# Occurrences of OLD in FILE: exactly one needed (at least one when EVERY is 1); prints why not.
pattern_ok() {
  MUT_FILE="$1" MUT_OLD="$2" MUT_ALL="$3" python3 - <<'PY'
import os, sys
n = open(os.environ["MUT_FILE"]).read().count(os.environ["MUT_OLD"])
if n == 0 or (n > 1 and os.environ["MUT_ALL"] != "1"):
    print("not found" if n == 0 else "found {} times".format(n))
    sys.exit(1)
PY
}
if [ "$check" = 1 ]; then
  bad=0
  for ((i = 0; i < count; i++)); do
    if [ ! -f "$here/${files[$i]}" ]; then
      echo "mutant $((i + 1)): file ${files[$i]} not found (${names[$i]})"; bad=1
    elif ! why=$(pattern_ok "$here/${files[$i]}" "${olds[$i]}" "${every[$i]}"); then
      echo "mutant $((i + 1)): pattern $why in ${files[$i]} (${names[$i]})"; bad=1
    fi
  done
  [ "$bad" = 0 ] && echo "mutants.sh: all $count patterns match the sources"
  exit $((bad * 2))
fi

# ----------------------------------------------------------------------------------- scratch copy
echo "mutants.sh: copying $here to $scratch"
mkdir -p "$scratch"
find "$scratch" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
if git -C "$here" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$here" && git ls-files -z -co --exclude-standard | grep -zv '^build/' | tar --null -T - -cf -) | tar -xf - -C "$scratch"
else  # an exported tree (git archive): everything but build directories
  (cd "$here" && tar --exclude=./build --exclude=./.git -cf - .) | tar -xf - -C "$scratch"
fi

# ccache: paths relative to the scratch dir hash like the worktree's own build, so unchanged files
# are cache hits.
export CCACHE_BASEDIR="$scratch"
cmake -S "$scratch" -B "$scratch/build" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_BUILD_TYPE=Release >/dev/null
build() { timeout 1800 cmake --build "$scratch/build" -j2 --target normlab_tests >"$scratch/build.log" 2>&1; }
suite() {  # $1: doctest -tc filter or "" for everything; exit status 0 = all passed
  local filter=()
  [ -n "$1" ] && filter=("-tc=$1")
  (cd "$scratch/build" && timeout 900 ./normlab_tests --no-intro --abort-after=1 "${filter[@]}" >"$scratch/test.log" 2>&1)
}

echo "mutants.sh: baseline build and suite (must pass)"
if ! build; then tail -30 "$scratch/build.log"; echo "mutants.sh: baseline build failed" >&2; exit 2; fi
if [ "$quick" = 0 ] && ! suite ""; then tail -30 "$scratch/test.log"; echo "mutants.sh: baseline suite fails" >&2; exit 2; fi

# Replace OLD by NEW in FILE; exactly one occurrence required (at least one when $4 is 1).
apply() {
  MUT_FILE="$1" MUT_OLD="$2" MUT_NEW="$3" MUT_ALL="$4" python3 - <<'PY'
import os, sys
path, old, new = os.environ["MUT_FILE"], os.environ["MUT_OLD"], os.environ["MUT_NEW"]
text = open(path).read()
n = text.count(old)
if n == 0 or (n > 1 and os.environ["MUT_ALL"] != "1"):
    print("not found" if n == 0 else "found {} times".format(n))
    sys.exit(1)
open(path, "w").write(text.replace(old, new))
PY
}

# The test case of the first failed assertion in test.log (doctest also prints "TEST CASE:" above a
# MESSAGE, so the name is taken from the block that holds an ERROR).
first_failure() {
  awk '/TEST CASE:/ { sub(/.*TEST CASE: */, ""); name = $0 } /ERROR:/ && name != "" { print name; exit }' "$scratch/test.log"
}

killed=0; survived=0
results=()
for ((i = 0; i < count; i++)); do
  n=$((i + 1))
  if [ -n "$only" ] && [[ "$only" != *",$n,"* ]]; then continue; fi
  file="$scratch/${files[$i]}"
  if [ ! -f "$file" ]; then echo "mutant $n: file ${files[$i]} not found" >&2; exit 2; fi
  cp -p "$file" "$file.orig"
  if ! why=$(apply "$file" "${olds[$i]}" "${news[$i]}" "${every[$i]}"); then
    mv "$file.orig" "$file"
    echo "mutant $n: pattern $why in ${files[$i]} (${names[$i]})" >&2
    exit 2
  fi
  start=$(date +%s)
  verdict="SURVIVED"; by="-"
  if ! build; then
    verdict="KILLED"; by="build error"
  elif ! suite "${focus[$i]}"; then
    verdict="KILLED"; by=$(first_failure)
  elif [ "$quick" = 1 ]; then
    verdict="FOCUS-SURVIVED"
  elif ! suite ""; then
    verdict="KILLED"; by=$(first_failure)
  fi
  [ -z "$by" ] && by="timeout or crash"
  mv "$file.orig" "$file"
  touch "$file"
  if [ "$verdict" = KILLED ]; then killed=$((killed + 1)); else survived=$((survived + 1)); fi
  line=$(printf '%2d  %-14s %4ss  %s  [%s]  by: %s' "$n" "$verdict" $(( $(date +%s) - start )) "${names[$i]}" "${files[$i]}" "$by")
  echo "$line"
  results+=("$line")
done

# Leave the scratch build matching the pristine sources.
build || true
echo
echo "mutants.sh: $killed killed, $survived survived (of $((killed + survived)))"
[ "$survived" -eq 0 ]
