// The report: a header saying what was run and by what, the Findings, a summary table, and the
// charts (stability, curves, inside the stack, accuracy by length). One function per section.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "common.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/stats.hpp"
#include "normlab/provenance.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/svg.hpp"
#include "normlab/train/config.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;
using detail::format_lr;

namespace {

struct Section {
  std::string title, text;
  std::vector<std::string> bullets;
  std::vector<std::string> svgs;
  std::string table_html, table_md;
};

// Everything the sections share.
struct Context {
  const ComparePlan& plan;
  const std::vector<RunResult>& results;
  std::vector<GroupSummary> groups;
  double chance;
  size_t window;                            // moving-average window of the curves, in steps
  std::map<std::string, std::string> colors;  // series label -> colour
  std::function<bool()> stop_requested;

  const GroupSummary* group(const std::string& variant, double lr, const std::string& setting) const {
    for (const GroupSummary& g : groups)
      if (g.variant == variant && g.lr == lr && g.setting == setting) return &g;
    return nullptr;
  }
  std::string draw(const Chart& chart) const {
    if (stop_requested && stop_requested()) throw ReportStopped{};
    return render_svg(chart);
  }
  // The learning rates the per-rate detail charts are drawn at: all of them when that is a handful
  // of charts, else the one where the variants differ most.
  std::vector<double> detail_lrs(const std::string& setting) const {
    if (plan.lrs.size() * plan.settings.size() <= 6) return plan.lrs;
    return {most_different_lr(plan, groups, setting)};
  }
  // Loss charts end at 10x the chance loss, so that one blown-up variant does not flatten the others.
  double loss_cap() const { return std::isfinite(chance) ? 10 * chance : 0; }
  void add_chance_line(Chart& chart) const {
    if (std::isfinite(chance)) chart.h_lines.push_back({chance, fmt::format("chance {:.3f}", chance)});
  }
};

// One fixed colour per variant in every report: a known variant name (or a label whose runs are all
// one known variant) gets the variant's colour; other labels share a palette in order.
std::map<std::string, std::string> series_colors(const ComparePlan& plan) {
  std::map<std::string, std::string> colors;
  std::set<std::string> used;
  for (const std::string& label : plan.variants) {
    std::string kind = find_variant(label) ? label : "";
    if (kind.empty()) {
      std::set<std::string> kinds;
      for (const RunSpec& r : plan.runs)
        if (r.variant == label && r.config.contains("model"))
          kinds.insert(variant_of(r.config["model"].value("norm", ""), r.config["model"].value("placement", "")));
      if (kinds.size() == 1) kind = *kinds.begin();
    }
    const Variant* v = kind.empty() ? nullptr : find_variant(kind);
    if (v && !used.count(v->color)) {
      colors[label] = v->color;
      used.insert(v->color);
    }
  }
  size_t next = 0;
  for (const std::string& label : plan.variants) {
    if (colors.count(label)) continue;
    while (used.count(palette(next))) ++next;
    colors[label] = palette(next);
    used.insert(palette(next));
  }
  return colors;
}

std::string fmt_num(double v, const char* spec = "{:.3f}") {
  if (!std::isfinite(v)) return "–";
  if (std::abs(v) >= 1e4) return fmt::format("{:.2g}", v);
  return fmt::format(fmt::runtime(spec), v);
}

std::string html_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table><tr>";
  for (const std::string& h : header) out += "<th>" + xml_escape(h) + "</th>";
  out += "</tr>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const std::string& c : row) out += "<td>" + xml_escape(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "|";
  for (const std::string& h : header) out += " " + h + " |";
  out += "\n|";
  for (size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& row : rows) {
    out += "|";
    for (const std::string& c : row) out += " " + c + " |";
    out += "\n";
  }
  return out;
}

// "lr 0.01, 4 layers, no warmup": a chart's learning rate and setting.
std::string where(double lr, const std::string& setting) {
  return "lr " + format_lr(lr) + (setting.empty() ? "" : ", " + setting);
}

