// What runs left in their directories, read strictly (results.hpp).
#include "normlab/study/results.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "common.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/stats.hpp"
#include "normlab/study/class_metrics.hpp"
#include "normlab/study/outcome.hpp"

namespace normlab::study {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Field readers: a present field of the wrong type is an InputError "<file>: line N: <field>: ...".
struct FieldReader {
  std::string where;  // "DIR/metrics.jsonl: line 12"

  [[noreturn]] void wrong(const std::string& field, const char* expected, const json& got) const {
    throw InputError(fmt::format("{}: {}: must be {}, got {}", where, field, expected, got.dump().substr(0, 60)));
  }
  // A number, or null / missing (NaN).
  double number(const json& obj, const std::string& field) const {
    if (!obj.contains(field) || obj.at(field).is_null()) return NAN;
    if (!obj.at(field).is_number()) wrong(field, "a number or null", obj.at(field));
    return obj.at(field).get<double>();
  }
  int64_t integer(const json& obj, const std::string& field, int64_t fallback) const {
    if (!obj.contains(field) || obj.at(field).is_null()) return fallback;
    if (!obj.at(field).is_number_integer()) wrong(field, "an integer", obj.at(field));
    return obj.at(field).get<int64_t>();
  }
  bool boolean(const json& obj, const std::string& field) const {
    if (!obj.contains(field)) return false;
    if (!obj.at(field).is_boolean()) wrong(field, "true or false", obj.at(field));
    return obj.at(field).get<bool>();
  }
  std::vector<double> numbers(const json& obj, const std::string& field) const {
    std::vector<double> out;
    if (!obj.contains(field) || obj.at(field).is_null()) return out;
    if (!obj.at(field).is_array()) wrong(field, "a list of numbers", obj.at(field));
    for (const json& v : obj.at(field)) {
      if (!v.is_number() && !v.is_null()) wrong(field, "a list of numbers", obj.at(field));
      out.push_back(v.is_number() ? v.get<double>() : NAN);
    }
    return out;
  }
};

}  // namespace

namespace {

// A length group's metrics from a record's "trained"/"unseen" object.
HeldOut held_out_from(const json& obj, const FieldReader& f) {
  HeldOut h;
  if (obj.is_null()) return h;
  if (!obj.is_object()) f.wrong("trained/unseen", "an object or null", obj);
  h.loss = f.number(obj, "loss");
  h.accuracy = f.number(obj, "accuracy");
  h.targets = f.integer(obj, "targets", 0);
  h.macro_f1 = f.number(obj, "macro_f1");
  if (h.targets == 0) h.loss = h.accuracy = h.macro_f1 = NAN;
  return h;
}

// Target-weighted metrics over the buckets for which `keep` holds.
template <class Keep>
HeldOut held_out_from(const std::vector<BucketResult>& buckets, Keep keep) {
  HeldOut h;
  double loss = 0, correct = 0;
  for (const BucketResult& b : buckets) {
    if (!keep(b) || b.targets == 0 || !std::isfinite(b.loss) || !std::isfinite(b.accuracy)) continue;
    loss += b.loss * double(b.targets);
    correct += b.accuracy * double(b.targets);
    h.targets += b.targets;
  }
  if (h.targets > 0) h.loss = loss / double(h.targets), h.accuracy = correct / double(h.targets);
  return h;
}

}  // namespace

HeldOut held_out_of(const std::vector<BucketResult>& buckets, bool unseen) {
  return held_out_from(buckets, [unseen](const BucketResult& b) { return b.beyond_train == unseen; });
}

HeldOut held_out_of(const std::vector<BucketResult>& buckets, bool unseen, int64_t shortest, int64_t longest) {
  return held_out_from(buckets, [&](const BucketResult& b) {
    const bool inside = b.min_len >= shortest && b.max_len <= longest;
    const bool outside = b.max_len < shortest || b.min_len > longest;
    return unseen ? outside : inside;
  });
}

