#include "normlab/parallel.hpp"

#include <linux/futex.h>
#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace normlab {

namespace {

// How many times a thread with nothing to do checks for work (a pause between checks, ~19 ns on
// the EPYC of docs/PERFORMANCE.md) before it sleeps on a futex: about 40 us, longer than the serial
// gaps between the kernels of a step, far shorter than a scheduler tick. A thread that spins long
// keeps a core busy that another thread (or process) could use.
constexpr int kSpinChecks = 2000;

// The pool's adaptation (docs/PERFORMANCE.md, "Threads"). Per region the caller times its own parts
// and its wait for the workers' last ones; with the parts of equal cost, running them all alone would
// have taken (its parts' time) * parts / (its parts), and the region's saving is that minus the
// region's time: negative when a worker claimed a part and was then descheduled by another process
// on its core (the caller waits up to a scheduler slice, milliseconds). The savings add up into a
// credit, capped at kMaxCreditNs; when the credit goes below zero the caller runs every region alone
// (same parts, same bits) for a rest, then tries the workers again with kProbeCreditNs of credit.
constexpr int64_t kMaxCreditNs = 4'000'000;
constexpr int64_t kProbeCreditNs = 500'000;
// Workers that claim no part of a region were not running (another process holds their core: idle, a
// worker claims a part a fraction of a microsecond after a region opens). Such a region ran its parts
// one after the other on the caller, which costs more than the one-part form that a resting pool
// lets the GEMMs use (pool_resting), and the credit does not see it (the caller never waited). So
// the caller counts them: +1 for a region without the workers, -kPresentWeight (down to 0) for one
// they took part in, and rests when the count reaches kMaxAbsentRegions: 64 regions in a row, or
// more spread out. A worker on a core that another process keeps busy runs now and then, for a few
// regions of a step; counting regions in a row only, those few reset the count and the caller ran
// its split forms, and waited for the parts such a worker claimed and was descheduled on, for steps
// on end. With the weight, workers that take part in fewer than 1 region in kPresentWeight + 1 make
// the pool rest; idle, they take part in nearly all.
constexpr int kMaxAbsentRegions = 64;
constexpr int kPresentWeight = 2;
// How long a rest lasts. The first after a good stretch is short: on an otherwise idle machine the
// usual cause is another process's burst of a few milliseconds on the worker's core, and a long rest
// would then run tens of regions alone for nothing (50 ms is ~10 steps of bench-step.json at one
// thread's speed). So kMinRestNs after absent workers (that failure cost little), and
// kRestPerWait times the wait that failed after a wait, at most kMaxFirstWaitRestNs. A rest that
// ends in another failure is kRestGrowth times longer, up to kMaxRestNs, so a core kept busy fails a
// few short tries (each costs the caller up to 64 regions in their split form, and the worker's
// wake-ups) and then rests long: as many tries in a 300 ms run as 50 ms rests doubling made; a
// credit back at its cap resets the length.
constexpr int64_t kMinRestNs = 4'000'000;
constexpr int64_t kRestPerWait = 4;
constexpr int64_t kRestGrowth = 4;
constexpr int64_t kMaxFirstWaitRestNs = 50'000'000;
constexpr int64_t kMaxRestNs = 1'600'000'000;

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// One check's pause in a spin; every kYieldEvery checks a sched_yield instead, so that a thread
// spinning on a core it shares (with the caller, a worker or another process) gives the core to the
// thread that has work: on an idle core the yield returns at once.
constexpr int kYieldEvery = 64;
inline void spin_pause(int check) {
  if (check % kYieldEvery == kYieldEvery - 1) sched_yield();
  else cpu_pause();
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word, int count) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

// The process default thread count, read once (OMP_NUM_THREADS as OpenMP reads it, else the
// number of cores); a thread's own setting overrides it.
int default_threads() {
  static const int threads = omp_get_max_threads();
  return threads;
}
thread_local int t_threads = 0;       // 0: the default
thread_local bool t_in_part = false;  // running a part: a nested region runs serially
thread_local bool t_is_worker = false;

// One region at a time runs on the pool. `state` holds the region's generation (high 32 bits) and
// the next part to claim (low 32 bits): a thread claims a part with one compare-exchange, which
// fails if the region it read the task of has ended meanwhile, so a worker that wakes late can
// never run a part of an old region. The task fields are atomics written only between regions.
class Pool {
 public:
  // Runs the region on the pool if it is free and sized for `threads`; false when the caller must
  // run the parts itself (the pool is busy with another caller's region).
  bool run(int64_t parts, int threads, PartTask task, void* context);
  void set_worker_delay(int microseconds) { worker_delay_us_.store(microseconds, std::memory_order_relaxed); }
  void set_hook(PoolHook hook) { hook_.store(hook, std::memory_order_release); }
  void set_adapts(bool adapts) {
    std::lock_guard lock(owner_);
    adapts_.store(adapts, std::memory_order_relaxed);
    reset_adaptation();
  }
  void set_clock(PoolClock clock) {
    std::lock_guard lock(owner_);
    clock_.store(clock, std::memory_order_relaxed);
    reset_adaptation();
  }
  PartCounts counts() const {
    return {by_caller_.load(std::memory_order_relaxed), by_workers_.load(std::memory_order_relaxed),
            alone_regions_.load(std::memory_order_relaxed), rests_.load(std::memory_order_relaxed)};
  }

