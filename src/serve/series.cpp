// A run's metrics.jsonl as downsampled chart series (min/max per bucket), in one streaming pass.
#include "normlab/serve/series.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

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

namespace {

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

int64_t count_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char buffer[1 << 16];
  int64_t lines = 0;
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    lines += std::count(buffer, buffer + in.gcount(), '\n');
    if (!in) break;
  }
  return lines;
}

struct Collector {
  std::map<std::string, size_t> index;
  std::vector<Streamed> series;
  size_t max_buckets = 1000;
  std::string only;
  void add(const std::string& name, double step, double time_s, double value) {
    if (!only.empty() && name != only) return;
    auto [it, added] = index.try_emplace(name, series.size());
    if (added) {
      series.push_back({});
      series.back().out.name = name;
      series.back().max_buckets = max_buckets;
    }
    series[it->second].add(step, time_s, value);
  }
};

void add_step_record(const json& record, double step, double time_s, Collector& c) {
  for (const auto& [key, value] : record.items()) {
    if (key == "step") continue;
    if (value.is_number()) c.add("train/" + key, step, time_s, value.get<double>());
    if (value.is_array())
      for (size_t i = 0; i < value.size(); ++i)
        if (value[i].is_number()) c.add(fmt::format("train/{}[{}]", key, i), step, time_s, value[i].get<double>());
  }
}

void add_eval_record(const json& record, double step, double time_s, Collector& c) {
  for (const char* field : {"loss", "accuracy", "sequence_accuracy"})
    if (record.contains(field) && record[field].is_number())
      c.add(fmt::format("valid/{}", field), step, time_s, record[field].get<double>());
  for (const char* part : {"trained", "unseen"})
    if (record.contains(part) && record[part].is_object())
      for (const char* field : {"loss", "accuracy"})
        if (record[part].contains(field) && record[part][field].is_number())
          c.add(fmt::format("valid/{}/{}", part, field), step, time_s, record[part][field].get<double>());
}

}  // namespace

RunSeries read_series(const std::string& path, size_t max_points, const std::string& only, int64_t max_lines) {
  RunSeries out;
  Collector c;
  c.only = only;
  c.max_buckets = std::max<size_t>(1, max_points / 2);
  // Only complete lines: a torn last line (no newline yet) is read on a later look.
  const int64_t lines = max_lines > 0 ? std::min(max_lines, count_lines(path)) : count_lines(path);
  std::ifstream in(path);
  std::string line;
  double time_s = 0;
  while (out.lines < lines && std::getline(in, line)) {
    ++out.lines;
    const json record = json::parse(line, nullptr, false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number()) continue;
    const double step = record["step"].get<double>();
    if (record.contains("split")) {
      if (record["split"] == "valid") add_eval_record(record, step, time_s, c);
      continue;
    }
    if (record.contains("tokens") && record.contains("tokens_per_s") && record["tokens"].is_number() &&
        record["tokens_per_s"].is_number() && record["tokens_per_s"].get<double>() > 0)
      time_s += record["tokens"].get<double>() / record["tokens_per_s"].get<double>();
    add_step_record(record, step, time_s, c);
  }
  for (Streamed& s : c.series) {
    s.finish();
    out.metrics.push_back(std::move(s.out));
  }
  return out;
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
    out += fmt::format("{}{}:{{\"records\":{},\"step\":{},\"time\":{},\"value\":{}}}", m ? "," : "", json(s.name).dump(),
                       s.records, numbers(s.step), numbers(s.time_s), numbers(s.value));
  }
  return out + "}}";
}

}  // namespace normlab::serve
