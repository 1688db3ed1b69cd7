// A run's row in the live page's table: its state (running, finished, ...), progress, ETA and
// best evaluation, from what the report read of it, from the plan, or, for a run too large for the
// report, from its metrics reader and summary.json.
#include <nlohmann/json.hpp>

#include <cmath>

#include "live_parts.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/serve/live.hpp"

namespace normlab::serve {

namespace fs = std::filesystem;

const char* state_name(RunState state) {
  switch (state) {
    case RunState::queued: return "queued";
    case RunState::running: return "running";
    case RunState::finished: return "finished";
    case RunState::diverged: return "diverged";
    case RunState::stopped: return "stopped";
    case RunState::unreadable: return "unreadable";
    case RunState::error: return "error";
  }
  return "?";
}

namespace live_parts {

namespace {

// What a run's files say, in this order: summary.json's verdict, its trainer's lock, whether it
// has logged anything.
RunState state_from(bool diverged, bool finished, bool running, bool started) {
  return diverged   ? RunState::diverged
         : finished ? RunState::finished
         : running  ? RunState::running
         : started  ? RunState::stopped
                    : RunState::queued;
}

// A diagnostics record as the page's per-layer chart reads it.
LayerDiagnostics layer_diagnostics(const study::Diagnostics& d) {
  LayerDiagnostics out;
  out.step = d.step;
  for (const auto& [name, values] :
       {std::pair{"attention_max_logit", &d.attention_max_logit},
        std::pair{"attention_entropy_mean", &d.attention_entropy_mean},
        std::pair{"attention_entropy_min", &d.attention_entropy_min}, std::pair{"update_ratio", &d.update_ratio},
        std::pair{"layer_grad_norms", &d.layer_grad_norms}})
    if (!values->empty()) out.layers[name] = *values;
  out.log_z_mean = d.log_z_mean;
  out.log_z_max_abs = d.log_z_max_abs;
  return out;
}

// A run's state from its summary.json alone (finished, diverged, wall time), for a run the report
// leaves out; a summary too large to be one is ignored.
void read_summary_state(const fs::path& run_dir, RunStatus& st, bool& finished, bool& diverged) {
  const std::string path = (run_dir / "summary.json").string();
  if (file_size(path) == 0 || file_size(path) > (1u << 20)) return;
  nlohmann::json summary;
  try {  // a FIFO or device under the name is refused, never waited on (io/atomic_file.hpp)
    summary = nlohmann::json::parse(*io::open_regular_stream(path, "cannot read"), nullptr, false);
  } catch (const InputError&) {
    return;
  }
  if (!summary.is_object()) return;
  finished = true;
  if (summary.contains("diverged") && summary["diverged"] == true) diverged = true;
  if (summary.contains("wall_time_s") && summary["wall_time_s"].is_number())
    st.wall_time_s = summary["wall_time_s"].get<double>();
}

}  // namespace

RunStatus status_of(const study::RunResult& r, bool running) {
  RunStatus st;
  if (!r.diagnostics.empty()) {
    st.first_diagnostics = layer_diagnostics(r.diagnostics.front());
    st.last_diagnostics = layer_diagnostics(r.diagnostics.back());
  }
  st.name = r.spec.name;
  st.step = r.steps.empty() ? 0 : int64_t(r.steps.back());
  if (r.diverged && r.diverged_at > st.step) st.step = r.diverged_at;
  st.total_steps = r.planned_steps;
  for (size_t i = r.loss.size(); i-- > 0;)
    if (std::isfinite(r.loss[i])) {
      st.last_loss = r.loss[i];
      break;
    }
  st.state = state_from(r.diverged, r.finished, running, st.step > 0 || r.evals.size() > 0);
  return st;
}

RunStatus status_of(const MetricsReader::Summary& summary, const fs::path& run_dir, bool running) {
  RunStatus st;
  bool finished = false, diverged = summary.diverged;
  read_summary_state(run_dir, st, finished, diverged);
  st.step = summary.last_step;
  st.last_loss = summary.last_loss;
  st.best_accuracy = summary.best_accuracy;
  st.best_loss = summary.best_loss;
  st.first_diagnostics = summary.first_diagnostics;
  st.last_diagnostics = summary.last_diagnostics;
  st.state = state_from(diverged, finished, running, st.step > 0 || summary.eval_records > 0);
  return st;
}

void fill_from_spec(RunStatus& st, const study::RunSpec& spec) {
  st.variant = spec.variant;
  st.lr = spec.lr();
  st.layers = spec.layers();
  st.seed = int64_t(spec.seed());
  st.warmup = spec.warmup() ? 1 : 0;
  st.extra = spec.extra;
}

// ... and from the results: the best held-out evaluation on trained lengths, the wall time.
void fill_from_result(RunStatus& st, const study::RunResult& r) {
  fill_from_spec(st, r.spec);
  st.wall_time_s = r.wall_time_s;
  for (const study::EvalPoint& e : r.evals) {
    if (std::isfinite(e.trained.accuracy) && !(e.trained.accuracy <= st.best_accuracy))
      st.best_accuracy = e.trained.accuracy;
    if (std::isfinite(e.trained.loss) && !(e.trained.loss >= st.best_loss)) st.best_loss = e.trained.loss;
  }
}

RunStatus queued_run(const std::string& name, const study::RunSpec* spec) {
  RunStatus st;
  st.name = name;
  if (spec == nullptr) return st;
  fill_from_spec(st, *spec);
  st.total_steps = spec->config.train.steps;
  return st;
}

// Seconds left at the rate seen since this server first saw the run (or, on the first look, since
// its config.json was written); NaN when there is no rate yet.
double eta_of(const RunStatus& st, const fs::path& run_dir, FirstSeen& first_seen) {
  if (st.state != RunState::running || st.total_steps <= st.step || st.step <= 0) return NAN;
  const double now = mtime_s(run_dir / "metrics.jsonl");
  auto [it, added] = first_seen.try_emplace(run_dir.string(), st.step, now);
  double rate = NAN;
  if (!added && st.step > it->second.first && now > it->second.second)
    rate = double(st.step - it->second.first) / (now - it->second.second);
  else if (const double started = mtime_s(run_dir / "config.json"); now > started)
    rate = double(st.step) / (now - started);
  return rate > 0 ? double(st.total_steps - st.step) / rate : NAN;
}

// Running runs first, then stopped, diverged, the unreadable, queued, finished (by name within).
int state_order(RunState s) {
  switch (s) {
    case RunState::running: return 0;
    case RunState::stopped: return 1;
    case RunState::diverged: return 2;
    case RunState::error: return 3;
    case RunState::unreadable: return 4;
    case RunState::queued: return 5;
    case RunState::finished: return 6;
  }
  return 7;
}

bool judged(RunState state) { return state == RunState::finished || state == RunState::diverged; }

}  // namespace live_parts
}  // namespace normlab::serve