namespace {

// An evaluation record ("split": "valid"): the last evaluation's buckets and one more EvalPoint.
void read_eval_record(const json& rec, const FieldReader& f, RunResult& r) {
  r.final_valid_loss = f.number(rec, "loss");
  r.final_valid_accuracy = f.number(rec, "accuracy");
  r.buckets.clear();
  if (rec.contains("buckets")) {
    if (!rec.at("buckets").is_array()) f.wrong("buckets", "a list of bucket objects", rec.at("buckets"));
    for (const json& b : rec.at("buckets")) {
      if (!b.is_object()) f.wrong("buckets", "a list of bucket objects", b);
      const FieldReader fb{f.where + ": buckets"};
      BucketResult br;
      br.min_len = fb.integer(b, "min_len", 0);
      br.max_len = fb.integer(b, "max_len", 0);
      br.beyond_train = fb.boolean(b, "beyond_train");
      br.loss = fb.number(b, "loss");
      br.accuracy = fb.number(b, "accuracy");
      br.count = fb.integer(b, "count", 0);
      br.targets = fb.integer(b, "targets", br.count);
      r.buckets.push_back(br);
    }
  }
  EvalPoint point;
  point.step = f.integer(rec, "step", r.steps.empty() ? 0 : int64_t(r.steps.back()));
  point.trained = rec.contains("trained")
                      ? held_out_from(rec.at("trained"), f)
                      : held_out_from(r.buckets, [](const BucketResult& b) { return !b.beyond_train; });
  point.unseen = rec.contains("unseen")
                     ? held_out_from(rec.at("unseen"), f)
                     : held_out_from(r.buckets, [](const BucketResult& b) { return b.beyond_train; });
  point.all = {r.final_valid_loss, r.final_valid_accuracy, f.integer(rec, "targets", 0)};
  if (rec.contains("trained") && rec.at("trained").is_object()) {
    point.top_prediction_share = f.number(rec.at("trained"), "top_prediction_share");
    point.trained_confusion = train::confusion_from_json(rec.at("trained"), f.where + ": trained");
  }
  if (rec.contains("labels") && rec.at("labels").is_array())
    for (const json& name : rec.at("labels")) point.labels.push_back(name.is_string() ? name.get<std::string>() : "");
  if (r.buckets.empty() && !rec.contains("trained")) point.trained = point.all;  // no buckets: all lengths trained
  if (r.single_length && r.longest_trained > 0 && !r.buckets.empty()) {
    // The trainer's groups count every length up to max_len as trained; only max_len was.
    point.trained = held_out_of(r.buckets, false, r.shortest_trained, r.longest_trained);
    point.unseen = held_out_of(r.buckets, true, r.shortest_trained, r.longest_trained);
  }
  r.evals.push_back(point);
  if (const double u = f.number(rec, "uniform_loss"); std::isfinite(u)) r.baseline.uniform_loss = u;
  if (const double u = f.number(rec, "uniform_accuracy"); std::isfinite(u)) r.baseline.uniform_accuracy = u;
  if (rec.contains("trained") && rec.at("trained").is_object())
    if (const double m = f.number(rec.at("trained"), "majority_accuracy"); std::isfinite(m))
      r.baseline.majority_accuracy = m;
}

// A step record: the curves, and the first and last diagnostics.
void read_step_record(const json& rec, const FieldReader& f, RunResult& r, bool& have_init_diag) {
  const int64_t step = f.integer(rec, "step", 0);
  if (f.boolean(rec, "diverged")) {
    r.diverged = true;
    r.diverged_at = step;
    return;
  }
  r.steps.push_back(double(step));
  r.loss.push_back(f.number(rec, "loss"));
  r.grad_norm.push_back(f.number(rec, "grad_norm"));
  r.accuracy.push_back(f.number(rec, "accuracy"));
  if (const int64_t sequences = f.integer(rec, "sequences", 0); sequences > 0) r.batch_sequences.push_back(sequences);
  if (const int64_t shortest = f.integer(rec, "shortest", 0); shortest > 0)
    r.shortest_trained = r.shortest_trained == 0 ? shortest : std::min(r.shortest_trained, shortest);
  r.longest_trained = std::max(r.longest_trained, f.integer(rec, "longest", 0));
  if (rec.contains("residual_rms")) {
    std::vector<double> rms = f.numbers(rec, "residual_rms"), grads = f.numbers(rec, "layer_grad_norms");
    if (!have_init_diag) {
      r.init_residual_rms = rms;
      r.init_layer_grad_norms = grads;
      have_init_diag = true;
    }
    r.diagnostics.push_back({step, rms, grads, f.numbers(rec, "attention_max_logit"),
                             f.numbers(rec, "attention_entropy_mean"), f.numbers(rec, "attention_entropy_min"),
                             f.numbers(rec, "update_ratio"), f.number(rec, "log_z_mean"),
                             f.number(rec, "log_z_max_abs")});
    r.end_residual_rms = std::move(rms);
    r.end_layer_grad_norms = std::move(grads);
  }
}

// A run file for reading, or nullptr when it does not exist yet (a run that has not written it). A
// file that exists but cannot be read, or is not a regular file (a FIFO would block the reader,
// /dev/zero never end), is an InputError naming it (io::open_regular_file).
std::unique_ptr<std::istream> open_run_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return nullptr;
  return io::open_regular_stream(path, "cannot read");
}

