#include "normlab/study/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/study/svg.hpp"
#include "normlab/train/config.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/io/json_strict.hpp"
#include "normlab/stats.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<Variant>& known_variants() {
  static const std::vector<Variant> variants{
      {"none", "none", "pre", "no normalization: x + f(x)"},
      {"post-ln", "layernorm", "post", "LayerNorm after the residual sum (original Transformer)"},
      {"pre-ln", "layernorm", "pre", "LayerNorm on each sublayer's input, plus a final LayerNorm"},
      {"rmsnorm", "rmsnorm", "pre", "RMSNorm (no centering), pre placement"},
      {"batchnorm", "batchnorm", "pre", "BatchNorm over the batch's real tokens, pre placement"},
      {"rezero", "rezero", "pre", "no normalization: x + alpha * f(x), alpha = 0 at init"},
      {"dyt", "dyt", "pre", "Dynamic Tanh gamma * tanh(a x) + beta in place of each norm, pre placement"},
      {"post-rmsnorm", "rmsnorm", "post", "RMSNorm, post placement"},
      {"post-batchnorm", "batchnorm", "post", "BatchNorm, post placement"},
      {"post-dyt", "dyt", "post", "Dynamic Tanh, post placement"},
  };
  return variants;
}

namespace {

const Variant* find_variant(const std::string& name) {
  for (const Variant& v : known_variants())
    if (v.name == name) return &v;
  return nullptr;
}

[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what) {
  throw InputError(fmt::format("{}: {}: {}", where, key, what));
}

// Sets a dotted key ("optim.lr") in a config object.
void set_path(json& config, const std::string& dotted, const json& value, const std::string& where) {
  const auto dot = dotted.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == dotted.size())
    fail(where, "set", fmt::format("'{}' is not of the form section.key", dotted));
  json& section = config[dotted.substr(0, dot)];
  if (!section.is_object()) section = json::object();
  section[dotted.substr(dot + 1)] = value;
}

std::string format_lr(double lr) { return fmt::format("{:g}", lr); }

template <typename T>
std::vector<T> read_axis(const json& grid, const std::string& key, const std::string& where,
                         const std::function<T(const json&)>& convert) {
  std::vector<T> out;
  if (!grid.contains(key)) return out;
  const json& list = grid.at(key);
  if (!list.is_array() || list.empty() || list.size() > 64)
    fail(where, "grid." + key, "must be a non-empty list of at most 64 values");
  for (const json& item : list) out.push_back(convert(item));
  return out;
}

std::vector<double> json_doubles(const json& j) {
  std::vector<double> out;
  if (!j.is_array()) return out;
  for (const json& v : j) out.push_back(v.is_number() ? v.get<double>() : NAN);
  return out;
}

}  // namespace

