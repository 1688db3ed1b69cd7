// The report's looks inside the models: residual RMS and gradient norm per block, accuracy per
// sequence length, and BatchNorm's dependence on its batch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "common.hpp"
#include "normlab/stats.hpp"
#include "normlab/study/batch_eval.hpp"
#include "report_parts.hpp"

namespace normlab::study::report_parts {

using detail::format_lr;

namespace {

// Per variant of one setting, each seed's per-layer gradient norm at initialization: the step-1
// diagnostics record (its backward ran at the initial weights, before any update, so every learning
// rate of a seed gives the same figures: one run per seed is taken, the lowest rate's). Runs whose
// first diagnostics record is not step 1 have none.
std::map<std::string, std::vector<std::vector<double>>> init_grad_norms(const Context& c, const std::string& setting) {
  std::map<std::string, std::vector<std::vector<double>>> out;
  for (const std::string& variant : c.plan.variants) {
    std::map<int64_t, std::pair<double, const RunResult*>> by_seed;  // seed -> (lr, run)
    for (const GroupSummary& g : c.groups) {
      if (g.variant != variant || g.setting != setting) continue;
      for (const RunResult* r : g.runs) {
        if (r->diagnostics.empty() || r->diagnostics.front().step != 1 ||
            r->diagnostics.front().layer_grad_norms.empty())
          continue;
        const auto it = by_seed.find(int64_t(r->spec.seed()));
        if (it == by_seed.end() || g.lr < it->second.first) by_seed[int64_t(r->spec.seed())] = {g.lr, r};
      }
    }
    for (const auto& [seed, at] : by_seed) out[variant].push_back(at.second->diagnostics.front().layer_grad_norms);
  }
  return out;
}

// Xiong et al. 2020's picture: the gradient norm of each layer at initialization against depth, one
// line per variant (median over seeds, each seed a circle). Nothing when no run logged step 1.
std::optional<std::pair<std::string, std::string>> init_gradient_chart(const Context& c, const std::string& setting,
                                                                       std::vector<std::vector<std::string>>& rows) {
  const auto norms = init_grad_norms(c, setting);
  if (norms.empty()) return std::nullopt;
  Chart chart;
  chart.title = "grad norm per layer at initialization" + (c.plan.settings.size() > 1 ? " — " + setting : "");
  chart.x_label = "layer";
  chart.integer_x = true;
  chart.y_label = "grad norm at step 1 (log)";
  chart.log_y = true;
  for (const std::string& variant : c.plan.variants) {
    const auto it = norms.find(variant);
    if (it == norms.end()) continue;
    Series s;
    s.label = variant;
    s.color = c.colors.at(variant);
    s.markers = true;
    size_t layers = 0;
    for (const std::vector<double>& seed : it->second) layers = std::max(layers, seed.size());
    for (size_t layer = 0; layer < layers; ++layer) {
      std::vector<double> values;
      for (const std::vector<double>& seed : it->second)
        if (layer < seed.size() && std::isfinite(seed[layer]) && seed[layer] > 0) values.push_back(seed[layer]);
      if (values.empty()) continue;
      s.x.push_back(double(layer));
      s.y.push_back(median(values));
      for (double v : values) s.point_x.push_back(double(layer)), s.point_y.push_back(v);
    }
    if (s.y.empty()) continue;
    rows.push_back({variant, setting, std::to_string(it->second.size()), fmt_num(s.y.front(), "{:.3g}"),
                    fmt_num(s.y.back(), "{:.3g}"), fmt_num(s.y.back() / s.y.front(), "{:.2f}")});
    chart.series.push_back(std::move(s));
  }
  if (chart.series.empty()) return std::nullopt;
  chart.note = "step 1: the forward and backward at the initial weights; median over seeds, circles: each seed";
  return std::pair{"init-grad-norm" + c.setting_slug(setting), c.draw(chart)};
}

}  // namespace

Section stack_section(const Context& c) {
  Section sec;
  sec.title = "Inside the stack: per-layer residual RMS and gradient norm";
  sec.text =
      "First diagnostics step (dashed) and last (solid), median over seeds. Without normalization nothing "
      "bounds the residual stream, so at a high learning rate its RMS can grow by orders of magnitude from "
      "block to block; post-LN re-normalizes it after every block, pre-LN lets it grow but normalizes what "
      "each sublayer reads. Drawn at every learning rate of the grid, or, for a large grid, at the one where "
      "the variants' held-out accuracies differ most. First in each setting, the gradient norm of each layer "
      "at initialization (the step-1 diagnostics, before any update, so the same at every learning rate): "
      "Xiong et al. (2020) show post-LN's growing toward the output layer, which is why it needs warmup, and "
      "pre-LN's flat; the table gives the first and last layer's median and their ratio.";
  std::vector<std::vector<std::string>> init_rows;
  for (const std::string& setting : c.plan.settings) {
    if (auto chart = init_gradient_chart(c, setting, init_rows)) sec.charts.push_back(std::move(*chart));
    for (double lr : c.detail_lrs(setting))
      for (const auto& [init_field, end_field, what, slug] :
           {std::tuple{&RunResult::init_residual_rms, &RunResult::end_residual_rms, "residual RMS after block",
                       "residual-rms"},
            std::tuple{&RunResult::init_layer_grad_norms, &RunResult::end_layer_grad_norms, "grad norm of block",
                       "block-grad-norm"}}) {
        Chart chart;
        chart.title = fmt::format("{} — {}", what, where(lr, setting));
        chart.x_label = "block";
        chart.integer_x = true;
        chart.y_label = std::string(what) + " (log)";
        chart.log_y = true;
        for (const std::string& variant : c.plan.variants) {
          const GroupSummary* g = c.group(variant, lr, setting);
          if (!g) continue;
          size_t blocks = 0;
          for (const RunResult* r : g->runs) blocks = std::max(blocks, (r->*end_field).size());
          for (bool at_end : {false, true}) {
            Series s;
            s.label = at_end ? variant : "";
            s.color = c.colors.at(variant);
            s.dashed = !at_end;
            s.markers = true;
            for (size_t layer = 0; layer < blocks; ++layer) {
              std::vector<double> values;
              for (const RunResult* r : g->runs) {
                const std::vector<double>& v = at_end ? r->*end_field : r->*init_field;
                if (layer < v.size() && std::isfinite(v[layer])) values.push_back(v[layer]);
              }
              s.x.push_back(double(layer));
              s.y.push_back(median(values));
              if (at_end)
                for (double v : values) s.point_x.push_back(double(layer)), s.point_y.push_back(v);
            }
            chart.series.push_back(s);
          }
        }
        chart.note = "median; dashed: first diagnostics step; solid: last, circles: its seeds";
        sec.charts.push_back({fmt::format("{}-lr{}{}", slug, format_lr(lr), c.setting_slug(setting)), c.draw(chart)});
      }
  }
  if (!init_rows.empty()) {
    const std::vector<std::string> header{"variant",    "setting",     "seeds", "grad norm at init, first layer",
                                          "last layer", "last / first"};
    sec.table_html = html_table(header, init_rows);
    sec.table_md = md_table(header, init_rows);
  }
  return sec;
}

Section length_section(const Context& c) {
  Section sec;
  sec.title = "Accuracy per sequence length";
  sec.text =
      "Last evaluation, median over the seeds that did not diverge. The grey band holds lengths longer than "
      "any training sequence. Drawn at the same learning rates as the section above.";
  std::vector<std::vector<std::string>> rows;
  std::set<std::pair<int64_t, int64_t>> all_buckets;
  for (const GroupSummary& g : c.groups)
    for (const auto& [range, acc] : g.bucket_accuracy) all_buckets.insert(range);
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.detail_lrs(setting)) {
      Chart chart;
      chart.title = "accuracy by length — " + where(lr, setting);
      chart.x_label = "sequence length (bucket middle)";
      chart.y_label = "accuracy";
      for (const std::string& variant : c.plan.variants) {
        const GroupSummary* g = c.group(variant, lr, setting);
        if (!g) continue;
        Series s;
        s.label = variant;
        s.color = c.colors.at(variant);
        s.markers = true;
        std::vector<std::string> row{variant, where(lr, setting)};
        for (const auto& range : all_buckets) {
          auto it = g->bucket_accuracy.find(range);
          row.push_back(it == g->bucket_accuracy.end() ? "–" : fmt_num(it->second));
        }
        rows.push_back(row);
        for (const auto& [range, acc] : g->bucket_accuracy) {
          s.x.push_back(0.5 * double(range.first + range.second));
          s.y.push_back(acc);
          if (g->bucket_beyond_train.at(range)) {
            if (chart.shade_to <= chart.shade_from || range.first - 0.5 < chart.shade_from)
              chart.shade_from = double(range.first) - 0.5;
            chart.shade_to = std::max(chart.shade_to, double(range.second) + 0.5);
            chart.shade_label = "longer than trained";
          }
        }
        chart.series.push_back(s);
      }
      sec.charts.push_back({fmt::format("length-lr{}{}", format_lr(lr), c.setting_slug(setting)), c.draw(chart)});
    }
  std::vector<std::string> header{"variant", "at"};
  for (const auto& [lo, hi] : all_buckets) header.push_back(fmt::format("len {}–{}", lo, hi));
  sec.table_md = md_table(header, rows);
  return sec;
}