void read_metrics(const std::string& metrics_path, RunResult& r) {
  const std::unique_ptr<std::istream> file = open_run_file(metrics_path);
  if (!file) return;
  std::istream& metrics = *file;
  errno = 0;
  std::string line;
  bool have_init_diag = false;
  int64_t line_number = 0;
  while (std::getline(metrics, line)) {
    ++line_number;
    if (io::json_nesting_depth(line) > io::kMaxJsonDepth)
      throw InputError(fmt::format("{}: line {}: nested too deeply to be a metrics record", metrics_path, line_number));
    const json rec = json::parse(line, nullptr, false);
    // Only a torn last line is skipped: the start of a record without its newline (a trainer
    // writes each line with one write(2)). Anything else that is not JSON is a damaged file.
    if (rec.is_discarded() && metrics.eof() && !line.empty() && line[0] == '{' && line.find('\0') == std::string::npos)
      continue;
    if (rec.is_discarded())
      throw InputError(
          fmt::format("{}: line {}: not a JSON record (only a torn last line is skipped)", metrics_path, line_number));
    const FieldReader f{fmt::format("{}: line {}", metrics_path, line_number)};
    if (!rec.is_object()) f.wrong("record", "a JSON object", rec);
    if (rec.contains("split")) {
      if (!rec.at("split").is_string()) f.wrong("split", "a string", rec.at("split"));
      if (rec.at("split").get<std::string>() == "valid") read_eval_record(rec, f, r);
      continue;
    }
    if (rec.contains("step")) read_step_record(rec, f, r, have_init_diag);
  }
  if (metrics.bad()) throw InputError(fmt::format("{}: cannot read: {}", metrics_path, std::strerror(errno)));
}

void read_summary(const std::string& summary_path, RunResult& r) {
  const std::unique_ptr<std::istream> summary_file = open_run_file(summary_path);
  if (!summary_file || !*summary_file) return;
  const json summary = json::parse(*summary_file, nullptr, false);
  if (!summary.is_object()) return;  // a summary being written; the run is not finished
  const FieldReader f{summary_path};
  r.finished = true;
  if (f.boolean(summary, "diverged")) r.diverged = true;
  r.diverged_at = f.integer(summary, "diverged_at_step", r.diverged_at);
  r.wall_time_s = f.number(summary, "wall_time_s");
  r.threads = f.integer(summary, "threads", 0);
}

}  // namespace

