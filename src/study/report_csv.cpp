// runs.csv (one row per run) and curves.csv (every training and evaluation point), safe to open in a
// spreadsheet.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string_view>

#include "normlab/io/text.hpp"
#include "common.hpp"
#include "normlab/study/report.hpp"

namespace normlab::study {

using detail::format_lr;
using nlohmann::json;

// Every text cell goes through the one CSV cell function (io/text.hpp: formula cells neutralised,
// RFC 4180 quoting), as predict --format csv does.
using io::csv_field;

std::string runs_csv(const ComparePlan& plan, const std::vector<RunResult>& results) {
  std::string extra_header;
  for (const auto& [key, values] : plan.extra_axes) extra_header.append(",").append(csv_field(key));
  std::string csv = "name,variant,norm,placement,lr,layers,warmup,seed" + extra_header +
                    ",finished,diverged,diverged_at_step,outcome,steps_done,first_train_loss,final_train_loss,"
                    "trained_valid_loss,trained_valid_accuracy,unseen_valid_loss,unseen_valid_accuracy,"
                    "chance_accuracy,steps_to_solve,loss_spikes,peak_grad_norm,final_valid_loss,final_valid_accuracy,"
                    "accuracy_auc,outcome_evidence,wall_time_s\n";
  auto num = [](double v, const char* spec) { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : ""; };
  for (const RunResult& r : results) {
    std::string extra;
    for (const auto& [key, value] : r.spec.extra) extra.append(",").append(csv_field(value));
    const int64_t solve = r.steps_to_solve();
    csv += fmt::format("{},{},{},{},{},{},{},{}{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                       csv_field(r.spec.name), csv_field(r.spec.variant),
                       csv_field(
                           nn::norm_as_spelled(r.spec.config.model.norm.name(), r.spec.config.model.residual.name())),
                       csv_field(nn::to_string(r.spec.config.model.placement)), format_lr(r.spec.lr()), r.spec.layers(),
                       r.spec.warmup() ? 1 : 0, r.spec.seed(), extra, r.finished ? 1 : 0, r.diverged ? 1 : 0,
                       r.diverged_at >= 0 ? std::to_string(r.diverged_at) : "", csv_field(outcome_name(classify(r))),
                       r.steps.size(), num(r.first_train_loss(), "{:.6g}"), num(r.final_train_loss, "{:.6g}"),
                       num(r.final_trained().loss, "{:.6g}"), num(r.final_trained().accuracy, "{:.6g}"),
                       num(r.final_unseen().loss, "{:.6g}"), num(r.final_unseen().accuracy, "{:.6g}"),
                       num(r.baseline.chance_accuracy(), "{:.6g}"), solve >= 0 ? std::to_string(solve) : "",
                       r.loss_spikes(), num(r.peak_grad_norm(), "{:.6g}"), num(r.final_valid_loss, "{:.6g}"),
                       num(r.final_valid_accuracy, "{:.6g}"), num(r.accuracy_auc(), "{:.6g}"),
                       csv_field(outcome_evidence(r)), num(r.wall_time_s, "{:.2f}"));
  }
  return csv;
}

// Every curve the charts draw, for re-plotting elsewhere: training steps and evaluations.
std::string curves_csv(const std::vector<RunResult>& results) {
  std::string csv = "run,variant,lr,seed,step,split,lengths,loss,accuracy\n";
  auto num = [](double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string(); };
  for (const RunResult& r : results) {
    const std::string prefix = fmt::format("{},{},{},{},", csv_field(r.spec.name), csv_field(r.spec.variant),
                                           format_lr(r.spec.lr()), r.spec.seed());
    for (size_t i = 0; i < r.steps.size(); ++i)
      csv += fmt::format("{}{:.0f},train,all,{},{}\n", prefix, r.steps[i], num(i < r.loss.size() ? r.loss[i] : NAN),
                         num(i < r.accuracy.size() ? r.accuracy[i] : NAN));
    for (const EvalPoint& e : r.evals)
      for (const auto& [name, group] :
           {std::pair{"trained", &e.trained}, std::pair{"unseen", &e.unseen}, std::pair{"all", &e.all}})
        if (group->targets > 0 || std::string(name) == "all")
          csv += fmt::format("{}{},valid,{},{},{}\n", prefix, e.step, name, num(group->loss), num(group->accuracy));
  }
  return csv;
}

}  // namespace normlab::study
