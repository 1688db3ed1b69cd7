// Where a report's numbers came from: the setup line and section (task, model, grid, the variants'
// blocks), the provenance (normlab version, CPU, kernels, threads) and summary.json.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "normlab/provenance.hpp"
#include "normlab/study/search.hpp"
#include "normlab/train/setup.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

using nlohmann::json;

std::string Provenance::text() const {
  std::string t;
  for (int64_t n : threads) t += (t.empty() ? "" : ", ") + std::to_string(n);
  return fmt::format(
      "Produced by normlab {} ({} kernels) on {}; the runs used {} thread(s) each{}. A rerun with the same "
      "thread count gives the same numbers on any of the fast kernel paths (generic, avx2, avx512); "
      "the reference path rounds differently.",
      version, kernels, cpu, t.empty() ? "?" : t, threads.size() > 1 ? " (different runs, different counts)" : "");
}

Provenance provenance_of(const std::vector<RunResult>& results) {
  Provenance provenance;
  for (const RunResult& r : results)
    if (r.threads > 0 &&
        std::find(provenance.threads.begin(), provenance.threads.end(), r.threads) == provenance.threads.end())
      provenance.threads.push_back(r.threads);
  return provenance;
}

// The one line of setup before the Answer: task, lengths, steps, seeds and the plan's size.
std::string setup_line(const Context& c, const train::RunConfig& base) {
  const ComparePlan& plan = c.plan;
  std::string grid;
  if (plan.title == "normlab report") {
    grid = fmt::format("{} run(s) from {}.", plan.runs.size(), plan.source);
  } else {
    grid = plan_size_sentence(plan);  // a search's rounds counted so that the sentence adds up
  }
  std::string seeds;
  for (uint64_t s : plan.seeds) seeds += (seeds.empty() ? "" : ", ") + std::to_string(s);
  return fmt::format(
      "Task {}, trained on lengths {}–{} and evaluated on held-out lengths up to {}; {} steps of {}, batch {}; seeds "
      "{}. {}",
      train::task_title(base), base.task.min_len, base.task.max_len, base.task.eval_max_len, base.train.steps,
      optim::to_string(base.optim.name), base.train.batch_size, seeds.empty() ? "as given" : seeds, grid);
}

// The details after the Answer: the model, where the numbers came from, what LayerNorm computes,
// and one bullet per series.
Section setup_section(const Context& c, const train::RunConfig& base, const Provenance& provenance, bool batch_lesson) {
  Section about;
  about.title = "Setup";
  for (const std::string& name : c.plan.variants) {
    const Variant* v = find_variant(name);
    const std::string description =
        v ? v->description + "; block " + block_formula(v->norm, v->placement, base.model.final_norm, v->residual) : "";
    about.bullets.push_back(fmt::format("{}{}", name, description.empty() ? "" : ": " + description));
  }
  const std::string details =
      fmt::format(
          "Model: d_model {}, {} heads, ffn {}, norm eps {:g}; uniform-guess loss {}; warmup {} steps where on; "
          "gradient "
          "clipping {}; weight decay {:g}.",
          base.model.d_model, base.model.num_heads, base.model.dim_feedforward, base.model.norm_eps,
          std::isfinite(c.chance) ? fmt::format("{:.3f}", c.chance) : "unknown", base.optim.warmup_steps,
          base.optim.clip_grad_norm > 0 ? fmt::format("at {:g}", base.optim.clip_grad_norm) : "off",
          base.optim.weight_decay) +
      // The stabilizers, said only when on (off is the default and the plain recipe).
      (base.model.qk_norm != nn::QkNorm::none
           ? fmt::format(" Query-key normalization (model.qk_norm): {}.", nn::to_string(base.model.qk_norm))
           : "") +
      (base.optim.z_loss != 0
           ? fmt::format(" z-loss (optim.z_loss): {:g} log(Z)^2 added to the loss.", base.optim.z_loss)
           : "");
  const std::string ln_fact =
      std::string(
          "LayerNorm computes y = gamma * (x - mean) / sqrt(var + eps) + beta with mean and (biased) variance "
          "over each token's own features, so training and evaluation compute the same function and a "
          "sequence's result does not depend on its batch-mates or their lengths.") +
      (!c.has_batchnorm ? ""
       : batch_lesson   ? " BatchNorm's statistics are over the batch's tokens per feature, with running averages at "
                          "evaluation — the last section evaluates the same trained models both ways."
                        : " BatchNorm's statistics are over the batch's tokens per feature, with running averages at "
                          "evaluation.");
  about.text = details + " " + provenance.text() + " " + ln_fact;
  return about;
}

json summary_json(const Context& c, const Provenance& provenance, const std::vector<Section>& sections) {
  json summary = {{"normlab_version", provenance.version},
                  {"cpu", provenance.cpu},
                  {"kernels", provenance.kernels},
                  {"threads", provenance.threads},
                  {"runs", c.results.size()},
                  {"chance_loss", std::isfinite(c.chance) ? json(c.chance) : json(nullptr)},
                  {"reference", reference_variant(c.plan)},
                  {"seeds", c.plan.seeds}};
  std::map<std::string, int> outcomes;
  for (const RunResult& r : c.results) ++outcomes[outcome_name(classify(r))];
  summary["outcomes"] = outcomes;
  const EquivalenceMargins& m = c.plan.equivalence;
  summary["equivalence"] = {{"loss", m.loss},
                            {"accuracy_auc", m.accuracy_auc},
                            {"accuracy", m.accuracy},
                            {"from_config", m.from_config}};
  for (const Section& sec : sections) {
    if (sec.title == "Answer") summary["verdict"] = sec.bullets;
    if (sec.title == kDetailsTitle) summary["answer"] = sec.bullets;
    if (sec.title == "Findings") summary["findings"] = sec.bullets;
  }
  if (c.plan.search.enabled()) summary["lr_boundaries"] = boundaries_json(c.plan, c.groups);
  return summary;
}

}  // namespace normlab::study::report_parts