 private:
  void resize(int workers);
  void worker_loop();
  // Claims and runs parts of the current region until none is left; returns how many it ran.
  int64_t take_parts();
  void wait_for_region(uint32_t& seen);
  void wait_until_finished(uint32_t parts);
  int64_t now_ns() const;
  void reset_adaptation() {
    credit_ns_ = kProbeCreditNs;
    rest_ns_ = kMinRestNs;
    alone_until_ns_.store(INT64_MIN, std::memory_order_relaxed);
    absent_regions_ = 0;
  }
  // Starts a rest at `now` of at least `min_ns` (a failure: the next one rests kRestGrowth times longer).
  void start_rest(int64_t now, int64_t min_ns);

 public:
  bool resting() const {
    return adapts_.load(std::memory_order_relaxed) && now_ns() < alone_until_ns_.load(std::memory_order_relaxed);
  }

 private:
  // Adds a region's saving to the credit: `mine` of its `parts` ran on the caller from t0 to t1,
  // the last one finished at t2.
  void account(int64_t parts, int64_t mine, int64_t t0, int64_t t1, int64_t t2);

  std::mutex owner_;  // held by the caller for the whole region
  std::vector<std::thread> workers_;
  alignas(64) std::atomic<uint64_t> state_{0};
  std::atomic<PartTask> task_{nullptr};
  std::atomic<void*> context_{nullptr};
  std::atomic<uint32_t> parts_{0};
  alignas(64) std::atomic<uint32_t> finished_{0};  // parts done in this region; futex word
  std::atomic<uint32_t> caller_sleeping_{0};
  alignas(64) std::atomic<uint32_t> region_{0};  // bumped for every region; futex word
  std::atomic<int> workers_sleeping_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> worker_delay_us_{0};
  std::atomic<PoolHook> hook_{nullptr};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  alignas(64) std::atomic<int64_t> by_caller_{0};
  std::atomic<int64_t> by_workers_{0};
  std::atomic<int64_t> alone_regions_{0};
  std::atomic<int64_t> rests_{0};
  // The adaptation's state, read and written by the caller that holds owner_.
  std::atomic<bool> adapts_{true};
  std::atomic<PoolClock> clock_{nullptr};
  int64_t credit_ns_ = kProbeCreditNs;
  int64_t rest_ns_ = kMinRestNs;  // the next rest's length, at least
  std::atomic<int64_t> alone_until_ns_{INT64_MIN};  // written by the caller only; read by pool_resting
  int absent_regions_ = 0;  // regions the workers took no part of, less kPresentWeight per one they did
};

Pool& pool() {
  // Never destroyed: workers asleep at exit cost nothing, and a kernel called from a static
  // destructor still finds a pool.
  static Pool* const instance = new Pool;
  return *instance;
}

int64_t Pool::take_parts() {
  int64_t ran = 0;
  uint64_t state = state_.load(std::memory_order_acquire);
  for (;;) {
    const auto next = static_cast<uint32_t>(state);
    const uint32_t parts = parts_.load(std::memory_order_relaxed);
    const PartTask task = task_.load(std::memory_order_relaxed);
    void* const context = context_.load(std::memory_order_relaxed);
    if (next >= parts) return ran;
    const PoolHook hook = hook_.load(std::memory_order_acquire);
    const auto region = static_cast<uint32_t>(state >> 32);
    if (hook) hook({PoolMoment::claiming, t_is_worker, region, next, parts});
    // Succeeds only while the region read above is still open, so parts, task and context are its.
    if (!state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    if (hook) hook({PoolMoment::claimed, t_is_worker, region, next, parts});
    if (t_is_worker) {
      // The test hook: a worker that stops between claiming a part and running it.
      if (const int delay = worker_delay_us_.load(std::memory_order_relaxed); delay > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(delay));
    }
    t_in_part = true;
    try {
      task(context, int64_t(next));
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_part = false;
    ran++;
    if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == parts &&
        caller_sleeping_.load(std::memory_order_seq_cst) != 0)
      futex_wake(finished_, 1);
    state = state_.load(std::memory_order_acquire);
  }
}

void Pool::wait_for_region(uint32_t& seen) {
  for (int i = 0; i < kSpinChecks; i++) {
    if (region_.load(std::memory_order_acquire) != seen) break;
    spin_pause(i);
  }
  while (region_.load(std::memory_order_acquire) == seen) {
    workers_sleeping_.fetch_add(1, std::memory_order_seq_cst);
    if (region_.load(std::memory_order_seq_cst) == seen) futex_wait(region_, seen);
    workers_sleeping_.fetch_sub(1, std::memory_order_seq_cst);
  }
  seen = region_.load(std::memory_order_acquire);
}

void Pool::worker_loop() {
  t_is_worker = true;
  // stop_ is checked after `seen` is read: resize() sets stop_ before it bumps region_, so a thread
  // that starts late, after the bump, still sees the stop (else it would sleep on the new value).
  uint32_t seen = region_.load(std::memory_order_acquire);
  while (!stop_.load(std::memory_order_acquire)) {
    by_workers_.fetch_add(take_parts(), std::memory_order_relaxed);
    wait_for_region(seen);
  }
}

void Pool::wait_until_finished(uint32_t parts) {
  for (int i = 0; i < kSpinChecks; i++) {
    if (finished_.load(std::memory_order_acquire) == parts) return;
    spin_pause(i);
  }
  // A worker holds a part and is not running: sleep, so that its core (or ours) is free for it.
  caller_sleeping_.store(1, std::memory_order_seq_cst);
  for (uint32_t done; (done = finished_.load(std::memory_order_seq_cst)) != parts;) futex_wait(finished_, done);
  caller_sleeping_.store(0, std::memory_order_relaxed);
}

void Pool::resize(int workers) {
  if (!workers_.empty()) {
    stop_.store(true, std::memory_order_release);
    region_.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(region_, INT_MAX);
    for (std::thread& w : workers_) w.join();
    workers_.clear();
    stop_.store(false, std::memory_order_release);
  }
  for (int i = 0; i < workers; i++) workers_.emplace_back([this] { worker_loop(); });
}

int64_t Pool::now_ns() const {
  if (const PoolClock clock = clock_.load(std::memory_order_relaxed)) return clock();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Pool::start_rest(int64_t now, int64_t min_ns) {
  const int64_t rest = std::max(rest_ns_, min_ns);
  alone_until_ns_.store(now + rest, std::memory_order_relaxed);
  rest_ns_ = std::min(kMaxRestNs, kRestGrowth * rest);
  credit_ns_ = kProbeCreditNs;
  absent_regions_ = 0;
  rests_.fetch_add(1, std::memory_order_relaxed);
}

void Pool::account(int64_t parts, int64_t mine, int64_t t0, int64_t t1, int64_t t2) {
  absent_regions_ = mine < parts ? std::max(0, absent_regions_ - kPresentWeight) : absent_regions_ + 1;
  if (absent_regions_ >= kMaxAbsentRegions) {
    start_rest(t2, kMinRestNs);
    return;
  }
  // No part on the caller (the workers took them all): nothing to estimate the parts' cost from.
  if (mine <= 0) return;
  const double alone = double(t1 - t0) * double(parts) / double(mine);
  const double saved = std::clamp(alone - double(t2 - t0), -1e15, 1e15);
  credit_ns_ = std::min(kMaxCreditNs, credit_ns_ + int64_t(saved));
  if (credit_ns_ >= kMaxCreditNs) {
    rest_ns_ = kMinRestNs;
  } else if (credit_ns_ < 0) {
    start_rest(t2, std::min(kMaxFirstWaitRestNs, kRestPerWait * int64_t(-saved)));
  }
}

bool Pool::run(int64_t parts, int threads, PartTask task, void* context) {
  std::unique_lock lock(owner_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  if (int(workers_.size()) != threads - 1) resize(threads - 1);
  const bool adapts = adapts_.load(std::memory_order_relaxed);
  const int64_t t0 = adapts ? now_ns() : 0;
  if (adapts && t0 < alone_until_ns_.load(std::memory_order_relaxed)) {
    // Resting: the caller runs the parts (run_parts, as for a busy pool); the workers sleep.
    alone_regions_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  task_.store(task, std::memory_order_relaxed);
  context_.store(context, std::memory_order_relaxed);
  parts_.store(uint32_t(parts), std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  // Opens the region: a new generation, part 0 next (release: the task fields above go with it).
  const uint64_t generation = (state_.load(std::memory_order_relaxed) >> 32) + 1;
  state_.store(generation << 32, std::memory_order_release);
  region_.fetch_add(1, std::memory_order_seq_cst);
  if (workers_sleeping_.load(std::memory_order_seq_cst) > 0) futex_wake(region_, INT_MAX);
  const int64_t mine = take_parts();
  by_caller_.fetch_add(mine, std::memory_order_relaxed);
  const int64_t t1 = adapts ? now_ns() : 0;
  if (const PoolHook hook = hook_.load(std::memory_order_acquire))
    hook({PoolMoment::waiting, false, uint32_t(generation), uint32_t(parts), uint32_t(parts)});
  wait_until_finished(uint32_t(parts));
  if (adapts) account(parts, mine, t0, t1, now_ns());
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
  return true;
}

}  // namespace

void set_num_threads(int n) {
  t_threads = n < 1 ? 1 : n;
  omp_set_num_threads(t_threads);
}
int num_threads() { return t_threads > 0 ? t_threads : default_threads(); }

int parallel_parts(bool wanted) {
  if (!wanted || t_in_part || omp_in_parallel()) return 1;
  return num_threads();
}

void run_parts(int64_t parts, PartTask task, void* context) {
  if (parts <= 0) return;
  if (parts == 1 || t_in_part || num_threads() == 1) {
    for (int64_t part = 0; part < parts; part++) task(context, part);
    return;
  }
  if (parts < INT32_MAX && pool().run(parts, num_threads(), task, context)) return;
  // The pool is busy with another thread's region: the parts here, as nested ones (same bits).
  t_in_part = true;
  try {
    for (int64_t part = 0; part < parts; part++) task(context, part);
  } catch (...) {
    t_in_part = false;
    throw;
  }
  t_in_part = false;
}

void set_worker_delay_for_tests(int microseconds) { pool().set_worker_delay(microseconds); }
void set_pool_hook_for_tests(PoolHook hook) { pool().set_hook(hook); }
PartCounts part_counts() { return pool().counts(); }
bool pool_resting() { return num_threads() > 1 && pool().resting(); }
void set_pool_adapts_for_tests(bool adapts) { pool().set_adapts(adapts); }
void set_pool_clock_for_tests(PoolClock clock) { pool().set_clock(clock); }

std::string openmp_wait_setting() {
  std::string setting;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    if (const char* value = std::getenv(name))
      setting += (setting.empty() ? "" : ", ") + std::string(name) + "=" + value;
  }
  return setting.empty() ? "libgomp's default spin" : setting;
}
}  // namespace normlab
