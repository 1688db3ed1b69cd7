// The run table: its rows as the server draws them (for a reader without scripts), the progress
// line above it, and status.json, what the page's script polls to draw the same table, sort it
// and chart the runs.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "live_parts.hpp"
#include "normlab/study/progress.hpp"
#include "normlab/study/svg.hpp"

namespace normlab::serve::live_parts {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string format_eta(double seconds) {
  const std::string text = study::format_duration(seconds);
  return text == "?" ? "–" : text;
}

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A figure in 4 significant digits (the page draws them; a run's 12 layers x 5 figures x 2 records
// stay a few hundred bytes), null when not finite.
json short_number(double v) { return std::isfinite(v) ? json(std::stod(fmt::format("{:.4g}", v))) : json(nullptr); }

// {"step": N, "attention_max_logit": [...], ..., "log_z_mean": x, "log_z_max_abs": y}, or null.
json diagnostics_json(const LayerDiagnostics& d) {
  if (d.step == 0) return nullptr;
  json out = {{"step", d.step},
              {"log_z_mean", short_number(d.log_z_mean)},
              {"log_z_max_abs", short_number(d.log_z_max_abs)}};
  for (const auto& [name, values] : d.layers) {
    json list = json::array();
    for (double v : values) list.push_back(short_number(v));
    out[name] = std::move(list);
  }
  return out;
}

// Each series' colour: the variant's own, else the palette's in order of first appearance.
json variant_colors(const std::vector<RunStatus>& runs) {
  std::vector<std::string> variants;
  for (const RunStatus& r : runs)
    if (!r.variant.empty() && std::find(variants.begin(), variants.end(), r.variant) == variants.end())
      variants.push_back(r.variant);
  json colors = json::object();
  for (size_t i = 0; i < variants.size(); ++i) {
    const study::Variant* v = study::find_variant(variants[i]);
    colors[variants[i]] = v ? v->color : study::palette(i);
  }
  return colors;
}

// One run's row of status.json; `log` is its compare log's path when it has one.
json row_json(const RunStatus& r, const std::string& log) {
  json extra = json::object();
  for (const auto& [key, value] : r.extra) extra[key] = value;
  return {{"name", r.name},
          {"variant", r.variant},
          {"state", state_name(r.state)},
          {"problem", r.problem},
          {"step", r.step},
          {"steps", r.total_steps},
          {"eta", r.state == RunState::running ? format_eta(r.eta_s) : "–"},
          {"loss", number_or_null(r.last_loss)},
          {"best_accuracy", number_or_null(r.best_accuracy)},
          {"best_loss", number_or_null(r.best_loss)},
          {"lr", number_or_null(r.lr)},
          {"layers", r.layers},
          {"warmup", r.warmup},
          {"seed", r.seed},
          {"extra", extra},
          {"path", r.path},
          {"log", log},
          {"version", r.version},
          {"log_z", short_number(r.last_diagnostics.log_z_max_abs)},
          {"diagnostics",
           {{"first", diagnostics_json(r.first_diagnostics)}, {"last", diagnostics_json(r.last_diagnostics)}}}};
}

}  // namespace

// "6/20 runs done (1 diverged), 2 running, 12 queued, ETA 3m05s": compare's console line, from the
// run table. The ETA is compare's: a finished run's mean wall time x the runs left / runs at once.
std::string progress_line(const std::vector<RunStatus>& runs) {
  size_t done = 0, diverged = 0, running = 0, queued = 0, stopped = 0, with_time = 0;
  double busy = 0;
  for (const RunStatus& r : runs) {
    done += judged(r.state);
    diverged += r.state == RunState::diverged;
    running += r.state == RunState::running;
    queued += r.state == RunState::queued;
    stopped += r.state == RunState::stopped;
    if (judged(r.state) && std::isfinite(r.wall_time_s)) busy += r.wall_time_s, ++with_time;
  }
  const double eta =
      running == 0 ? NAN : study::study_eta_seconds(busy, with_time, with_time + runs.size() - done, running);
  return fmt::format("{}/{} runs done ({} diverged), {} running, {} queued{}, ETA {}", done, runs.size(), diverged,
                     running, queued, stopped ? fmt::format(", {} stopped", stopped) : "",
                     done == runs.size() ? "–" : study::format_duration(eta));
}

// The page's script draws the same rows, and sorts them.
std::string rows_html(const std::vector<RunStatus>& runs) {
  auto number = [](double v) { return std::isfinite(v) ? fmt::format("{:.4g}", v) : "–"; };
  std::string html;
  for (const RunStatus& r : runs) {
    const std::string step = r.total_steps > 0 ? fmt::format("{} / {}", r.step, r.total_steps) : std::to_string(r.step);
    std::string extra;
    for (const auto& [key, value] : r.extra) extra += "<td>" + study::xml_escape(value) + "</td>";
    html += fmt::format(
        "<tr class=\"serve-{0}\" data-state=\"{0}\" data-run=\"{1}\"><td></td><td>{1}</td><td>{2}</td><td>{0}{3}</td>"
        "<td>{4}</td><td>{5}</td><td>{6}</td><td>{7}</td><td>{8}</td><td>{9}</td><td>{10}</td><td>{11}</td><td>{12}</"
        "td>{13}"
        "<td></td></tr>\n",
        state_name(r.state), study::xml_escape(r.name), study::xml_escape(r.variant),
        r.problem.empty() ? "" : " (" + study::xml_escape(r.problem) + ")", step,
        r.state == RunState::running ? format_eta(r.eta_s) : "–", number(r.last_loss), number(r.best_accuracy),
        number(r.best_loss), number(r.lr), r.layers > 0 ? std::to_string(r.layers) : "–",
        r.warmup < 0 ? "–"
        : r.warmup   ? "on"
                     : "off",
        r.seed < 0 ? "–" : std::to_string(r.seed), extra);
  }
  return html;
}

std::string status_json(const std::vector<RunStatus>& runs, const std::string& page_etag, const std::string& dir,
                        bool compare, const std::vector<std::string>& metrics) {
  std::vector<std::string> extra_keys;
  for (const RunStatus& r : runs)
    for (const auto& [key, value] : r.extra)
      if (std::find(extra_keys.begin(), extra_keys.end(), key) == extra_keys.end()) extra_keys.push_back(key);
  json rows = json::array();
  for (const RunStatus& r : runs) {
    const std::string log = compare ? "logs/" + r.name + ".log" : "";
    std::error_code ec;
    rows.push_back(row_json(r, !log.empty() && fs::exists(fs::path(dir) / log, ec) ? log : ""));
  }
  return json{{"page", page_etag},
              {"progress", progress_line(runs)},
              {"colors", variant_colors(runs)},
              {"extra_keys", extra_keys},
              {"metrics", metrics},
              {"runs", rows}}
      .dump();
}

// Every run of a study logs the same metrics: a few runs' first lines tell them. The evaluation's
// come first.
std::vector<std::string> metric_names(const std::vector<std::string>& run_dirs) {
  std::vector<std::string> names;
  size_t looked = 0;
  for (const std::string& d : run_dirs) {
    const RunSeries series = read_series((fs::path(d) / "metrics.jsonl").string(), 2, "", 2000);
    for (const MetricSeries& m : series.metrics)
      if (std::find(names.begin(), names.end(), m.name) == names.end()) names.push_back(m.name);
    if (!series.metrics.empty() && ++looked == 3) break;
  }
  std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n.rfind("valid/", 0) == 0; });
  return names;
}

}  // namespace normlab::serve::live_parts