// The BatchNorm section, or nothing when the grid has no BatchNorm run.
std::optional<Section> batch_section(const Context& c) {
  const std::vector<BatchEvalCell> cells = batch_dependence(c.plan, c.results, c.groups, c.stop_requested);
  if (cells.empty()) return std::nullopt;
  Section sec;
  sec.title = "BatchNorm and its batch: the same trained models, evaluated four ways";
  sec.text =
      "LayerNorm's mean and variance are over each token's own features, so a model computes the same function in "
      "training and evaluation and a sequence's result does not depend on its batch-mates or their lengths. "
      "BatchNorm's are over the batch's real tokens per feature: at evaluation it uses running averages, and with "
      "batch statistics its answer depends on what else is in the batch. Each row evaluates the same checkpoints "
      "(every finished seed) on the held-out set: (1) with running averages; (2) IN-DISTRIBUTION BATCH DEPENDENCE: "
      "each batch's own statistics at the training batch size, over held-out sequences of trained lengths only, "
      "the kind of batch BatchNorm was trained on; (3) CONTAMINATION FROM UNSEEN LENGTHS: the same batch size over "
      "the whole held-out set, where sequences longer than any trained one share the batches: the change of "
      "trained-length accuracy from (2) to (3) is what unseen batch-mates do to the statistics, not batch "
      "dependence on trained data; (4) "
      "batch statistics over one sequence at a time (batch 1). Mean over seeds [95% interval]; 'max change' is the "
      "largest per-seed change of trained-length accuracy from the first row.";
  std::vector<std::vector<std::string>> rows;
  std::map<std::pair<std::string, std::string>, const BatchEvalCell*> first;
  for (const BatchEvalCell& cell : cells) {
    const auto key = std::pair{cell.variant, cell.setting};
    if (!first.count(key)) first[key] = &cell;
    const BatchEvalCell& base = *first[key];
    double max_change = 0;
    for (size_t i = 0; i < cell.trained.size() && i < base.trained.size(); ++i)
      max_change = std::max(max_change, std::abs(cell.trained[i] - base.trained[i]));
    std::vector<std::string> row{cell.variant,
                                 where(cell.lr, cell.setting),
                                 cell.mode.statistics,
                                 cell.mode.batches,
                                 std::to_string(cell.mode.batch_size),
                                 std::to_string(cell.seeds.size()),
                                 fmt_interval(t_interval(cell.trained), 0, 1),
                                 cell.mode.trained_lengths_only ? "—" : fmt_interval(t_interval(cell.unseen), 0, 1),
                                 fmt::format("{:.4f}", max_change)};
    rows.push_back(row);
  }
  const std::vector<std::string> header{"variant", "at",          "normalized with", "held-out batches", "eval batch",
                                        "n",       "trained acc", "unseen acc",      "max change"};
  sec.table_html = html_table(header, rows);
  sec.table_md = md_table(header, rows);
  return sec;
}

}  // namespace normlab::study::report_parts
