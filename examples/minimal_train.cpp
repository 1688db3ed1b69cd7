// minimal_train: one whole training run in one file, on the core library alone (the tour's last
// stop). A 2-layer pre-LN Transformer encoder learns to reverse sequences of digits: data, model,
// loss, backward, AdamW with warmup and cosine decay, gradient clipping, held-out evaluation on
// lengths it trained on and on longer ones it never saw, and printed progress.
//
// What `normlab train --config configs/reverse.json` does, minus the run directory, the
// checkpoints, the config file and the data-parallel ranks. Read it top to bottom:
//   1. the task: a batch is a list of sequences of different lengths, stored packed
//   2. the model: nn::EncoderModel, whose blocks compute x = x + f(LayerNorm(x))
//   3. the loop: forward -> cross_entropy -> backward -> clip -> AdamW step
//   4. evaluation under NoGradGuard: same computation, no graph (LayerNorm has no running stats)
//
//   ./build/minimal_train [steps] [seed]      (defaults 400 and 0)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "normlab/autograd.hpp"
#include "normlab/nn/encoder.hpp"
#include "normlab/ops.hpp"
#include "normlab/optim/optimizer.hpp"
#include "normlab/optim/schedule.hpp"
#include "normlab/rng.hpp"

using namespace normlab;

// 1. The task. Tokens are the digits 0..9; the target of position i is the token at position
// len-1-i. A batch is packed: all tokens in one vector, sequence b owning [offsets[b], offsets[b+1]).
struct Batch {
  std::vector<int32_t> tokens, targets;  // (T) each, T = total real tokens
  std::vector<int64_t> offsets;          // (B+1)
};

Batch make_batch(Rng& rng, int64_t batch_size, int64_t min_len, int64_t max_len) {
  Batch batch;
  batch.offsets.push_back(0);
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t len = min_len + rng.below(uint32_t(max_len - min_len + 1));
    const size_t start = batch.tokens.size();
    for (int64_t i = 0; i < len; ++i) batch.tokens.push_back(int32_t(rng.below(10)));
    for (int64_t i = 0; i < len; ++i) batch.targets.push_back(batch.tokens[start + len - 1 - i]);
    batch.offsets.push_back(int64_t(batch.tokens.size()));
  }
  return batch;
}

// Held-out loss (nats per token) and token accuracy; no graph is recorded.
struct Score {
  double loss = 0, accuracy = 0;
};

Score evaluate(nn::EncoderModel& model, const Batch& batch) {
  NoGradGuard no_grad;
  Tensor logits = model.forward(batch.tokens, batch.offsets);  // (T, 10)
  const double loss = ops::cross_entropy(logits, batch.targets).item();
  const float* row = logits.data();
  int64_t correct = 0;
  const int64_t num_tokens = int64_t(batch.targets.size()), num_classes = logits.size(-1);
  for (int64_t t = 0; t < num_tokens; ++t, row += num_classes) {
    int64_t best = 0;
    for (int64_t c = 1; c < num_classes; ++c)
      if (row[c] > row[best]) best = c;
    correct += best == batch.targets[t];
  }
  return {loss, double(correct) / double(num_tokens)};
}

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 400;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  if (steps < 1) {
    std::fprintf(stderr, "usage: minimal_train [steps >= 1] [seed]\n");
    return 2;
  }
  const int64_t batch_size = 32, min_len = 1, max_len = 16, unseen_max_len = 24;

  // 2. The model: PyTorch's nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=256,
  // norm_first=True) x 2, a final LayerNorm, digit embeddings, sinusoidal positions, a token head.
  nn::ModelOptions options;
  options.vocab_size = 10;
  options.num_classes = 10;
  options.max_len = 64;
  options.seed = seed;
  options.encoder.num_layers = 2;
  options.encoder.norm = "layernorm";  // y = gamma * (x - mean) / sqrt(var + eps) + beta, per token
  options.encoder.placement = nn::Placement::pre;
  nn::EncoderModel model(options);
  std::printf("model: %lld parameters, blocks %s\n", (long long)model.num_parameters(),
              nn::block_formula(options.encoder.norm, options.encoder.placement, true).c_str());

  // AdamW (decoupled weight decay, none on biases, norms and embeddings), warmup then cosine.
  optim::OptimizerOptions adamw;
  adamw.beta2 = 0.98f;
  adamw.weight_decay = 0.01f;
  optim::Optimizer optimizer(adamw, model.named_parameters());
  optim::ScheduleOptions schedule{optim::ScheduleKind::warmup_cosine, /*warmup_steps=*/50, steps, 0.1f};
  const double base_lr = 0.003, clip = 1.0;

  // Held-out sets, drawn once from their own stream: lengths seen in training, and longer ones.
  Rng valid_rng(seed, /*stream=*/7);
  const Batch valid_trained = make_batch(valid_rng, 256, min_len, max_len);
  const Batch valid_unseen = make_batch(valid_rng, 256, max_len + 1, unseen_max_len);

  // 3. The loop.
  Rng data_rng(seed, /*stream=*/5);
  for (int64_t step = 0; step < steps; ++step) {
    const Batch batch = make_batch(data_rng, batch_size, min_len, max_len);
    Tensor logits = model.forward(batch.tokens, batch.offsets);  // (T, 10), T real tokens only
    Tensor loss = ops::cross_entropy(logits, batch.targets);     // mean over the T tokens
    optimizer.zero_grad();
    loss.backward();  // the tape, newest node first: head, blocks (LayerNorm's backward), embedding
    const double grad_norm = optim::clip_grad_norm(optimizer.params(), clip);
    const double lr = optim::scheduled_lr(schedule, base_lr, step);
    optimizer.step(lr);
    if (!std::isfinite(loss.item())) {
      std::printf("step %lld: loss is %g, stopping\n", (long long)step, double(loss.item()));
      return 3;
    }
    if (step % 50 == 0 || step == steps - 1)
      std::printf("step %4lld  loss %.4f  lr %.5f  grad_norm %.3f\n", (long long)step, double(loss.item()), lr,
                  grad_norm);
  }

  // 4. Evaluation: LayerNorm normalizes each token by its own statistics, so nothing changes
  // between training and inference (no running averages, unlike BatchNorm).
  const Score trained = evaluate(model, valid_trained), unseen = evaluate(model, valid_unseen);
  std::printf("held-out, trained lengths %lld-%lld: loss %.4f accuracy %.4f\n", (long long)min_len, (long long)max_len,
              trained.loss, trained.accuracy);
  std::printf("held-out, unseen lengths %lld-%lld: loss %.4f accuracy %.4f\n", (long long)max_len + 1,
              (long long)unseen_max_len, unseen.loss, unseen.accuracy);
  return 0;
}
