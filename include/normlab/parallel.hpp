#pragma once
// Thread control. All parallel loops use OpenMP with a static schedule, so the split of work over
// threads (and therefore every floating-point reduction order) depends only on the thread count.
#include <string>

namespace normlab {
void set_num_threads(int n);  // n >= 1
int num_threads();

// How long an OpenMP thread with nothing to do spins before it sleeps. libgomp's default is
// 300,000 spins (several milliseconds); normlab's commands that compute set GOMP_SPINCOUNT to this
// instead, unless the user set GOMP_SPINCOUNT or OMP_WAIT_POLICY. Measured on a shared 2-core VM
// (docs/PERFORMANCE.md, "OpenMP's spin"): with the default, 5 of 6 processes ran the 2-thread step
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
