// A run's config.json as the trainer resolves it, for tests that write run directories by hand
// (serve's pages and limits): the fields a test varies, the rest a small synthetic task's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "normlab/train/config.hpp"

namespace normlab::test {

struct RunConfig {
  std::string task = "reverse";
  int64_t d_model = 16, heads = 2, layers = 1, ffn = 32;
  std::string norm = "layernorm", placement = "pre";
  int64_t steps = 100, batch_size = 8;
  uint64_t seed = 0;
  std::optional<int64_t> diagnostics_every;  // the trainer's default when unset
};

// config.json's text: the config resolved by train::config_from_json, every default filled in.
inline std::string resolved_run_config(const RunConfig& c) {
  nlohmann::json train = {{"steps", c.steps}, {"batch_size", c.batch_size}, {"eval_every", 1000},
                          {"log_every", 1},   {"seed", c.seed},             {"threads", 1}};
  if (c.diagnostics_every) train["diagnostics_every"] = *c.diagnostics_every;
  const nlohmann::json config = {
      {"model",
       {{"d_model", c.d_model},
        {"heads", c.heads},
        {"layers", c.layers},
        {"ffn", c.ffn},
        {"max_len", 16},
        {"norm", c.norm},
        {"placement", c.placement}}},
      {"task",
       {{"name", c.task}, {"min_len", 1}, {"max_len", 8}, {"eval_max_len", 12}, {"eval_examples", 16}, {"bucket_width", 4}}},
      {"optim", {{"lr", 0.01}, {"warmup_steps", 2}}},
      {"train", train}};
  return train::to_json(train::config_from_json(config, "synthetic", ".", false)).dump(2);
}

}  // namespace normlab::test