// Median and min-max over seeds of a per-step series, smoothed by a trailing moving average.
Series curve(const GroupSummary& g, const std::vector<double> RunResult::*field, const std::string& color,
             size_t window) {
  Series s;
  s.label = g.variant;
  s.color = color;
  size_t longest = 0;
  for (const RunResult* r : g.runs) longest = std::max(longest, (r->*field).size());
  std::vector<std::vector<double>> smoothed;
  for (const RunResult* r : g.runs) {
    const std::vector<double>& v = r->*field;
    std::vector<double> out(v.size());
    double acc = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      acc += v[i];
      if (i >= window) acc -= v[i - window];
      out[i] = acc / double(std::min(i + 1, window));
    }
    smoothed.push_back(out);
  }
  for (size_t i = 0; i < longest; ++i) {
    std::vector<double> at;
    double step = double(i + 1);
    for (size_t k = 0; k < g.runs.size(); ++k)
      if (i < smoothed[k].size()) {
        at.push_back(smoothed[k][i]);
        step = g.runs[k]->steps[i];
      }
    at.erase(std::remove_if(at.begin(), at.end(), [](double x) { return !std::isfinite(x); }), at.end());
    if (at.empty()) continue;
    s.x.push_back(step);
    s.y.push_back(median(at));
    s.y_low.push_back(*std::min_element(at.begin(), at.end()));
    s.y_high.push_back(*std::max_element(at.begin(), at.end()));
  }
  return s;
}

Section findings_section(const Context& c) {
  Section sec;
  sec.title = "Findings";
  sec.text = "Computed from the runs by the definitions in docs/compare.md: learned = final train loss below 95% of "
             "the chance loss; at chance = at or above that (and not blown up); blew up = finite final train loss "
             "above 2x the run's first-step loss; diverged = stopped on a non-finite loss or gradient. A difference "
             "'above the seed range' means every seed of that variant ended above the worst seed of the best one.";
  sec.bullets = findings(c.plan, c.groups, c.chance);
  return sec;
}

Section summary_section(const Context& c) {
  Section sec;
  sec.title = "Summary: medians over seeds";
  sec.text = "Final train loss is the mean over the last 10% of steps (training mode: BatchNorm uses batch "
             "statistics). Valid loss and accuracy come from the last evaluation (eval mode: BatchNorm uses its "
             "running averages, every other variant computes exactly what it computed in training). 'finished' counts "
             "the runs that have ended (summary.json written), diverged ones included; medians leave diverged seeds "
             "out. The outcome columns count seeds by the Findings' definitions.";
  std::vector<std::vector<std::string>> rows;
  for (const GroupSummary& g : c.groups) {
    std::vector<std::string> row{g.variant, format_lr(g.lr)};
    if (c.plan.settings.size() > 1) row.push_back(g.setting);
    const std::string n = std::to_string(g.runs.size());
    for (const std::string& cell :
         {fmt::format("{}/{}", g.finished, n), fmt::format("{}/{}", g.learned, n), fmt::format("{}/{}", g.at_chance, n),
          fmt::format("{}/{}", g.blew_up, n), fmt::format("{}/{}", g.diverged, n), fmt_num(g.train_loss),
          fmt_num(c.chance), fmt_num(g.valid_loss), fmt_num(g.valid_accuracy),
          fmt_num(g.valid_loss - g.train_loss, "{:+.3f}")})
      row.push_back(cell);
    rows.push_back(row);
  }
  std::vector<std::string> header{"variant", "lr"};
  if (c.plan.settings.size() > 1) header.push_back("setting");
  for (const char* h : {"finished", "learned", "at chance", "blew up", "diverged", "train loss", "chance loss",
                        "valid loss", "valid acc", "valid - train"})
    header.push_back(h);
  sec.table_html = html_table(header, rows);
  sec.table_md = md_table(header, rows);
  return sec;
}

