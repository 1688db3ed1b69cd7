#pragma once
// Thread control. A parallel kernel splits its work into a fixed number of parts, one per thread
// of the count in effect (num_threads), each part a contiguous block (the split OpenMP's static
// schedule makes) or a range the kernel cuts itself. The parts run on normlab's own pool: the
// calling thread and the pool's workers claim them in order from one counter, and a region ends
// when every part is done, not when every thread has turned up. A part's result does not depend on
// which thread ran it, so the bits depend on the thread count only; and when a worker is not
// running (another process holds its core), the calling thread takes its parts instead of waiting
// for the worker's next time slice (docs/PERFORMANCE.md, "Threads").
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
  run_parts(parts, [](void* context, int64_t part) { (*static_cast<Task*>(context))(part); },
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
    if constexpr (std::is_invocable_v<F&, int64_t, int64_t, int64_t>)
      body(part, block.begin, block.end);
    else
      body(block.begin, block.end);
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
// and is about to run it. `region` is the region's generation, as the thread read it.
enum class PoolMoment { claiming, claimed };
struct PoolEvent {
  PoolMoment moment;
  bool by_worker;  // false: the thread that called run_parts
  uint32_t region, part, parts;
};
using PoolHook = void (*)(const PoolEvent& event);
void set_pool_hook_for_tests(PoolHook hook);  // nullptr: none

// How many parts of the regions so far the calling thread ran and how many the workers ran; for
// tests (that both took part) and benchmarks.
struct PartCounts {
  int64_t by_caller = 0, by_workers = 0;
};
PartCounts part_counts();

// OpenMP's spin. normlab's kernels no longer open OpenMP regions (the pool above does their
// threading; OpenMP is left for `omp simd`, the default thread count and callers' own regions), so
// this setting now reaches only a caller's OpenMP regions; it is kept while the commands still set
// it. How long an OpenMP thread with nothing to do spins before it sleeps. libgomp's default is
// 300,000 spins (several milliseconds); normlab's commands that compute set GOMP_SPINCOUNT to this
// instead, unless the user set GOMP_SPINCOUNT or OMP_WAIT_POLICY. Measured on a shared 2-core VM
// (docs/PERFORMANCE.md, "Threads"): with the default, 5 of 6 processes ran the 2-thread step
// at 16-21 ms instead of 7, stalled for whole 4 ms scheduler ticks; every spin count from 3,000 to
// 200,000 ran all of them at 7. Threads that wait long sleep, and give their core back.
inline constexpr const char* kOpenMPSpinCount = "30000";

// When neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY is set: sets GOMP_SPINCOUNT=kOpenMPSpinCount
// and executes the program again, same process, same arguments (execv of /proc/self/exe).
// libgomp reads its environment once, when it is loaded, before main, so a variable set later has
// no effect; and an executable's .preinit_array, which runs before libgomp's constructor, runs
// before glibc has set up the environment too. Call it first thing in main, before any output or
// file is made. Returns only when nothing was to be done or execv failed (then libgomp's default
// stays). The cost: one more program start, about 12 ms.
void restart_with_openmp_spin(char** argv);

// The setting in effect, for benchmarks' headers: "GOMP_SPINCOUNT=30000, normlab's default",
// "OMP_WAIT_POLICY=active", "libgomp's default spin" (the restart failed).
std::string openmp_wait_setting();
}  // namespace normlab