namespace {

// A file's identity and version as stat sees it (absent: all zero).
struct FileStamp {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = -1;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, st.st_size, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
          int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

// A finished run's records, read once per process: a compare with a learning-rate search reads
// every finished run again at each round's plan and for the report (about 25 MB of JSON per read
// of the demo's 240 runs). An entry is used only while both files have the identity, size and
// times they had when it was read, and only files last changed more than a second before that
// read are kept (file times advance in steps of a few milliseconds).
struct ReadCache {
  struct Entry {
    FileStamp metrics, summary;
    double uniform_loss = 0;
    int64_t planned_steps = 0;
    bool single_length = false;
    RunResult result;
  };
  std::mutex mutex;
  std::map<std::string, Entry> entries;  // by run directory
};

ReadCache& read_cache() {
  static ReadCache cache;
  return cache;
}

bool settled(const FileStamp& file, int64_t now_ns) {
  return file.size >= 0 && std::max(file.mtime_ns, file.ctime_ns) < now_ns - 1000000000;
}

int64_t wall_now_ns() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

RunResult read_run(const RunSpec& spec, const std::string& run_dir) {
  RunResult r;
  r.spec = spec;
  if (r.spec.dir.empty()) r.spec.dir = run_dir;
  r.baseline.uniform_loss = chance_loss(spec.config);
  r.planned_steps = spec.config.train.steps;
  if (std::isfinite(r.baseline.uniform_loss)) r.baseline.uniform_accuracy = std::exp(-r.baseline.uniform_loss);
  r.single_length = spec.config.task.length_regime == data::LengthRegime::single;
  const fs::path dir(run_dir);
  const std::string metrics_path = (dir / "metrics.jsonl").string(), summary_path = (dir / "summary.json").string();
  const int64_t now_ns = wall_now_ns();
  const FileStamp metrics = stamp(metrics_path), summary = stamp(summary_path);
  ReadCache& cache = read_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    const auto it = cache.entries.find(run_dir);
    if (it != cache.entries.end() && it->second.metrics == metrics && it->second.summary == summary &&
        (it->second.uniform_loss == r.baseline.uniform_loss ||
         (std::isnan(it->second.uniform_loss) && std::isnan(r.baseline.uniform_loss))) &&
        it->second.planned_steps == r.planned_steps && it->second.single_length == r.single_length) {
      RunResult hit = it->second.result;
      hit.spec = r.spec;
      return hit;
    }
  }
  read_metrics(metrics_path, r);
  read_summary(summary_path, r);
  if (!r.loss.empty()) {
    const size_t tail = std::max<size_t>(1, r.loss.size() / 10);
    double sum = 0;
    for (size_t i = r.loss.size() - tail; i < r.loss.size(); ++i) sum += r.loss[i];
    r.final_train_loss = sum / double(tail);
  }
  if (r.diverged) r.final_train_loss = NAN;
  // Kept only when neither file changed while it was read.
  if (r.finished && settled(metrics, now_ns) && settled(summary, now_ns) && stamp(metrics_path) == metrics &&
      stamp(summary_path) == summary) {
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.entries.insert_or_assign(
        run_dir, ReadCache::Entry{metrics, summary, r.baseline.uniform_loss, r.planned_steps, r.single_length, r});
  }
  return r;
}

int64_t RunResult::typical_batch_sequences() const {
  if (batch_sequences.empty()) return 0;
  std::vector<int64_t> sorted = batch_sequences;
  std::nth_element(sorted.begin(), sorted.begin() + ptrdiff_t(sorted.size() / 2), sorted.end());
  return sorted[sorted.size() / 2];
}

double Baseline::chance_accuracy() const {
  double c = 0;
  if (std::isfinite(uniform_accuracy)) c = std::max(c, uniform_accuracy);
  if (std::isfinite(majority_accuracy)) c = std::max(c, majority_accuracy);
  return c;
}

double RunResult::judged_accuracy() const {
  if (diverged) return std::isfinite(baseline.uniform_accuracy) ? baseline.uniform_accuracy : 0.0;
  return final_trained().accuracy;
}

double RunResult::judged_unseen_accuracy() const {
  return diverged ? baseline.uniform_accuracy : final_unseen().accuracy;
}

double RunResult::peak_grad_norm() const {
  double peak = NAN;
  for (double g : grad_norm)
    if (std::isfinite(g) && !(g <= peak)) peak = g;
  return peak;
}

int64_t RunResult::loss_spikes() const {
  int64_t spikes = 0;
  bool in_spike = false;
  // Near a zero loss, relative noise is large: a spike must also rise by a share of the first loss.
  const double min_rise = std::isfinite(first_train_loss()) ? kSpikeMinRise * first_train_loss() : 0.0;
  for (size_t t = kSpikeWindow; t < loss.size(); ++t) {
    const double before =
        median(std::vector<double>(loss.begin() + std::ptrdiff_t(t - kSpikeWindow), loss.begin() + std::ptrdiff_t(t)));
    const bool spike = std::isfinite(loss[t]) && std::isfinite(before) && loss[t] > kSpikeFactor * before &&
                       loss[t] - before > min_rise;
    if (spike && !in_spike) ++spikes;
    in_spike = spike;
  }
  return spikes;
}

int64_t RunResult::steps_to_solve() const {
  for (const EvalPoint& e : evals)
    if (e.trained.accuracy >= kSolvedAccuracy) return e.step;
  return -1;
}

double RunResult::accuracy_auc() const {
  std::vector<std::pair<double, double>> curve;  // (step, trained accuracy)
  for (const EvalPoint& e : evals)
    if (std::isfinite(e.trained.accuracy)) curve.emplace_back(double(e.step), e.trained.accuracy);
  if (curve.empty()) return NAN;
  if (diverged) {  // no usable model from the divergence on: the uniform guess
    const double guess = std::isfinite(baseline.uniform_accuracy) ? baseline.uniform_accuracy : 0.0;
    curve.emplace_back(std::max(curve.back().first, double(diverged_at)), guess);
  }
  const double end = std::max(double(planned_steps), curve.back().first);
  if (end > curve.back().first) curve.emplace_back(end, curve.back().second);  // held to the budget's end
  const double span = end - curve.front().first;
  if (!(span > 0)) return curve.front().second;
  double area = 0;
  for (size_t i = 1; i < curve.size(); ++i)
    area += 0.5 * (curve[i].second + curve[i - 1].second) * (curve[i].first - curve[i - 1].first);
  return area / span;
}

double chance_loss(const train::RunConfig& config) {
  // mlm_text's and your own data's classes come from the files, not the config.
  const data::TaskKind kind = config.task.name;
  if (kind == data::TaskKind::mlm_text || data::is_data_task(kind)) return NAN;
  return std::log(double(data::make_task(kind).num_classes()));
}

}  // namespace normlab::study
