#pragma once
// Thread control. A parallel kernel splits its work into a fixed number of parts, one per thread
// of the count in effect (num_threads), each part a contiguous block (the split OpenMP's static
// schedule makes) or a range the kernel cuts itself. The parts run on normlab's own pool: the
// calling thread and the pool's workers claim them in order from one counter, and a region ends
// when every part is done, not when every thread has turned up. A part's result does not depend on
// which thread ran it, so the bits depend on the thread count only; and when a worker is not
// running (another process holds its core), the calling thread takes its parts instead of waiting
// for the worker's next time slice (docs/PERFORMANCE.md, "Threads"). A worker descheduled after it
// claimed a part still makes the caller wait; when such waits cost more than the workers save, or
// the workers take part in fewer than 1 region in 3 (not running: another process holds their
// core), the pool runs regions on the calling thread alone for a while (the same parts in the same
// order: the same bits), then tries the workers again.
#include <cstdint>
#include <string>
#include <type_traits>

namespace normlab {
// The thread count of the calling thread: its own setting (set_num_threads) or, if it never set
// one, the process default (OMP_NUM_THREADS, else the number of cores). Per thread, as in OpenMP.
void set_num_threads(int n);  // n >= 1
int num_threads();

// The number of parts a kernel should split its work into: 1 when `wanted` is false or when called
// from inside a part (a nested call runs on the thread that runs the part) or from inside an
// OpenMP region; else num_threads().
int parallel_parts(bool wanted = true);

// Runs task(context, part) once for every part in [0, parts): on the pool when parts > 1 and the
// pool is free, else one after the other on the calling thread. The same results either way. An
// exception from a part is rethrown here once every part has finished.
using PartTask = void (*)(void* context, int64_t part);
void run_parts(int64_t parts, PartTask task, void* context);

// The same with a callable: task(part).
template <class F>
void run_parts(int64_t parts, F&& task) {
  using Task = std::remove_reference_t<F>;
  run_parts(
      parts, [](void* context, int64_t part) { (*static_cast<Task*>(context))(part); },
      const_cast<void*>(static_cast<const void*>(&task)));
}

// Block `part` of the split of [0, n) into `parts` contiguous blocks that OpenMP's schedule(static)
// makes (the first n % parts blocks one longer), so that a per-part partial sum keeps its bits.
struct PartRange {
  int64_t begin, end;
};
inline PartRange static_block(int64_t n, int64_t parts, int64_t part) {
  const int64_t q = n / parts, r = n % parts;
  const int64_t begin = part < r ? part * (q + 1) : part * q + r;
  return {begin, begin + (part < r ? q + 1 : q)};
}

// body(part, begin, end) for each block of the static split of [0, n) into `parts` blocks, on the
// pool; `body(begin, end)` also works where the part does not matter. Empty blocks are skipped.
template <class F>
void for_blocks(int64_t n, int64_t parts, F&& body) {
  if (n <= 0) return;
  run_parts(parts, [&](int64_t part) {
    const PartRange block = static_block(n, parts, part);
    if (block.begin >= block.end) return;
    if constexpr (std::is_invocable_v<F&, int64_t, int64_t, int64_t>) body(part, block.begin, block.end);
    else body(block.begin, block.end);
  });
}

// The same over parallel_parts(wanted) parts: the drop-in for `omp parallel for schedule(static)
// if (wanted)`.
template <class F>
void parallel_for(int64_t n, bool wanted, F&& body) {
  for_blocks(n, parallel_parts(wanted), body);
}

// For tests only: a worker of the pool sleeps this many microseconds after it claims a part and
// before it runs it (0: never), as a worker descheduled by a busy machine would; the caller takes
// the other parts meanwhile. The results must not change.
void set_worker_delay_for_tests(int microseconds);

// For tests only: called by every thread of a region on the pool at two moments of each claim, so
// that a test can hold one thread there and make happen, every time, an interleaving that a busy
// machine makes only by chance (a worker stalled after claiming; a worker descheduled between
// reading a region and claiming its part). `claiming`: the thread has read the region's next part
// and its task and is about to claim it (the compare-exchange); `claimed`: it has claimed the part
// and is about to run it; `waiting` (the caller only, `part` == `parts`): no part is left to claim
// and the caller is about to wait for the workers' last ones. `region` is the region's generation,
// as the thread read it.
enum class PoolMoment { claiming, claimed, waiting };
struct PoolEvent {
  PoolMoment moment;
  bool by_worker;  // false: the thread that called run_parts
  uint32_t region, part, parts;
};
using PoolHook = void (*)(const PoolEvent& event);
void set_pool_hook_for_tests(PoolHook hook);  // nullptr: none

// How many parts of the regions so far the calling thread ran and how many the workers ran; for
// tests (that both took part) and benchmarks (`bench step --json` prints them for its timed steps).
// `alone_regions`: regions the caller ran alone because the pool was resting (their parts are not
// in by_caller); `rests`: how many times the pool started to rest (waiting for descheduled workers
// cost more than they saved, or the workers took part in too few regions).
struct PartCounts {
  int64_t by_caller = 0, by_workers = 0;
  int64_t alone_regions = 0, rests = 0;
};
PartCounts part_counts();

// Whether the pool is resting now (its regions run on the calling thread alone, above). A kernel
// whose bits do not depend on how its work is split (the GEMM; Linear's bias gradient) then takes
// its one-part form, which does less than its parts one after the other (split-K's partials and
// their sum; a pipeline's hand-offs). Advisory: a rest may begin or end right after; the results
// are the same either way.
bool pool_resting();

// For tests only: whether the pool adapts (rests when the workers cost more than they save; on by
// default), so that a test forcing an interleaving with the hooks above sees every region on the
// pool; and the clock the adaptation reads (nanoseconds, any origin; nullptr: steady_clock), so
// that a test can make a wait "long" by advancing it from a hook instead of by sleeping. Either
// call also resets the adaptation (no rest, the credit of a new try).
void set_pool_adapts_for_tests(bool adapts);
using PoolClock = int64_t (*)();
void set_pool_clock_for_tests(PoolClock clock);

// The OpenMP wait setting in the environment (OMP_WAIT_POLICY, GOMP_SPINCOUNT), for benchmarks'
// headers: "GOMP_SPINCOUNT=30000", "OMP_WAIT_POLICY=active", or "libgomp's default spin". normlab
// opens no OpenMP region (the pool above threads the kernels), so it matters only to a caller's own
// regions and to PyTorch's side of bench/, which sets GOMP_SPINCOUNT (bench/torch_malloc.py).
std::string openmp_wait_setting();
}  // namespace normlab
