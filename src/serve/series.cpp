// A run's metrics.jsonl as downsampled chart series (min/max per bucket), in one streaming pass.
#include "normlab/serve/series.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "normlab/io/json_depth.hpp"

namespace normlab::serve {

using nlohmann::json;

std::vector<size_t> min_max_downsample(const std::vector<double>& values, size_t max_points) {
  std::vector<size_t> kept;
  const size_t n = values.size(), buckets = std::max<size_t>(1, max_points / 2);
  const size_t width = n <= max_points ? 1 : (n + buckets - 1) / buckets;
  for (size_t start = 0; start < n; start += width) {
    size_t lo = n, hi = n;
    for (size_t i = start; i < std::min(n, start + width); ++i) {
      if (!std::isfinite(values[i])) continue;
      if (lo == n || values[i] < values[lo]) lo = i;
      if (hi == n || values[i] > values[hi]) hi = i;
    }
    if (lo == n) continue;
    kept.push_back(std::min(lo, hi));
    if (hi != lo) kept.push_back(std::max(lo, hi));
  }
  return kept;
}

// One series being downsampled as its points stream in, in O(max_points) memory whatever the run's
// length: buckets of `width` points, each its lowest and highest point; when the buckets reach
// max_points / 2, neighbours merge in pairs and the width doubles. At the end every bucket covers
// the same number of points (the last one fewer) and keeps its minimum and maximum: min/max per
// bucket, with between a quarter and a half of max_points buckets (every point while there are
// at most max_points).
struct Streamed {
  struct Bucket {
    bool has = false;
    double lo[3], hi[3];  // step, time, value
    void add(const double* p) {
      if (!has || p[2] < lo[2]) std::copy(p, p + 3, lo);
      if (!has || p[2] > hi[2]) std::copy(p, p + 3, hi);
      has = true;
    }
    void merge(const Bucket& other) {
      if (other.has) add(other.lo), add(other.hi);
    }
  };
  MetricSeries out;
  std::vector<Bucket> full;
  Bucket current;
  int64_t width = 1, in_current = 0;
  size_t max_buckets = 1000;