Section stability_section(const Context& c) {
  Section sec;
  sec.title = "Stability: final training loss against learning rate";
  sec.text = "Median over seeds. An X marks a learning rate at which at least half the seeds diverged, or whose median "
             "final loss blew up past 10 times the chance loss; it is drawn above the highest loss shown. The dashed grey "
             "line is the chance loss.";
  const double cap = c.loss_cap();
  double top = 0;
  for (const RunResult& r : c.results)
    if (std::isfinite(r.final_train_loss)) top = std::max(top, r.final_train_loss);
  if (cap > 0) top = std::min(top, cap / 1.5);
  for (const std::string& setting : c.plan.settings) {
    Chart chart;
    chart.title = setting.empty() ? "final train loss" : setting;
    chart.x_label = "learning rate (log)";
    chart.y_label = "final train loss (log)";
    chart.log_x = chart.log_y = true;
    chart.x_ticks = c.plan.lrs;
    c.add_chance_line(chart);
    for (const std::string& variant : c.plan.variants) {
      Series s;
      s.label = variant;
      s.color = c.colors.at(variant);
      s.markers = true;
      for (double lr : c.plan.lrs) {
        const GroupSummary* g = c.group(variant, lr, setting);
        if (!g) continue;
        const bool mostly_diverged = 2 * g->diverged >= int(g->runs.size());
        const bool off_chart = cap > 0 && g->train_loss > cap;
        s.x.push_back(lr);
        s.y.push_back(mostly_diverged || off_chart ? top * 1.5 + 1e-3 : g->train_loss);
        s.crossed.push_back(mostly_diverged || off_chart);
      }
      chart.series.push_back(s);
    }
    chart.note = cap > 0 ? fmt::format("X = diverged, or blew up past {:.3g} (10x chance; value in the table)", cap)
                         : "X = diverged (no finite loss)";
    sec.svgs.push_back(c.draw(chart));
  }
  return sec;
}

Section curves_section(const Context& c, const std::vector<double> RunResult::*field, const std::string& name,
                       const std::string& y_label, bool chance_line) {
  Section sec;
  sec.title = name + " curves";
  sec.text = fmt::format("Median over seeds with a min–max band, moving average over {} steps. A curve that stops "
                         "early belongs to a run that diverged.{}",
                         c.window, chance_line && std::isfinite(c.chance) ? " The dashed grey line is the chance loss." : "");
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.plan.lrs) {
      Chart chart;
      chart.title = where(lr, setting);
      chart.x_label = "step";
      chart.y_label = y_label;
      chart.log_y = true;
      if (chance_line) c.add_chance_line(chart);
      std::string off_top;
      for (const std::string& variant : c.plan.variants)
        if (const GroupSummary* g = c.group(variant, lr, setting)) {
          chart.series.push_back(curve(*g, field, c.colors.at(variant), c.window));
          const Series& s = chart.series.back();
          const double peak = s.y.empty() ? 0 : *std::max_element(s.y.begin(), s.y.end());
          if (chance_line && c.loss_cap() > 0 && peak > c.loss_cap())
            off_top += fmt::format("{}{} (median up to {:.2g})", off_top.empty() ? "" : ", ", variant, peak);
        }
      if (!off_top.empty()) {
        chart.y_max = c.loss_cap();
        chart.note = "leaves the chart at the top: " + off_top;
      }
      sec.svgs.push_back(c.draw(chart));
    }
  return sec;
}

Section stack_section(const Context& c) {
  Section sec;
  sec.title = "Inside the stack: per-layer residual RMS and gradient norm";
  sec.text = "First diagnostics step (dashed) and last (solid), median over seeds. Without normalization nothing "
             "bounds the residual stream, so at a high learning rate its RMS can grow by orders of magnitude from "
             "block to block; post-LN re-normalizes it after every block, pre-LN lets it grow but normalizes what "
             "each sublayer reads. Drawn at every learning rate of the grid, or, for a large grid, at the one where "
             "the variants' final losses differ most.";
  for (const std::string& setting : c.plan.settings)
    for (double lr : c.detail_lrs(setting))
      for (const auto& [init_field, end_field, what] :
           {std::tuple{&RunResult::init_residual_rms, &RunResult::end_residual_rms, "residual RMS after block"},
            std::tuple{&RunResult::init_layer_grad_norms, &RunResult::end_layer_grad_norms, "grad norm of block"}}) {
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
            }
            chart.series.push_back(s);
          }
        }
        chart.note = "dashed: first diagnostics step; solid: last";
        sec.svgs.push_back(c.draw(chart));
      }
  return sec;
}

Section length_section(const Context& c) {
  Section sec;
  sec.title = "Accuracy per sequence length";
  sec.text = "Last evaluation, median over the seeds that did not diverge. The grey band holds lengths longer than "
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
      sec.svgs.push_back(c.draw(chart));
    }
  std::vector<std::string> header{"variant", "at"};
  for (const auto& [lo, hi] : all_buckets) header.push_back(fmt::format("len {}–{}", lo, hi));
  sec.table_md = md_table(header, rows);
  return sec;
}

