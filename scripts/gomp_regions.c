// Per-region timing of OpenMP (libgomp) programs, as an LD_PRELOAD shim: every GOMP_parallel
// region's wall time, each of the first two threads' busy time inside it, the second thread's start
// lag, and the serial gap since the previous region ended. One line per region, written at exit to
// $SHIM_OUT (processes that ran no region write nothing). Summarize with scripts/gomp_regions.py.
//   gcc -O2 -shared -fPIC -fopenmp -o /tmp/gomp_regions.so scripts/gomp_regions.c -ldl
//   SHIM_OUT=/tmp/regions.txt LD_PRELOAD=/tmp/gomp_regions.so build/normlab bench step ...
//   python3 scripts/gomp_regions.py /tmp/regions.txt build/normlab STEPS   (STEPS = repeats + 3 warmup)
// Not part of the build: a measuring tool. The kernels now thread on normlab's own pool
// (include/normlab/parallel.hpp), not OpenMP, so it sees only a caller's own OpenMP regions.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <omp.h>

static inline double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3; }
typedef struct { void *fn; float wall, busy0, busy1, lag1, gap; } Rec;
#define NREC (1 << 20)
static Rec *recs; static long nrec; static double last_end;
typedef struct { void (*fn)(void *); void *data; double t0; double begin[8], end[8]; int n; } Tramp;
static void tramp(void *p) {
  Tramp *t = p; int id = omp_get_thread_num();
  if (id < 8) t->begin[id] = now();
  t->fn(t->data);
  if (id < 8) t->end[id] = now();
  if (id == 0) t->n = omp_get_num_threads();
}
static void account(Tramp *t, double t1, void *fn) {
  if (!recs) recs = malloc(sizeof(Rec) * NREC);
  if (nrec >= NREC) return;
  Rec *r = &recs[nrec++];
  r->fn = fn; r->wall = t1 - t->t0; r->busy0 = t->end[0] - t->begin[0];
  r->busy1 = t->n > 1 ? t->end[1] - t->begin[1] : 0; r->lag1 = t->n > 1 ? t->begin[1] - t->t0 : 0;
  r->gap = last_end ? t->t0 - last_end : 0; last_end = t1;
}
static __thread int depth;
#define BODY(call) Tramp t = {fn, data, now(), {0}, {0}, 1}; depth++; call; depth--; account(&t, now(), (void *)fn);
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
  static void (*real)(void (*)(void *), void *, unsigned, unsigned);
  if (!real) real = dlsym(RTLD_NEXT, "GOMP_parallel");
  if (depth) { real(fn, data, num_threads, flags); return; }
  BODY(real(tramp, &t, num_threads, flags))
}
void GOMP_parallel_loop_dynamic(void (*fn)(void *), void *data, unsigned num_threads, long start, long end, long incr, long chunk, unsigned flags) {
  static void (*real)(void (*)(void *), void *, unsigned, long, long, long, long, unsigned);
  if (!real) real = dlsym(RTLD_NEXT, "GOMP_parallel_loop_dynamic");
  BODY(real(tramp, &t, num_threads, start, end, incr, chunk, flags))
}
void GOMP_parallel_loop_nonmonotonic_dynamic(void (*fn)(void *), void *data, unsigned num_threads, long start, long end, long incr, long chunk, unsigned flags) {
  static void (*real)(void (*)(void *), void *, unsigned, long, long, long, long, unsigned);
  if (!real) real = dlsym(RTLD_NEXT, "GOMP_parallel_loop_nonmonotonic_dynamic");
  BODY(real(tramp, &t, num_threads, start, end, incr, chunk, flags))
}
__attribute__((destructor)) static void dump(void) {
  if (!nrec) return;
  const char *out = getenv("SHIM_OUT"); FILE *f = out ? fopen(out, "w") : stderr;
  for (long i = 0; i < nrec; i++) {
    Rec *r = &recs[i]; Dl_info info; uintptr_t off = 0; const char *fname = "?";
    if (dladdr(r->fn, &info)) { off = (uintptr_t)r->fn - (uintptr_t)info.dli_fbase; fname = info.dli_fname; }
    fprintf(f, "%s 0x%lx %.2f %.2f %.2f %.2f %.2f\n", fname, (unsigned long)off, r->wall, r->busy0, r->busy1, r->lag1, r->gap);
  }
  if (out) fclose(f);
}
