#pragma once
// One run's logged metrics as the live page's chart series, downsampled on the server so that a
// page stays small however long the run: at most `max_points` points per series, kept by min/max
// per bucket (every bucket keeps its lowest and its highest point, in step order), so a spike or
// a divergence survives however long the run (LTTB keeps the shape's area and may drop a
// one-point spike). Reads metrics.jsonl incrementally: only the bytes appended since the last look
// are parsed; memory is O(metrics x max_points) (buckets merge in pairs as the run grows) and never
// the records, whatever the file holds.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace normlab::serve {

inline constexpr size_t kMaxPointsPerSeries = 2000;  // what a chart draws in well under a second

// One diagnostics step record's per-layer figures (train/records.hpp), what the live page's "per
// layer" chart draws: the step-1 record (the forward and backward at the initial weights) and the last.
inline constexpr const char* kLayerDiagnostics[] = {"attention_max_logit", "attention_entropy_mean",
                                                    "attention_entropy_min", "update_ratio", "layer_grad_norms"};
struct LayerDiagnostics {
  int64_t step = 0;
  std::map<std::string, std::vector<double>> layers;  // a kLayerDiagnostics name -> (layers); NaN: null
  double log_z_mean = NAN, log_z_max_abs = NAN;       // the output's, over the batch's real tokens
};

struct MetricSeries {
  std::string name;            // "train/loss", "train/residual_rms[2]", "valid/trained/accuracy"
  std::vector<double> step;    // (points)
  std::vector<double> time_s;  // training time at that step: the sum of tokens / tokens_per_s so far
  std::vector<double> value;   // (points)
  int64_t records = 0;         // points logged before downsampling
};

struct RunSeries {
  std::vector<MetricSeries> metrics;  // in first-seen order
  int64_t lines = 0;                  // complete lines read
};

// Indices of the points min/max-per-bucket keeps of `values` (ascending), at most max_points
// (>= 2): buckets of ceil(n / (max_points / 2)) points, each keeping its minimum and maximum.
// Non-finite values are never kept (a chart cannot place them); all are kept when n <= max_points.
std::vector<size_t> min_max_downsample(const std::vector<double>& values, size_t max_points);

inline constexpr size_t kMaxLineBytes = 1 << 20;  // a longer line is not a metrics record
inline constexpr size_t kMaxSeriesPerRun = 256;   // metrics past these in one run are not charted

struct Streamed;  // one series being downsampled (series.cpp)

// One run's metrics.jsonl, read a piece at a time. update() parses only what was appended since
// the last look (a torn last line is kept, at most kMaxLineBytes, and completed by a later look);
// the file replaced or shortened is read again from its start. A line longer than kMaxLineBytes
// stops the reading for good (30 valid lines followed by 1 GB of NUL bytes cost 1 MiB once), and
// `problem` says where, as `normlab report` would refuse it. Not thread-safe: one owner at a time.
class MetricsReader {
 public:
  explicit MetricsReader(std::string path, size_t max_points = kMaxPointsPerSeries, std::string only = "");
  ~MetricsReader();
  MetricsReader(const MetricsReader&) = delete;
  MetricsReader& operator=(const MetricsReader&) = delete;

  // Parses at most `max_bytes` more of the file (0: up to its end) and at most `max_lines` more
  // lines (0: no limit). True while bytes are left to read (the file grew past what was parsed).
  bool update(size_t max_bytes = 0, int64_t max_lines = 0);
  // The series so far (a copy, downsampled): `only` that metric's ("" every one).
  RunSeries series(const std::string& only = "") const;

  // What the run table needs, kept as the records go by.
  struct Summary {
    int64_t last_step = 0;                        // the last step record's step (or the step it diverged at)
    double last_loss = NAN;                       // the last finite training loss
    double best_accuracy = NAN, best_loss = NAN;  // best evaluation on trained lengths (all lengths if not split)
    bool diverged = false;
    int64_t step_records = 0, eval_records = 0;
    // The first and the last diagnostics record (a step record with per-layer figures); step 0: none yet.
    LayerDiagnostics first_diagnostics, last_diagnostics;
  };
  const Summary& summary() const { return summary_; }
  const std::string& problem() const { return problem_; }  // the first line the report would refuse
  uint64_t offset() const { return offset_; }              // bytes parsed (the torn last line's included)
  uint64_t file_size() const { return size_; }             // at the last update
  int64_t lines() const { return lines_; }
  size_t memory_bytes() const;  // the buckets and the torn line kept (an estimate)

 private:
  void reset();
  void take_line(const std::string& line);
  std::string path_, only_;
  size_t max_points_;
  uint64_t device_ = 0, inode_ = 0, offset_ = 0, size_ = 0;
  bool stuck_ = false;  // an over-long line: nothing further is read
  std::string partial_;
  int64_t lines_ = 0;
  double time_s_ = 0;
  Summary summary_;
  std::string problem_;
  std::map<std::string, size_t> index_;
  std::vector<std::unique_ptr<Streamed>> series_;
};

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
