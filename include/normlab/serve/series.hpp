#pragma once
// One run's logged metrics as the live page's chart series, downsampled on the server so that a
// page stays small however long the run: at most `max_points` points per series, kept by min/max
// per bucket (every bucket keeps its lowest and its highest point, in step order), so a spike or
// a divergence survives however long the run (LTTB keeps the shape's area and may drop a
// one-point spike). Reads metrics.jsonl once, in one pass; memory is O(metrics x max_points) (buckets merge in pairs as the run grows).
#include <cstdint>
#include <string>
#include <vector>

namespace normlab::serve {

inline constexpr size_t kMaxPointsPerSeries = 2000;  // what a chart draws in well under a second

struct MetricSeries {
  std::string name;              // "train/loss", "train/residual_rms[2]", "valid/trained/accuracy"
  std::vector<double> step;      // (points)
  std::vector<double> time_s;    // training time at that step: the sum of tokens / tokens_per_s so far
  std::vector<double> value;     // (points)
  int64_t records = 0;           // points logged before downsampling
};

struct RunSeries {
  std::vector<MetricSeries> metrics;  // in first-seen order
  int64_t lines = 0;                  // complete lines read
};

// Indices of the points min/max-per-bucket keeps of `values` (ascending), at most max_points
// (>= 2): buckets of ceil(n / (max_points / 2)) points, each keeping its minimum and maximum.
// Non-finite values are never kept (a chart cannot place them); all are kept when n <= max_points.
std::vector<size_t> min_max_downsample(const std::vector<double>& values, size_t max_points);

// The series of metrics.jsonl at `path`: every number and every array of numbers of its step
// records ("train/..."), and its evaluations' loss and accuracy on all, trained and unseen
// lengths ("valid/..."). Lines that are not JSON objects (a torn last line) are skipped: the
// report's reading of the same file says what is wrong with them. A missing file has no series.
// `only`: that metric's series alone ("" every one). `max_lines` > 0: read no further (a look at
// which metrics a run logs).
RunSeries read_series(const std::string& path, size_t max_points = 2000, const std::string& only = "",
                      int64_t max_lines = 0);

// {"lines":N,"metrics":{"train/loss":{"records":R,"step":[...],"time":[...],"value":[...]},...}}
std::string series_json(const RunSeries& series);

}  // namespace normlab::serve