  void add(double step, double time_s, double value) {
    ++out.records;
    const double point[3] = {step, time_s, value};
    if (std::isfinite(value)) current.add(point);
    if (++in_current < width) return;
    full.push_back(current);
    current = Bucket{};
    in_current = 0;
    // One point per bucket while the width is 1: up to max_points of them, every point kept.
    if (full.size() < (width == 1 ? 2 * max_buckets : max_buckets)) return;
    for (size_t i = 0; i < full.size() / 2; ++i) {
      full[i] = full[2 * i];
      full[i].merge(full[2 * i + 1]);
    }
    full.resize(full.size() / 2);
    width *= 2;
  }
  void finish() {
    if (in_current > 0) full.push_back(current);
    for (const Bucket& b : full) {
      if (!b.has) continue;
      const bool lo_first = b.lo[0] <= b.hi[0];
      const double* first = lo_first ? b.lo : b.hi;
      const double* second = lo_first ? b.hi : b.lo;
      for (const double* p : {first, second}) {
        if (p == second && b.lo[0] == b.hi[0]) break;  // one point, kept once
        out.step.push_back(p[0]);
        out.time_s.push_back(p[1]);
        out.value.push_back(p[2]);
      }
    }
  }
};

namespace {

// Each number and each array of numbers of a step record ("train/..."), each evaluation's loss
// and accuracy on all, trained and unseen lengths ("valid/...").
template <class Add>
void add_step_record(const json& record, double step, double time_s, Add&& add) {
  for (const auto& [key, value] : record.items()) {
    if (key == "step") continue;
    if (value.is_number()) add("train/" + key, step, time_s, value.template get<double>());
    if (value.is_array())
      for (size_t i = 0; i < value.size(); ++i)
        if (value[i].is_number())
          add(fmt::format("train/{}[{}]", key, i), step, time_s, value[i].template get<double>());
  }
}

template <class Add>
void add_eval_record(const json& record, double step, double time_s, Add&& add) {
  for (const char* field : {"loss", "accuracy", "sequence_accuracy"})
    if (record.contains(field) && record[field].is_number())
      add(fmt::format("valid/{}", field), step, time_s, record[field].get<double>());
  for (const char* part : {"trained", "unseen"})
    if (record.contains(part) && record[part].is_object())
      for (const char* field : {"loss", "accuracy"})
        if (record[part].contains(field) && record[part][field].is_number())
          add(fmt::format("valid/{}/{}", part, field), step, time_s, record[part][field].get<double>());
}

double number_at(const json& record, const char* key) {
  return record.contains(key) && record[key].is_number() ? record[key].get<double>() : NAN;
}

// The per-layer diagnostics of a step record; step 0 when it has none.
LayerDiagnostics layer_diagnostics(const json& record, int64_t step) {
  LayerDiagnostics d;
  for (const char* name : kLayerDiagnostics) {
    if (!record.contains(name) || !record[name].is_array()) continue;
    std::vector<double>& values = d.layers[name];
    for (const json& v : record[name]) values.push_back(v.is_number() ? v.get<double>() : NAN);
  }
  if (d.layers.empty()) return d;
  d.step = step;
  d.log_z_mean = number_at(record, "log_z_mean");
  d.log_z_max_abs = number_at(record, "log_z_max_abs");
  return d;
}

}  // namespace

MetricsReader::MetricsReader(std::string path, size_t max_points, std::string only)
    : path_(std::move(path)), only_(std::move(only)), max_points_(std::max<size_t>(2, max_points)) {}

MetricsReader::~MetricsReader() = default;

void MetricsReader::reset() {
  offset_ = 0;
  stuck_ = false;
  partial_.clear();
  lines_ = 0;
  time_s_ = 0;
  summary_ = {};
  problem_.clear();
  index_.clear();
  series_.clear();
}

size_t MetricsReader::memory_bytes() const {
  size_t bytes = partial_.capacity() + sizeof *this;
  for (const auto& s : series_)
    bytes += sizeof(Streamed) + s->full.capacity() * sizeof(Streamed::Bucket) + 2 * s->out.name.size() + 64;
  return bytes;
}

void MetricsReader::take_line(const std::string& line) {
  ++lines_;
  auto refuse = [&](const char* why) {
    if (problem_.empty()) problem_ = fmt::format("{}: line {}: {}", path_, lines_, why);
  };
  if (io::json_nesting_depth(line) > io::kMaxJsonDepth) return refuse("nested too deeply to be a metrics record");
  const json record = json::parse(line, nullptr, false);
  if (record.is_discarded()) return refuse("not a JSON record (only a torn last line is skipped)");
  if (!record.is_object()) return refuse("not a JSON object");
  if (!record.contains("step") || !record["step"].is_number()) return;
  const double step = record["step"].get<double>();
  auto add = [&](const std::string& name, double at, double time_s, double value) {
    if (!only_.empty() && name != only_) return;
    auto it = index_.find(name);
    if (it == index_.end()) {
      if (series_.size() >= kMaxSeriesPerRun) return;
      it = index_.emplace(name, series_.size()).first;
      series_.push_back(std::make_unique<Streamed>());
      series_.back()->out.name = name;
      series_.back()->max_buckets = std::max<size_t>(1, max_points_ / 2);
    }
    series_[it->second]->add(at, time_s, value);
  };
  if (record.contains("split")) {
    if (record["split"] != "valid") return;
    ++summary_.eval_records;
    add_eval_record(record, step, time_s_, add);
    const bool split = record.contains("trained") && record["trained"].is_object();
    const double accuracy = split ? number_at(record["trained"], "accuracy") : number_at(record, "accuracy");
    const double loss = split ? number_at(record["trained"], "loss") : number_at(record, "loss");
    if (std::isfinite(accuracy) && !(accuracy <= summary_.best_accuracy)) summary_.best_accuracy = accuracy;
    if (std::isfinite(loss) && !(loss >= summary_.best_loss)) summary_.best_loss = loss;
    return;
  }
  if (record.contains("diverged") && record["diverged"] == true) {
    summary_.diverged = true;
    summary_.last_step = std::max(summary_.last_step, int64_t(step));
    return;
  }
  ++summary_.step_records;
  summary_.last_step = int64_t(step);
  if (const double loss = number_at(record, "loss"); std::isfinite(loss)) summary_.last_loss = loss;
  const double tokens = number_at(record, "tokens"), rate = number_at(record, "tokens_per_s");
  if (std::isfinite(tokens) && rate > 0) time_s_ += tokens / rate;
  add_step_record(record, step, time_s_, add);
  if (LayerDiagnostics d = layer_diagnostics(record, int64_t(step)); d.step > 0) {
    if (summary_.first_diagnostics.step == 0) summary_.first_diagnostics = d;
    summary_.last_diagnostics = std::move(d);
  }
}

bool MetricsReader::update(size_t max_bytes, int64_t max_lines) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT && offset_ > 0) reset();  // removed: a new run may write it again
    size_ = 0;
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return false;
  }
  // Another file under the name, or the same one shortened: what was read no longer holds.
  if (uint64_t(st.st_dev) != device_ || uint64_t(st.st_ino) != inode_ || uint64_t(st.st_size) < offset_) reset();
  device_ = st.st_dev, inode_ = st.st_ino, size_ = uint64_t(st.st_size);
  std::vector<char> buffer(std::min<uint64_t>(1 << 20, std::max<uint64_t>(1, size_ - std::min(size_, offset_))));
  uint64_t read_now = 0;
  int64_t lines_now = 0;
  while (!stuck_ && offset_ < size_ && (max_bytes == 0 || read_now < max_bytes) &&
         (max_lines == 0 || lines_now < max_lines)) {
    const ssize_t n = ::pread(fd, buffer.data(), std::min<uint64_t>(buffer.size(), size_ - offset_), off_t(offset_));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const char* at = buffer.data();
    const char* end = at + n;
    while (at < end) {
      const char* newline = static_cast<const char*>(std::memchr(at, '\n', size_t(end - at)));
      const char* stop = newline ? newline : end;
      if (partial_.size() + size_t(stop - at) > kMaxLineBytes) {
        // Not a record however it ends: stop here for good, holding nothing of it.
        problem_ = fmt::format("{}: line {}: longer than {} MiB: not a metrics record", path_, lines_ + 1,
                               kMaxLineBytes >> 20);
        stuck_ = true;
        partial_.clear();
        partial_.shrink_to_fit();
        offset_ += uint64_t(stop - at);
        break;
      }
      partial_.append(at, stop);
      offset_ += uint64_t(stop - at) + (newline ? 1 : 0);
      at = newline ? newline + 1 : end;
      if (!newline) break;
      take_line(partial_);
      partial_.clear();
      if (max_lines > 0 && ++lines_now >= max_lines) break;
    }
    read_now += uint64_t(n);
  }
  ::close(fd);
  if (partial_.capacity() > 4 * partial_.size() + 4096) partial_.shrink_to_fit();
  return !stuck_ && offset_ < size_;
}