ComparePlan load_compare_plan(const std::string& path) {
  ComparePlan plan;
  plan.source = path;
  const json root = io::parse_strict(io::read_file(path, 1 << 20), path);
  if (!root.is_object()) throw InputError(fmt::format("{}: must be a JSON object", path));
  for (const auto& [key, value] : root.items())
    if (key != "base" && key != "set" && key != "grid")
      fail(path, key, "unknown key (expected base, set, grid)");
  if (!root.contains("base")) fail(path, "base", "missing (a run config path or object)");

  // The base run config: a file next to the compare config, or inline.
  const fs::path dir = fs::path(path).parent_path();
  const json& base = root.at("base");
  std::string base_where = path;
  fs::path base_dir = dir;
  if (base.is_string()) {
    const fs::path base_path = dir / base.get<std::string>();
    base_where = base_path.string();
    base_dir = base_path.parent_path();
    plan.base = io::parse_strict(io::read_file(base_path.string(), 1 << 20), base_path.string());
  } else if (base.is_object()) {
    plan.base = base;
  } else {
    fail(path, "base", "must be a path (string) or a run config (object)");
  }
  // Data file paths in the base are relative to its own directory; the runs' configs live elsewhere,
  // so make them absolute now.
  if (plan.base.contains("task") && plan.base["task"].is_object())
    for (const char* key : {"train_file", "valid_file"}) {
      json& v = plan.base["task"][key];
      if (v.is_string() && fs::path(v.get<std::string>()).is_relative())
        v = fs::absolute(base_dir / v.get<std::string>()).lexically_normal().string();
      if (v.is_null()) plan.base["task"].erase(key);
    }
  if (root.contains("set")) {
    const json& set = root.at("set");
    if (!set.is_object()) fail(path, "set", "must be an object of \"section.key\": value");
    for (const auto& [key, value] : set.items()) set_path(plan.base, key, value, path);
  }
  // Validate the base once, so a typo is reported against the file the user wrote.
  train::config_from_json(plan.base, path + " (base)", ".");

  const json grid = root.contains("grid") ? root.at("grid") : json::object();
  if (!grid.is_object()) fail(path, "grid", "must be an object");
  for (const auto& [key, value] : grid.items())
    if (key != "variants" && key != "lr" && key != "seeds" && key != "layers" && key != "warmup")
      fail(path, "grid." + key, "unknown key (expected variants, lr, seeds, layers, warmup)");

  plan.variants = read_axis<std::string>(grid, "variants", path, [&](const json& v) {
    if (!v.is_string() || !find_variant(v.get<std::string>())) {
      std::string names;
      for (const Variant& k : known_variants()) names += (names.empty() ? "" : ", ") + k.name;
      fail(path, "grid.variants", fmt::format("unknown variant {} (choose from {})", v.dump(), names));
    }
    return v.get<std::string>();
  });
  plan.lrs = read_axis<double>(grid, "lr", path, [&](const json& v) {
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 10)
      fail(path, "grid.lr", fmt::format("each learning rate must be a number in (0, 10], got {}", v.dump()));
    return v.get<double>();
  });
  plan.seeds = read_axis<uint64_t>(grid, "seeds", path, [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail(path, "grid.seeds", fmt::format("each seed must be a non-negative integer, got {}", v.dump()));
    return v.get<uint64_t>();
  });
  plan.layers = read_axis<int64_t>(grid, "layers", path, [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 64)
      fail(path, "grid.layers", fmt::format("each depth must be an integer in [1, 64], got {}", v.dump()));
    return v.get<int64_t>();
  });
  plan.warmups = read_axis<bool>(grid, "warmup", path, [&](const json& v) {
    if (!v.is_boolean()) fail(path, "grid.warmup", fmt::format("must be a list of true/false, got {}", v.dump()));
    return v.get<bool>();
  });

  // Missing axes keep the base config's value.
  const train::RunConfig base_config = train::config_from_json(plan.base, path + " (base)", ".");
  if (plan.variants.empty()) {
    const std::string norm = base_config.model.norm, placement = base_config.model.placement;
    std::string name;
    for (const Variant& v : known_variants())
      if (v.norm == norm && (v.placement == placement || norm == "none" || norm == "rezero")) {
        name = v.name;
        break;
      }
    plan.variants.push_back(name.empty() ? norm + "-" + placement : name);
  }
  if (plan.lrs.empty()) plan.lrs.push_back(base_config.optim.lr);
  if (plan.seeds.empty()) plan.seeds.push_back(uint64_t(base_config.train.seed));
  if (plan.layers.empty()) plan.layers.push_back(base_config.model.layers);
  if (plan.warmups.empty()) plan.warmups.push_back(base_config.optim.warmup_steps > 0);
  const int64_t base_warmup = base_config.optim.warmup_steps;
  if (std::find(plan.warmups.begin(), plan.warmups.end(), true) != plan.warmups.end() && base_warmup == 0)
    fail(path, "grid.warmup", "contains true but the base config has optim.warmup_steps = 0");

  const size_t total = plan.variants.size() * plan.lrs.size() * plan.seeds.size() * plan.layers.size() *
                       plan.warmups.size();
  if (total > 5000) fail(path, "grid", fmt::format("{} runs is more than the limit of 5000", total));

  for (int64_t layers : plan.layers)
    for (bool warmup : plan.warmups)
      for (double lr : plan.lrs)
        for (const std::string& variant_name : plan.variants)
          for (uint64_t seed : plan.seeds) {
            const Variant* variant = find_variant(variant_name);
            RunSpec spec;
            spec.variant = variant_name;
            spec.lr = lr;
            spec.layers = layers;
            spec.warmup = warmup;
            spec.seed = seed;
            spec.name = fmt::format("{}_lr{}_L{}_{}_s{}", variant_name, format_lr(lr), layers,
                                    warmup ? "warmup" : "nowarmup", seed);
            spec.config = plan.base;
            if (variant) {
              set_path(spec.config, "model.norm", variant->norm, path);
              set_path(spec.config, "model.placement", variant->placement, path);
            }
            set_path(spec.config, "optim.lr", lr, path);
            set_path(spec.config, "model.layers", layers, path);
            set_path(spec.config, "optim.warmup_steps", warmup ? base_warmup : 0, path);
            set_path(spec.config, "train.seed", seed, path);
            set_path(spec.config, "train.threads", 1, path);
            train::config_from_json(spec.config, fmt::format("{}: run {}", path, spec.name), ".");
            plan.runs.push_back(std::move(spec));
          }
  return plan;
}

