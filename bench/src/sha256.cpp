#include "normlab/bench/sha256.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "normlab/io/sha256.hpp"

namespace normlab::bench {

Sha256BenchResult bench_sha256(const std::string& path, int repeats) {
  Sha256BenchResult result;
  result.file = path;
  result.repeats = repeats;
  const io::FileDigest warm = io::sha256_file(path);  // page cache, and the digest to report
  result.bytes = warm.bytes;
  result.sha256 = warm.sha256;
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    const io::FileDigest digest = io::sha256_file(path);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    (void)digest;
  }
  std::sort(seconds.begin(), seconds.end());
  result.median_s = seconds[seconds.size() / 2];
  result.min_s = seconds.front();
  result.megabytes_per_s = result.median_s > 0 ? double(result.bytes) / result.median_s / 1e6 : 0.0;
  return result;
}

}  // namespace normlab::bench
