#pragma once
// `normlab bench sha256`: how long a data fingerprint costs (io::sha256_file on one file, as a run
// hashes its data files when it starts). Timing: std::chrono::steady_clock around each whole-file
// hash, median over `repeats` after one untimed read that brings the file into the page cache.
#include <cstdint>
#include <string>

namespace normlab::bench {

struct Sha256BenchResult {
  std::string file;
  uint64_t bytes = 0;
  std::string sha256;
  int repeats = 0;
  double median_s = 0, min_s = 0;
  double megabytes_per_s = 0;  // bytes / median / 1e6
};

Sha256BenchResult bench_sha256(const std::string& path, int repeats);

}  // namespace normlab::bench