std::string runs_csv(const Context& c) {
  std::string extra_header;
  for (const auto& [key, values] : c.plan.extra_axes) extra_header += "," + key;
  std::string csv = "name,variant,norm,placement,lr,layers,warmup,seed" + extra_header +
                    ",finished,diverged,diverged_at_step,outcome,steps_done,first_train_loss,final_train_loss,"
                    "final_valid_loss,final_valid_accuracy,wall_time_s\n";
  auto num = [](double v, const char* spec) { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : ""; };
  for (const RunResult& r : c.results) {
    const json m = r.spec.config.contains("model") ? r.spec.config["model"] : json::object();
    std::string extra;
    for (const auto& [key, value] : r.spec.extra) extra += "," + value;
    std::string variant = r.spec.variant;
    if (variant.find_first_of(",\"") != std::string::npos) {
      std::string quoted = "\"";
      for (char ch : variant) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      variant = quoted + "\"";
    }
    csv += fmt::format("{},{},{},{},{},{},{},{}{},{},{},{},{},{},{},{},{},{},{}\n", r.spec.name, variant,
                       m.value("norm", ""), m.value("placement", ""), format_lr(r.spec.lr), r.spec.layers,
                       r.spec.warmup ? 1 : 0, r.spec.seed, extra, r.finished ? 1 : 0, r.diverged ? 1 : 0,
                       r.diverged_at >= 0 ? std::to_string(r.diverged_at) : "", outcome_name(classify(r, c.chance)),
                       r.steps.size(), num(r.loss.empty() ? NAN : r.loss.front(), "{:.6g}"),
                       num(r.final_train_loss, "{:.6g}"), num(r.final_valid_loss, "{:.6g}"),
                       num(r.final_valid_accuracy, "{:.6g}"), num(r.wall_time_s, "{:.2f}"));
  }
  return csv;
}

// Which normlab, CPU and thread counts produced these runs.
struct Provenance {
  std::string version = NORMLAB_VERSION;
  std::string cpu = normlab::cpu_model();
  std::string kernels = normlab::kernels_in_use();
  std::vector<int64_t> threads;
  std::string text() const {
    std::string t;
    for (int64_t n : threads) t += (t.empty() ? "" : ", ") + std::to_string(n);
    return fmt::format("Produced by normlab {} ({} kernels) on {}; the runs used {} thread(s) each{}. A rerun gives the same "
                       "numbers only on the same CPU instruction set with the same thread count.",
                       version, kernels, cpu, t.empty() ? "?" : t, threads.size() > 1 ? " (different runs, different counts)" : "");
  }
};

}  // namespace