RunResult read_run(const RunSpec& spec, const std::string& run_dir) {
  RunResult r;
  r.spec = spec;
  const fs::path dir(run_dir);
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  bool have_init_diag = false;
  while (std::getline(metrics, line)) {
    if (io::json_nesting_depth(line) > io::kMaxJsonDepth) continue;  // not a record of ours
    json rec = json::parse(line, nullptr, false);
    if (rec.is_discarded() || !rec.is_object()) continue;  // a torn last line of a killed run
    if (rec.contains("split")) {
      if (rec.value("split", "") != "valid") continue;
      r.final_valid_loss = rec["loss"].is_number() ? rec["loss"].get<double>() : NAN;
      r.final_valid_accuracy = rec["accuracy"].is_number() ? rec["accuracy"].get<double>() : NAN;
      r.buckets.clear();
      if (rec.contains("buckets"))
        for (const json& b : rec["buckets"]) {
          BucketResult br;
          br.min_len = b.value("min_len", 0);
          br.max_len = b.value("max_len", 0);
          br.beyond_train = b.value("beyond_train", false);
          br.loss = b["loss"].is_number() ? b["loss"].get<double>() : NAN;
          br.accuracy = b["accuracy"].is_number() ? b["accuracy"].get<double>() : NAN;
          br.count = b.value("count", int64_t(0));
          r.buckets.push_back(br);
        }
      continue;
    }
    if (!rec.contains("step")) continue;
    if (rec.value("diverged", false)) {
      r.diverged = true;
      r.diverged_at = rec["step"].get<int64_t>();
      continue;
    }
    r.steps.push_back(rec["step"].get<double>());
    r.loss.push_back(rec["loss"].is_number() ? rec["loss"].get<double>() : NAN);
    r.grad_norm.push_back(rec["grad_norm"].is_number() ? rec["grad_norm"].get<double>() : NAN);
    r.accuracy.push_back(rec["accuracy"].is_number() ? rec["accuracy"].get<double>() : NAN);
    if (rec.contains("residual_rms")) {
      if (!have_init_diag) {
        r.init_residual_rms = json_doubles(rec["residual_rms"]);
        r.init_layer_grad_norms = json_doubles(rec["layer_grad_norms"]);
        have_init_diag = true;
      }
      r.end_residual_rms = json_doubles(rec["residual_rms"]);
      r.end_layer_grad_norms = json_doubles(rec["layer_grad_norms"]);
    }
  }
  std::ifstream summary_file(dir / "summary.json");
  if (summary_file) {
    json summary = json::parse(summary_file, nullptr, false);
    if (summary.is_object()) {
      r.finished = true;
      if (summary.value("diverged", false)) r.diverged = true;
      if (summary.contains("diverged_at_step") && summary["diverged_at_step"].is_number())
        r.diverged_at = summary["diverged_at_step"].get<int64_t>();
      if (summary.contains("wall_time_s") && summary["wall_time_s"].is_number())
        r.wall_time_s = summary["wall_time_s"].get<double>();
    }
  }
  if (!r.loss.empty()) {
    const size_t tail = std::max<size_t>(1, r.loss.size() / 10);
    double sum = 0;
    for (size_t i = r.loss.size() - tail; i < r.loss.size(); ++i) sum += r.loss[i];
    r.final_train_loss = sum / double(tail);
  }
  if (r.diverged) r.final_train_loss = NAN;
  return r;
}

