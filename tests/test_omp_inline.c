// Parallel regions that would get one thread run inline, without a libgomp team (kernels/cpu/
// omp_inline.c), and behave as a team of one: thread 0 of 1, not "in parallel", a static `omp
// for` covering the whole loop, reductions complete; and they make no heap call, where libgomp
// allocates and frees a team of one per region. Regions with more threads, and regions nested in
// another, still go to libgomp.
#include <omp.h>
#include <stdio.h>

#include "heap_count.h"
#include "kernels/cpu/omp_inline.h"
#include "test.h"

static long heap_calls;
static void heap_call_counted(void) { __atomic_fetch_add(&heap_calls, 1, __ATOMIC_RELAXED); }
static long calls_now(void) { return __atomic_load_n(&heap_calls, __ATOMIC_RELAXED); }

#define N 1000

// One region of each kind the kernels use; returns through the pointers what they saw.
static void regions(int *nthreads, int *tid, int *in_par, double *sum, int *covered) {
    static int hit[N];
#pragma omp parallel
    {
#pragma omp single
        *nthreads = omp_get_num_threads();
        if (omp_get_thread_num() == 0) *tid = 0, *in_par = omp_in_parallel();
    }
    double s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
    for (long i = 0; i < N; i++) s += (double)i;
    *sum = s;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (long i = 0; i < N; i++) hit[i] = 1;
    }
    int c = 0;
    for (long i = 0; i < N; i++) c += hit[i], hit[i] = 0;
    *covered = c;
}

static void one_thread_runs_inline(void) {
    omp_set_num_threads(1);
    int nt = -1, tid = -1, ip = -1, cov = 0;
    double sum = 0;
    regions(&nt, &tid, &ip, &sum, &cov);  // first calls: libgomp's own set-up, if any
    long r0 = ct_omp_inline_regions(), c0 = calls_now();
    for (int rep = 0; rep < 10; rep++) regions(&nt, &tid, &ip, &sum, &cov);
    long inl = ct_omp_inline_regions() - r0, calls = calls_now() - c0;
    CHECK(inl == 30, "%ld of 30 regions ran inline", inl);
    CHECK(calls == 0, "%ld heap calls in 30 one-thread regions", calls);
    CHECK(nt == 1 && tid == 0 && ip == 0, "inside: %d threads, thread %d, in_parallel %d", nt, tid, ip);
    CHECK(sum == (double)N * (N - 1) / 2 && cov == N, "reduction %g, loop covered %d of %d", sum, cov, N);
    omp_set_num_threads(2);
}

// What inlining saves: libgomp's own team of one allocates (if this stops being true, the
// inlining is no longer needed, and this says so).
static void libgomp_team_of_one_allocates(void) {
    omp_set_num_threads(2);
    int nt = 0;
    long c0 = calls_now();
#pragma omp parallel num_threads(2)
    {
#pragma omp parallel num_threads(1)  // nested: level 1, so it goes to libgomp
        {
#pragma omp atomic
            nt += omp_get_num_threads();
        }
    }
    CHECK(nt == 2, "each of 2 nested one-thread teams has %d threads", nt / 2);
    CHECK(calls_now() - c0 > 0, "libgomp's nested teams of one made no heap call");
}

static void several_threads_use_libgomp(void) {
    omp_set_num_threads(2);
    int nt = -1, tid = -1, ip = -1, cov = 0;
    double sum = 0;
    long r0 = ct_omp_inline_regions();
    regions(&nt, &tid, &ip, &sum, &cov);
    CHECK(ct_omp_inline_regions() == r0, "a two-thread region ran inline");
    CHECK(nt == 2 && ip == 1, "inside: %d threads, in_parallel %d", nt, ip);
    CHECK(sum == (double)N * (N - 1) / 2 && cov == N, "reduction %g, loop covered %d of %d", sum, cov, N);
}

// An if() clause that is false gives the region one thread: inline, whatever the thread count.
static void if_false_runs_inline(void) {
    omp_set_num_threads(2);
    volatile int big = 0;
    int nt = -1;
    long r0 = ct_omp_inline_regions();
#pragma omp parallel if (big)
    nt = omp_get_num_threads();
    CHECK(ct_omp_inline_regions() == r0 + 1 && nt == 1, "if(0): inline %ld, %d threads",
          ct_omp_inline_regions() - r0, nt);
}

// Nested in a region, a team of one is libgomp's: running it inline would leave the outer
// team's thread numbers in place, and an `omp for` inside would cover part of its loop.
static void nested_goes_to_libgomp(void) {
    omp_set_num_threads(2);
    static int hit[2][N];
    int inner_tid[2] = {-1, -1};
    long r0 = ct_omp_inline_regions();
#pragma omp parallel num_threads(2)
    {
        int me = omp_get_thread_num();
#pragma omp parallel num_threads(1)
        {
            inner_tid[me] = omp_get_thread_num();
#pragma omp for schedule(static)
            for (long i = 0; i < N; i++) hit[me][i] = 1;
        }
    }
    int cov = 0;
    for (int t = 0; t < 2; t++)
        for (long i = 0; i < N; i++) cov += hit[t][i];
    CHECK(ct_omp_inline_regions() == r0, "a nested region ran inline");
    CHECK(inner_tid[0] == 0 && inner_tid[1] == 0 && cov == 2 * N, "inner thread numbers %d %d, covered %d of %d",
          inner_tid[0], inner_tid[1], cov, 2 * N);
}

int main(void) {
    heap_counting_start();
    CT_RUN(one_thread_runs_inline);
    CT_RUN(libgomp_team_of_one_allocates);
    CT_RUN(several_threads_use_libgomp);
    CT_RUN(if_false_runs_inline);
    CT_RUN(nested_goes_to_libgomp);
    CT_TEST_EXIT();
}
