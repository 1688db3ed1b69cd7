// The pool of parallel.hpp under ThreadSanitizer, without the rest of the library (libgomp's own
// regions are not instrumented, so a whole-suite TSan build reports races inside libgomp):
//   g++ -std=c++20 -O1 -g -fsanitize=thread -fopenmp -Iinclude tests/tsan/pool_tsan.cpp src/parallel.cpp -o
//   /tmp/pool_tsan /tmp/pool_tsan            (prints "pool_tsan: ok"; TSan reports a race as a warning and exit 66)
// Regions at 2 and 3 threads with and without a stalled worker, nested regions, exceptions, a
// thread-count change before every region, and two outside threads sharing the pool (the one that
// finds it busy runs its parts itself).
#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

#include "normlab/parallel.hpp"

using namespace normlab;

namespace {
int64_t region_sum(int64_t parts, int64_t n) {
  std::vector<int64_t> partial(size_t(parts), 0);
  for_blocks(n, parts, [&](int64_t part, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) partial[size_t(part)] += i;
    run_parts(3, [&](int64_t) {});  // nested: serial
  });
  int64_t sum = 0;
  for (int64_t v : partial) sum += v;
  return sum;
}

bool check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "pool_tsan: FAILED: %s\n", what);
  return ok;
}
}  // namespace

int main() {
  bool ok = true;
  for (int threads : {2, 3, 2}) {
    set_num_threads(threads);
    for (int delay : {0, 100}) {
      set_pool_adapts_for_tests(delay == 0);  // a delayed worker would make the pool rest
      set_worker_delay_for_tests(delay);
      for (int region = 0; region < 200; region++) ok &= check(region_sum(threads, 10007) == 10007 * 10006 / 2, "sum");
    }
    set_worker_delay_for_tests(0);
    set_pool_adapts_for_tests(true);
    try {
      run_parts(8, [](int64_t part) {
        if (part == 3) throw std::runtime_error("x");
      });
      ok &= check(false, "no exception");
    } catch (const std::runtime_error&) {
    }
  }
  // A resize before every region: a worker that starts after the stop request must still stop.
  for (int region = 0; region < 300; region++) {
    set_num_threads(2 + region % 2);
    ok &= check(region_sum(2 + region % 2, 1001) == 1001 * 1000 / 2, "resize");
  }
  std::atomic<int> bad{0};
  auto caller = [&] {
    set_num_threads(2);
    for (int region = 0; region < 300; region++)
      if (region_sum(2, 5003) != 5003 * 5002 / 2) bad++;
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  ok &= check(bad == 0, "outside threads");
  const PartCounts counts = part_counts();
  ok &= check(counts.by_workers > 0 && counts.by_caller > 0, "both ran parts");
  if (ok)
    std::printf("pool_tsan: ok (%lld parts by callers, %lld by workers)\n", (long long)counts.by_caller,
                (long long)counts.by_workers);
  return ok ? 0 : 1;
}