// ---------------------------------------------------------------- the report
namespace {

struct Group {  // the runs that differ only by seed
  std::string variant;
  double lr;
  int64_t layers;
  bool warmup;
  std::vector<const RunResult*> runs;
};

std::vector<Group> group_by_seed(const ComparePlan& plan, const std::vector<RunResult>& results) {
  std::vector<Group> groups;
  for (const RunResult& r : results) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.variant == r.spec.variant && g.lr == r.spec.lr && g.layers == r.spec.layers && g.warmup == r.spec.warmup;
    });
    if (it == groups.end()) {
      groups.push_back({r.spec.variant, r.spec.lr, r.spec.layers, r.spec.warmup, {}});
      it = groups.end() - 1;
    }
    it->runs.push_back(&r);
  }
  (void)plan;
  return groups;
}

const Group* find_group(const std::vector<Group>& groups, const std::string& variant, double lr, int64_t layers,
                        bool warmup) {
  for (const Group& g : groups)
    if (g.variant == variant && g.lr == lr && g.layers == layers && g.warmup == warmup) return &g;
  return nullptr;
}

std::string variant_color(const ComparePlan& plan, const std::string& variant) {
  auto it = std::find(plan.variants.begin(), plan.variants.end(), variant);
  return palette(size_t(it - plan.variants.begin()));
}

// Median and min-max over seeds of a per-step series, smoothed by a trailing moving average.
Series curve(const Group& g, const std::vector<double> RunResult::*field, const std::string& label,
             const std::string& color, size_t window) {
  Series s;
  s.label = label;
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
    const auto finite_end = std::remove_if(at.begin(), at.end(), [](double x) { return !std::isfinite(x); });
    at.erase(finite_end, at.end());
    if (at.empty()) continue;
    s.x.push_back(step);
    s.y.push_back(median(at));
    s.y_low.push_back(*std::min_element(at.begin(), at.end()));
    s.y_high.push_back(*std::max_element(at.begin(), at.end()));
  }
  return s;
}

std::string fmt_num(double v, const char* spec = "{:.3f}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "–";
}

struct Section {
  std::string title, text;
  std::vector<std::string> svgs;
  std::string table_html, table_md;
};

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

}  // namespace

