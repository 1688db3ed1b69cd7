// A test driver for the data-parallel tests (tests/test_dist_mpi.cpp), run as
//   [mpirun -np N] normlab_dist_probe OUT.json STEPS NAME=CONFIG [NAME=CONFIG ...] [--emulate-local P]
// For each config: builds a Trainer on this launch's ranks, trains STEPS steps and records the
// global gradient and the diagnostics of step 1 (residual_rms, the attention statistics, log Z,
// update ratios) and every step's loss and gradient norm (before clipping). Rank 0 writes
//   {"NAME": {"world_size": N, "grads": {"param": [...]}, "residual_rms": [...], "losses": [...],
//             "grad_norms": [...]}, ...}
// --emulate-local P (one process only): step 1's gradient is instead computed the way local
// BatchNorm on P ranks defines it: each of the P shares of the batch forward and backward on its
// own, the loss sums added up, divided once by the batch's target count.
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/dist/communicator.hpp"
#include "normlab/dist/split.hpp"
#include "normlab/error.hpp"
#include "normlab/ops.hpp"
#include "normlab/parallel.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/trainer.hpp"

using namespace normlab;

namespace {

nlohmann::json gradients(train::Trainer& trainer) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, param] : trainer.model().named_parameters()) {
    const float* grad = param.grad_data();
    std::vector<double> values(size_t(param.numel()), 0.0);
    if (grad != nullptr)
      for (int64_t i = 0; i < param.numel(); ++i) values[size_t(i)] = grad[i];
    out[name] = values;
  }
  return out;
}

// One process playing P ranks with local BatchNorm statistics.
void emulate_local_step(train::Trainer& trainer, const data::Batch& batch, int parts) {
  nn::EncoderModel& model = trainer.model();
  model.train();
  trainer.optimizer().zero_grad();
  const std::vector<int64_t> boundaries = dist::balanced_split(batch.offsets, parts);
  for (int p = 0; p < parts; ++p) {
    const data::Batch share = dist::sub_batch(batch, boundaries[size_t(p)], boundaries[size_t(p) + 1]);
    if (share.batch_size() == 0) continue;
    // The masks a rank holding this share draws (none here: the tests run it without dropout).
    Tensor logits = model.forward(share.tokens, share.offsets, nullptr, {1, boundaries[size_t(p)]});
    Tensor loss = ops::mul_scalar(ops::cross_entropy(logits, share.targets), float(share.num_targets));
    loss.backward();  // gradients accumulate over the shares
  }
  for (const auto& [name, param] : model.named_parameters()) {
    Tensor handle = param;
    float* grad = handle.grad_data();
    for (int64_t i = 0; i < param.numel(); ++i) grad[i] = float(double(grad[i]) / double(batch.num_targets));
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 4) throw InputError("usage: normlab_dist_probe OUT.json STEPS NAME=CONFIG... [--emulate-local P]");
    const std::string out_path = argv[1];
    const int64_t steps = std::atoll(argv[2]);
    int emulate = 0;
    std::vector<std::pair<std::string, std::string>> runs;
    for (int i = 3; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--emulate-local" && i + 1 < argc) {
        emulate = std::atoi(argv[++i]);
        continue;
      }
      const size_t eq = arg.find('=');
      if (eq == std::string::npos) throw InputError("expected NAME=CONFIG, got " + arg);
      runs.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
    }
    nlohmann::json result = nlohmann::json::object();
    for (const auto& [name, config_path] : runs) {
      train::Trainer trainer(train::load_config(config_path));
      set_num_threads(static_cast<int>(trainer.config().train.threads));
      nlohmann::json run = {{"world_size", dist::world().size()},
                            {"losses", nlohmann::json::array()},
                            {"grad_norms", nlohmann::json::array()}};
      for (int64_t step = 1; step <= steps; ++step) {
        data::Batch batch = trainer.next_batch();
        if (step == 1 && emulate > 0) {
          emulate_local_step(trainer, batch, emulate);
          run["grads"] = gradients(trainer);
          break;
        }
        train::StepRecord record = trainer.train_step(batch, /*diagnostics=*/step == 1);
        if (step == 1) {
          run["grads"] = gradients(trainer);
          run["residual_rms"] = record.residual_rms;
          run["attention_max_logit"] = record.attention_max_logit;
          run["attention_entropy_mean"] = record.attention_entropy_mean;
          run["attention_entropy_min"] = record.attention_entropy_min;
          run["update_ratio"] = record.update_ratio;
          run["log_z"] = {record.log_z_mean.value_or(NAN), record.log_z_max_abs.value_or(NAN)};
        }
        run["losses"].push_back(record.loss);
        run["grad_norms"].push_back(record.grad_norm);
      }
      result[name] = run;
    }
    if (dist::world().rank() == 0) std::ofstream(out_path) << result.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "normlab_dist_probe: {}\n", e.what());
    return 2;
  }
}