RunSeries MetricsReader::series(const std::string& only) const {
  RunSeries out;
  out.lines = lines_;
  for (const auto& s : series_) {
    if (!only.empty() && s->out.name != only) continue;
    Streamed copy = *s;
    copy.finish();
    out.metrics.push_back(std::move(copy.out));
  }
  return out;
}

RunSeries read_series(const std::string& path, size_t max_points, const std::string& only, int64_t max_lines) {
  MetricsReader reader(path, max_points, only);
  reader.update(0, max_lines);
  return reader.series(only);
}

std::string series_json(const RunSeries& series) {
  auto numbers = [](const std::vector<double>& values) {
    std::string text = "[";
    for (size_t i = 0; i < values.size(); ++i) text += fmt::format("{}{:.6g}", i ? "," : "", values[i]);
    return text + "]";
  };
  std::string out = fmt::format("{{\"lines\":{},\"metrics\":{{", series.lines);
  for (size_t m = 0; m < series.metrics.size(); ++m) {
    const MetricSeries& s = series.metrics[m];
    out += fmt::format("{}{}:{{\"records\":{},\"step\":{},\"time\":{},\"value\":{}}}", m ? "," : "",
                       json(s.name).dump(), s.records, numbers(s.step), numbers(s.time_s), numbers(s.value));
  }
  return out + "}}";
}

}  // namespace normlab::serve