void write_report(const ComparePlan& plan, const std::vector<RunResult>& results, const std::string& out_dir) {
  const std::vector<Group> groups = group_by_seed(plan, results);
  const train::RunConfig base = train::config_from_json(plan.base, plan.source, ".", false);
  std::vector<Section> sections;
  int64_t steps = base.train.steps;
  const size_t window = size_t(std::max<int64_t>(1, steps / 40));

  // 1. Summary table: one row per (variant, lr, depth, warmup), medians over seeds.
  {
    Section sec;
    sec.title = "Summary: medians over seeds";
    sec.text = "Final train loss is the mean over the last 10% of steps (training mode: BatchNorm uses batch "
               "statistics). Valid loss and accuracy come from the last evaluation (eval mode: BatchNorm uses its "
               "running averages, every other variant computes exactly what it computed in training). 'finished' "
               "counts the runs that have ended (summary.json written), diverged ones included; a diverged run "
               "stopped on a non-finite loss or gradient and is left out of the medians (they are over the seeds that "
               "did not diverge).";
    std::vector<std::vector<std::string>> rows;
    for (const Group& g : groups) {
      std::vector<double> train_loss, valid_loss, valid_acc;
      int diverged = 0, finished = 0;
      for (const RunResult* r : g.runs) {
        train_loss.push_back(r->final_train_loss);
        valid_loss.push_back(r->diverged ? NAN : r->final_valid_loss);
        valid_acc.push_back(r->diverged ? NAN : r->final_valid_accuracy);
        diverged += r->diverged;
        finished += r->finished;
      }
      const double tl = median(train_loss), vl = median(valid_loss);
      rows.push_back({g.variant, format_lr(g.lr), std::to_string(g.layers), g.warmup ? "yes" : "no",
                      fmt::format("{}/{}", finished, g.runs.size()), fmt::format("{}/{}", diverged, g.runs.size()),
                      fmt_num(tl), fmt_num(vl), fmt_num(median(valid_acc)), fmt_num(vl - tl, "{:+.3f}")});
    }
    const std::vector<std::string> header{"variant", "lr", "layers", "warmup", "finished", "diverged",
                                          "train loss", "valid loss", "valid acc", "valid - train"};
    sec.table_html = html_table(header, rows);
    sec.table_md = md_table(header, rows);
    sections.push_back(sec);
  }

  // 2. Stability: final loss against learning rate.
  if (plan.lrs.size() > 1) {
    Section sec;
    sec.title = "Stability: final training loss against learning rate";
    sec.text = "Median over seeds (band: min to max). An X marks a learning rate at which at least half the seeds "
               "diverged; it is drawn above the highest finite loss.";
    for (int64_t layers : plan.layers)
      for (bool warmup : plan.warmups) {
        Chart chart;
        chart.title = fmt::format("{} layers, {}", layers, warmup ? "with warmup" : "no warmup");
        chart.x_label = "learning rate (log)";
        chart.y_label = "final train loss (log)";
        chart.log_x = chart.log_y = true;
        double top = 0;
        for (const RunResult& r : results)
          if (std::isfinite(r.final_train_loss)) top = std::max(top, r.final_train_loss);
        for (const std::string& variant : plan.variants) {
          Series s;
          s.label = variant;
          s.color = variant_color(plan, variant);
          s.markers = true;
          for (double lr : plan.lrs) {
            const Group* g = find_group(groups, variant, lr, layers, warmup);
            if (!g) continue;
            std::vector<double> losses;
            int diverged = 0;
            for (const RunResult* r : g->runs) {
              losses.push_back(r->final_train_loss);
              diverged += r->diverged;
            }
            const bool mostly_diverged = 2 * diverged >= int(g->runs.size());
            s.x.push_back(lr);
            s.y.push_back(mostly_diverged ? top * 1.5 + 1e-3 : median(losses));
            s.crossed.push_back(mostly_diverged);
          }
          chart.series.push_back(s);
        }
        chart.note = "X = diverged (no finite loss)";
        sec.svgs.push_back(render_svg(chart));
      }
    sections.push_back(sec);
  }

  // 3. Loss and gradient-norm curves.
  for (const auto& [field, name, ylabel, log_y] :
       {std::tuple{&RunResult::loss, "Training loss", "train loss (log)", true},
        std::tuple{&RunResult::grad_norm, "Gradient norm", "global grad norm before clipping (log)", true}}) {
    Section sec;
    sec.title = fmt::format("{} curves", name);
    sec.text = fmt::format("Median over seeds with a min–max band, moving average over {} steps. A curve that stops "
                           "early belongs to a run that diverged.",
                           window);
    for (int64_t layers : plan.layers)
      for (bool warmup : plan.warmups)
        for (double lr : plan.lrs) {
          Chart chart;
          chart.title = fmt::format("lr {}, {} layers, {}", format_lr(lr), layers, warmup ? "warmup" : "no warmup");
          chart.x_label = "step";
          chart.y_label = ylabel;
          chart.log_y = log_y;
          for (const std::string& variant : plan.variants)
            if (const Group* g = find_group(groups, variant, lr, layers, warmup))
              chart.series.push_back(curve(*g, field, variant, variant_color(plan, variant), window));
          sec.svgs.push_back(render_svg(chart));
        }
    sections.push_back(sec);
  }

  // 4. Per-layer diagnostics at initialization and at the end.
  {
    Section sec;
    sec.title = "Inside the stack: per-layer residual RMS and gradient norm";
    sec.text = "First diagnostics step (dashed) and last (solid), median over seeds, at the smallest learning rate. "
               "Post-LN re-normalizes the residual stream after every block, so its RMS stays near 1; pre-LN and "
               "no-norm stacks let it grow with depth. Gradient norms per block show where the signal goes.";
    const double lr = *std::min_element(plan.lrs.begin(), plan.lrs.end());
    for (int64_t layers : plan.layers)
      for (bool warmup : plan.warmups)
        for (const auto& [init_field, end_field, what] :
             {std::tuple{&RunResult::init_residual_rms, &RunResult::end_residual_rms, "residual RMS after block"},
              std::tuple{&RunResult::init_layer_grad_norms, &RunResult::end_layer_grad_norms, "grad norm of block"}}) {
          Chart chart;
          chart.title = fmt::format("{} — lr {}, {} layers, {}", what, format_lr(lr), layers,
                                    warmup ? "warmup" : "no warmup");
          chart.x_label = "block";
          chart.integer_x = true;
          chart.y_label = std::string(what) + " (log)";
          chart.log_y = true;
          for (const std::string& variant : plan.variants) {
            const Group* g = find_group(groups, variant, lr, layers, warmup);
            if (!g) continue;
            for (bool at_end : {false, true}) {
              Series s;
              s.label = at_end ? variant : "";
              s.color = variant_color(plan, variant);
              s.dashed = !at_end;
              s.markers = true;
              for (int64_t layer = 0; layer < layers; ++layer) {
                std::vector<double> values;
                for (const RunResult* r : g->runs) {
                  const std::vector<double>& v = at_end ? r->*end_field : r->*init_field;
                  if (size_t(layer) < v.size()) values.push_back(v[size_t(layer)]);
                }
                s.x.push_back(double(layer));
                s.y.push_back(median(values));
              }
              chart.series.push_back(s);
            }
          }
          chart.note = "dashed: first diagnostics step; solid: last";
          sec.svgs.push_back(render_svg(chart));
        }
    sections.push_back(sec);
  }

  // 5. Length generalization.
  {
    Section sec;
    sec.title = "Accuracy per sequence length";
    sec.text = "Last evaluation, median over seeds, at the smallest learning rate. The grey band holds lengths "
               "longer than any training sequence.";
    const double lr = *std::min_element(plan.lrs.begin(), plan.lrs.end());
    for (int64_t layers : plan.layers)
      for (bool warmup : plan.warmups) {
        Chart chart;
        chart.title = fmt::format("accuracy by length — lr {}, {} layers, {}", format_lr(lr), layers,
                                  warmup ? "warmup" : "no warmup");
        chart.x_label = "sequence length (bucket middle)";
        chart.y_label = "accuracy";
        for (const std::string& variant : plan.variants) {
          const Group* g = find_group(groups, variant, lr, layers, warmup);
          if (!g) continue;
          Series s;
          s.label = variant;
          s.color = variant_color(plan, variant);
          s.markers = true;
          std::map<std::pair<int64_t, int64_t>, std::vector<double>> by_bucket;
          for (const RunResult* r : g->runs)
            for (const BucketResult& b : r->buckets) {
              if (b.count == 0 || r->diverged) continue;
              by_bucket[{b.min_len, b.max_len}].push_back(b.accuracy);
              if (b.beyond_train && (chart.shade_from == 0 || b.min_len - 0.5 < chart.shade_from)) {
                chart.shade_from = double(b.min_len) - 0.5;
                chart.shade_label = "longer than trained";
              }
              if (b.beyond_train) chart.shade_to = std::max(chart.shade_to, double(b.max_len) + 0.5);
            }
          for (const auto& [range, values] : by_bucket) {
            s.x.push_back(0.5 * double(range.first + range.second));
            s.y.push_back(median(values));
          }
          chart.series.push_back(s);
        }
        sec.svgs.push_back(render_svg(chart));
      }
    sections.push_back(sec);
  }

  // ---- runs.csv
  std::string csv =
      "name,variant,norm,placement,lr,layers,warmup,seed,finished,diverged,diverged_at_step,steps_done,"
      "final_train_loss,final_valid_loss,final_valid_accuracy,wall_time_s\n";
  for (const RunResult& r : results) {
    const json& m = r.spec.config["model"];
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.spec.name, r.spec.variant,
                       m.value("norm", ""), m.value("placement", ""), format_lr(r.spec.lr), r.spec.layers,
                       r.spec.warmup ? 1 : 0, r.spec.seed, r.finished ? 1 : 0, r.diverged ? 1 : 0,
                       r.diverged_at >= 0 ? std::to_string(r.diverged_at) : "", r.steps.size(),
                       std::isfinite(r.final_train_loss) ? fmt::format("{:.6g}", r.final_train_loss) : "",
                       std::isfinite(r.final_valid_loss) ? fmt::format("{:.6g}", r.final_valid_loss) : "",
                       std::isfinite(r.final_valid_accuracy) ? fmt::format("{:.6g}", r.final_valid_accuracy) : "",
                       std::isfinite(r.wall_time_s) ? fmt::format("{:.2f}", r.wall_time_s) : "");
  }
  io::write_file_atomic((fs::path(out_dir) / "runs.csv").string(), csv);

  // ---- report.md and report.html
  std::string variants_md, variants_html;
  for (const std::string& name : plan.variants) {
    const Variant* v = find_variant(name);
    variants_md += fmt::format("- **{}**: {}\n", name, v ? v->description : "");
    variants_html += fmt::format("<li><b>{}</b>: {}</li>\n", xml_escape(name), xml_escape(v ? v->description : ""));
  }
  const std::string setup = fmt::format(
      "Task `{}` (train lengths {}–{}, evaluated up to {}), d_model {}, {} heads, ffn {}, {} steps of {} with batch "
      "{}, norm eps {:g}. Grid: {} variants × {} learning rates × {} seeds × {} depths × {} warmup settings = {} runs.",
      base.task.name, base.task.min_len, base.task.max_len, base.task.eval_max_len, base.model.d_model,
      base.model.heads, base.model.ffn, base.train.steps, base.optim.name, base.train.batch_size, base.model.norm_eps,
      plan.variants.size(), plan.lrs.size(), plan.seeds.size(), plan.layers.size(), plan.warmups.size(),
      plan.runs.size());
  const std::string ln_fact =
      "LayerNorm computes y = gamma * (x - mean) / sqrt(var + eps) + beta with mean and (biased) variance over "
      "each token's own features, so training and evaluation compute the same function and a sequence's result does "
      "not depend on its batch-mates or their lengths. BatchNorm's statistics are over the batch's tokens per "
      "feature, with running averages at evaluation — the difference shows in the 'valid - train' column.";

  std::string md = "# normlab compare report\n\n" + setup + "\n\n" + ln_fact + "\n\nVariants:\n\n" + variants_md + "\n";
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>normlab compare report</title>\n"
      "<style>body{font-family:sans-serif;max-width:1200px;margin:24px auto;padding:0 16px;color:#222}"
      "h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}"
      "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
      "th{background:#f3f3f3}td:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:8px}"
      "p{line-height:1.4}</style></head><body>\n<h1>normlab compare report</h1>\n";
  html += "<p>" + xml_escape(setup) + "</p>\n<p>" + xml_escape(ln_fact) + "</p>\n<ul>" + variants_html + "</ul>\n";
  for (const Section& sec : sections) {
    md += "## " + sec.title + "\n\n" + sec.text + "\n\n" + sec.table_md + (sec.table_md.empty() ? "" : "\n");
    html += "<h2>" + xml_escape(sec.title) + "</h2>\n<p>" + xml_escape(sec.text) + "</p>\n" + sec.table_html;
    if (!sec.svgs.empty()) {
      html += "<div class=\"charts\">\n";
      for (const std::string& svg : sec.svgs) html += svg;
      html += "</div>\n";
    }
  }
  md += "Charts: report.html. One row per run: runs.csv.\n";
  html += "<p>One row per run: <a href=\"runs.csv\">runs.csv</a>. Tables as Markdown: report.md.</p>\n</body></html>\n";
  io::write_file_atomic((fs::path(out_dir) / "report.md").string(), md);
  io::write_file_atomic((fs::path(out_dir) / "report.html").string(), html);
}

}  // namespace normlab::study
