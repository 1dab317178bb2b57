// A parallel region that would run on one thread runs inline, without a libgomp team.
//
// Why: libgomp keeps the team of a parallel region for the next one, except a team of one
// thread, which it allocates and frees every time (team.c: gomp_team_end frees a team whose
// nthreads is 1). With OMP_NUM_THREADS=1 -- the usual layout of one MPI rank per core -- every
// parallel region of the kernels made a malloc / free pair: 70 heap calls per step of bench S,
// where a steady step must make none.
//
// How: GCC compiles `#pragma omp parallel` (and `parallel for` with a static schedule) into a
// call to GOMP_parallel(fn, data, num_threads, flags), num_threads being the clause's value, 1
// when an if() clause is false, or 0 for "the default". ctitan defines that symbol, so the
// program's calls come here. When the region would get one thread and is not nested in any
// other region (omp_get_level() == 0), fn(data) runs on the calling thread: what libgomp would
// run, minus the team. Inside, omp_get_thread_num() is 0, omp_get_num_threads() 1 and
// omp_in_parallel() false -- as in libgomp's own team of one, which does not count as active --
// and a `#pragma omp for` with a static schedule covers the whole loop. Every other call goes
// on to libgomp's GOMP_parallel, found with dlsym(RTLD_NEXT).
//
// What this does not cover: loops with schedule(dynamic / guided) call libgomp's work-share
// functions, which allocate when there is no team; the kernels hand out dynamic work with an
// atomic counter instead (attention_forward.c, attention_backward.c, fused.c).
#include <dlfcn.h>
#include <omp.h>

#include "core/error.h"
#include "kernels/cpu/omp_inline.h"

typedef void (*gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);

static long inline_regions;  // regions run inline so far (tests read it)

long ct_omp_inline_regions(void) { return __atomic_load_n(&inline_regions, __ATOMIC_RELAXED); }

void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
    if (omp_get_level() == 0 && (num_threads == 1 || (num_threads == 0 && omp_get_max_threads() == 1))) {
        __atomic_fetch_add(&inline_regions, 1, __ATOMIC_RELAXED);
        fn(data);
        return;
    }
    static gomp_parallel_fn real;
    gomp_parallel_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (gomp_parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
        if (!f) ct_fatal("GOMP_parallel", "libgomp's GOMP_parallel not found (%s)", dlerror());
        __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    }
    f(fn, data, num_threads, flags);
}