void write_report(const ComparePlan& plan, const std::vector<RunResult>& results, const std::string& out_dir,
                  const std::function<bool()>& stop_requested) {
  const train::RunConfig base = train::config_from_json(plan.base, plan.source, ".", false);
  Context c{plan, results, {}, chance_loss(plan.base), size_t(std::max<int64_t>(1, base.train.steps / 40)),
            series_colors(plan), stop_requested};
  c.groups = summarize(results, c.chance);
  Provenance provenance;
  for (const RunResult& r : results)
    if (r.threads > 0 && std::find(provenance.threads.begin(), provenance.threads.end(), r.threads) == provenance.threads.end())
      provenance.threads.push_back(r.threads);

  std::vector<Section> sections;
  sections.push_back(findings_section(c));
  sections.push_back(summary_section(c));
  if (plan.lrs.size() > 1) sections.push_back(stability_section(c));
  sections.push_back(curves_section(c, &RunResult::loss, "Training loss", "train loss (log)", true));
  sections.push_back(curves_section(c, &RunResult::grad_norm, "Gradient norm", "global grad norm before clipping (log)", false));
  sections.push_back(stack_section(c));
  sections.push_back(length_section(c));

  io::write_file_atomic((fs::path(out_dir) / "runs.csv").string(), runs_csv(c));

  std::string variants_md, variants_html;
  for (const std::string& name : plan.variants) {
    const Variant* v = find_variant(name);
    const std::string description =
        v ? v->description + "; block " + block_formula(v->norm, v->placement, base.model.final_norm) : "";
    variants_md += fmt::format("- **{}**{}\n", name, description.empty() ? "" : ": " + description);
    variants_html += fmt::format("<li><b style=\"color:{}\">{}</b>{}</li>\n", c.colors.at(name), xml_escape(name),
                                 description.empty() ? "" : ": " + xml_escape(description));
  }
  std::string grid;
  if (plan.title == "normlab report") {
    grid = fmt::format("{} run(s) from {}.", plan.runs.size(), plan.source);
  } else {
    std::string extra;
    for (const auto& [key, values] : plan.extra_axes) extra += fmt::format(" × {} values of {}", values.size(), key);
    grid = fmt::format("Grid: {} variants × {} learning rates × {} seeds × {} depths × {} warmup settings{} = {} runs.",
                       plan.variants.size(), plan.lrs.size(), plan.seeds.size(), plan.layers.size(),
                       plan.warmups.size(), extra, plan.runs.size());
  }
  const std::string setup = fmt::format(
      "Task `{}` (train lengths {}–{}, evaluated up to {}; chance loss {}), d_model {}, {} heads, ffn {}, {} steps of {} "
      "with batch {}, norm eps {:g}. {}",
      base.task.name, base.task.min_len, base.task.max_len, base.task.eval_max_len,
      std::isfinite(c.chance) ? fmt::format("{:.3f}", c.chance) : "unknown", base.model.d_model, base.model.heads,
      base.model.ffn, base.train.steps, base.optim.name, base.train.batch_size, base.model.norm_eps, grid);
  const std::string ln_fact =
      "LayerNorm computes y = gamma * (x - mean) / sqrt(var + eps) + beta with mean and (biased) variance over "
      "each token's own features, so training and evaluation compute the same function and a sequence's result does "
      "not depend on its batch-mates or their lengths. BatchNorm's statistics are over the batch's tokens per "
      "feature, with running averages at evaluation — the difference shows in the 'valid - train' column.";

  std::string md = "# " + plan.title + "\n\n" + setup + "\n\n" + provenance.text() + "\n\n" + ln_fact +
                   "\n\nSeries:\n\n" + variants_md + "\n";
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + xml_escape(plan.title) +
      "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}"
      "h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}"
      "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
      "th{background:#f3f3f3}td:first-child{text-align:left}"
      ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:8px}"
      ".charts svg{width:100%;height:auto}p,li{line-height:1.4;max-width:1400px}</style></head><body>\n<h1>" +
      xml_escape(plan.title) + "</h1>\n";
  html += "<p>" + xml_escape(setup) + "</p>\n<p>" + xml_escape(provenance.text()) + "</p>\n<p>" + xml_escape(ln_fact) +
          "</p>\n<ul>" + variants_html + "</ul>\n";
  for (const Section& sec : sections) {
    md += "## " + sec.title + "\n\n" + sec.text + "\n\n";
    html += "<h2>" + xml_escape(sec.title) + "</h2>\n<p>" + xml_escape(sec.text) + "</p>\n";
    if (!sec.bullets.empty()) {
      html += "<ul>\n";
      for (const std::string& b : sec.bullets) {
        md += "- " + b + "\n";
        html += "<li>" + xml_escape(b) + "</li>\n";
      }
      html += "</ul>\n";
      md += "\n";
    }
    md += sec.table_md + (sec.table_md.empty() ? "" : "\n");
    html += sec.table_html;
    if (!sec.svgs.empty()) {
      html += "<div class=\"charts\">\n";
      for (const std::string& svg : sec.svgs) html += svg;
      html += "</div>\n";
    }
  }
  md += "Charts: report.html. One row per run: runs.csv.\n";
  html += "<p>One row per run: <a href=\"runs.csv\">runs.csv</a>. Tables as Markdown: report.md.</p>\n</body></html>\n";

  json summary = {{"normlab_version", provenance.version}, {"cpu", provenance.cpu}, {"kernels", provenance.kernels}, {"threads", provenance.threads},
                  {"runs", results.size()}, {"chance_loss", std::isfinite(c.chance) ? json(c.chance) : json(nullptr)}};
  std::map<std::string, int> outcomes;
  for (const RunResult& r : results) ++outcomes[outcome_name(classify(r, c.chance))];
  summary["outcomes"] = outcomes;
  summary["findings"] = sections.front().bullets;
  io::write_file_atomic((fs::path(out_dir) / "summary.json").string(), summary.dump(2) + "\n");
  io::write_file_atomic((fs::path(out_dir) / "report.md").string(), md);
  io::write_file_atomic((fs::path(out_dir) / "report.html").string(), html);
}

}  // namespace normlab::study
