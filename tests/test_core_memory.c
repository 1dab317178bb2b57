// Tests of core/memory.h: per-category and per-device accounting, exact under concurrent use
// from OpenMP threads, and the peaks.
//
// The tracker is process-wide, so every case works relative to the counters it finds (a
// baseline) and leaves them as it found them.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/memory.h"
#include "fatal_child.h"
#include "test.h"

enum { T = 8 };  // threads asked for; the tests use however many OpenMP gives

static const ct_device gpu0 = {CT_DEVICE_CUDA, 0}, gpu1 = {CT_DEVICE_CUDA, 1};


static void test_host_alloc_as_before(void) {
    size_t cur0 = ct_mem_current(CT_MEM_GRADS);
    long n0 = ct_mem_alloc_count();
    ct_mem_reset_peaks();
    unsigned char *a = ct_mem_alloc(CT_MEM_GRADS, 1000);
    unsigned char *b = ct_mem_alloc(CT_MEM_GRADS, 3);
    CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "64-byte aligned");
    int zero = 1;
    for (int i = 0; i < 1000; i++) zero &= a[i] == 0;
    CHECK(zero, "zeroed");
    CHECK(ct_mem_current(CT_MEM_GRADS) == cur0 + 1003, "current %zu", ct_mem_current(CT_MEM_GRADS));
    CHECK(ct_mem_current_on(CT_HOST, CT_MEM_GRADS) == cur0 + 1003, "host = the default device");
    CHECK(ct_mem_alloc_count() == n0 + 2, "count");
    ct_mem_free(a);
    CHECK(ct_mem_current(CT_MEM_GRADS) == cur0 + 3 && ct_mem_peak(CT_MEM_GRADS) == cur0 + 1003, "after free");
    ct_mem_reset_peaks();
    CHECK(ct_mem_peak(CT_MEM_GRADS) == cur0 + 3, "reset peak = current");
    ct_mem_free(b);
    ct_mem_free(NULL);
    CHECK(ct_mem_current(CT_MEM_GRADS) == cur0 && ct_mem_alloc_count() == n0 + 2, "back to baseline");
    void *z = ct_mem_alloc(CT_MEM_OTHER, 0);  // zero bytes: a valid, freeable block
    CHECK(z != NULL, "zero-byte block");
    ct_mem_free(z);
    CHECK(strcmp(ct_mem_category_name(CT_MEM_OPTIM), "optim") == 0 &&
              strcmp(ct_mem_category_name((ct_mem_category)99), "?") == 0, "names");
}

// Categories and devices are separate counters: what one records, no other sees.
static void test_devices_and_categories_are_separate(void) {
    size_t host_p = ct_mem_current(CT_MEM_PARAMS), host_a = ct_mem_current(CT_MEM_ACTIVATIONS);
    void *p = ct_mem_alloc_on(CT_HOST, CT_MEM_PARAMS, 4096);
    ct_mem_record_on(gpu0, CT_MEM_PARAMS, 1 << 20);
    ct_mem_record_on(gpu1, CT_MEM_PARAMS, 3 << 20);
    ct_mem_record_on(gpu1, CT_MEM_ACTIVATIONS, 5 << 20);
    CHECK(ct_mem_current(CT_MEM_PARAMS) == host_p + 4096, "host params %zu", ct_mem_current(CT_MEM_PARAMS));
    CHECK(ct_mem_current(CT_MEM_ACTIVATIONS) == host_a, "host activations untouched");
    CHECK(ct_mem_current_on(gpu0, CT_MEM_PARAMS) == 1 << 20, "gpu0 params");
    CHECK(ct_mem_current_on(gpu1, CT_MEM_PARAMS) == 3 << 20, "gpu1 params");
    CHECK(ct_mem_current_on(gpu0, CT_MEM_ACTIVATIONS) == 0, "gpu0 activations");
    CHECK(ct_mem_current_on(gpu1, CT_MEM_ACTIVATIONS) == 5 << 20, "gpu1 activations");
    ct_mem_record_on(gpu1, CT_MEM_PARAMS, -(2 << 20));
    CHECK(ct_mem_current_on(gpu1, CT_MEM_PARAMS) == 1 << 20 && ct_mem_peak_on(gpu1, CT_MEM_PARAMS) == 3 << 20,
          "gpu1 after a partial free");
    ct_mem_free(p);
    ct_mem_record_on(gpu0, CT_MEM_PARAMS, -(1 << 20));
    ct_mem_record_on(gpu1, CT_MEM_PARAMS, -(1 << 20));
    ct_mem_record_on(gpu1, CT_MEM_ACTIVATIONS, -(5 << 20));
    ct_mem_record_on(gpu1, CT_MEM_ACTIVATIONS, 0);  // a no-op
    CHECK(ct_mem_current(CT_MEM_PARAMS) == host_p && ct_mem_current_on(gpu0, CT_MEM_PARAMS) == 0 &&
              ct_mem_current_on(gpu1, CT_MEM_PARAMS) == 0 && ct_mem_current_on(gpu1, CT_MEM_ACTIVATIONS) == 0,
          "all back to zero");
    ct_mem_reset_peaks();
    CHECK(ct_mem_peak_on(gpu1, CT_MEM_ACTIVATIONS) == 0, "reset reaches every device");
}

// Every thread allocates its blocks, all wait, then all free: the peak is exactly the sum of
// everything, the current returns exactly to the baseline, the count exactly by the blocks.
static void test_threads_exact_peak(void) {
    enum { K = 200 };
    const ct_mem_category cat = CT_MEM_ACTIVATIONS;
    size_t base = ct_mem_current(cat);
    long n0 = ct_mem_alloc_count();
    ct_mem_reset_peaks();
    size_t expect = 0;
    int nthreads = 0;
    static void *blocks[T][K];
#pragma omp parallel num_threads(T) reduction(+ : expect)
    {
        int t = omp_get_thread_num();
#pragma omp single
        nthreads = omp_get_num_threads();
        for (int i = 0; i < K; i++) {
            size_t bytes = (size_t)(t * 131 + i * 7 + 1);  // different per thread and block
            blocks[t][i] = ct_mem_alloc(cat, bytes);
            expect += bytes;
        }
#pragma omp barrier
        for (int i = 0; i < K; i++) ct_mem_free(blocks[t][i]);
    }
    CHECK(ct_mem_peak(cat) == base + expect, "peak %zu vs %zu (%d threads)", ct_mem_peak(cat), base + expect,
          nthreads);
    CHECK(ct_mem_current(cat) == base, "current %zu vs %zu", ct_mem_current(cat), base);
    CHECK(ct_mem_alloc_count() == n0 + (long)nthreads * K, "count %ld", ct_mem_alloc_count() - n0);
}

// Threads alloc and free without any barrier, on the host and through record_on on two GPUs:
// totals must come back exactly, and the peak must lie between the most any one thread held and
// the most all could have held together.
static void test_threads_interleaved(void) {
    enum { ITER = 2000, HOLD = 4 };
    const ct_mem_category cat = CT_MEM_COMM;
    size_t base = ct_mem_current(cat);
    ct_mem_reset_peaks();
    int nthreads = 0;
#pragma omp parallel num_threads(T)
    {
        int t = omp_get_thread_num();
#pragma omp single
        nthreads = omp_get_num_threads();
        void *held[HOLD] = {0};
        const ct_device gpu = t % 2 ? gpu1 : gpu0;
        for (int i = 0; i < ITER; i++) {
            int slot = i % HOLD;
            ct_mem_free(held[slot]);
            held[slot] = ct_mem_alloc(cat, 64 + (size_t)(i % 5) * 8);  // at most 96 bytes
            ct_mem_record_on(gpu, cat, 1000);
            ct_mem_record_on(gpu, cat, -1000);
        }
        for (int s = 0; s < HOLD; s++) ct_mem_free(held[s]);
    }
    CHECK(ct_mem_current(cat) == base, "host current %zu vs %zu", ct_mem_current(cat), base);
    CHECK(ct_mem_current_on(gpu0, cat) == 0 && ct_mem_current_on(gpu1, cat) == 0, "gpu current");
    size_t peak = ct_mem_peak(cat) - base;
    CHECK(peak >= HOLD * 64 && peak <= (size_t)nthreads * HOLD * 96, "host peak %zu", peak);
    size_t g0 = ct_mem_peak_on(gpu0, cat), g1 = ct_mem_peak_on(gpu1, cat);
    CHECK(g0 >= 1000 && g0 <= (size_t)(nthreads + 1) / 2 * 1000, "gpu0 peak %zu", g0);
    if (nthreads > 1) CHECK(g1 >= 1000 && g1 <= (size_t)nthreads / 2 * 1000, "gpu1 peak %zu", g1);
}

// Peaks are per device: a big moment on one GPU does not raise another's.
static void test_peak_behaviour(void) {
    ct_mem_reset_peaks();
    ct_mem_record_on(gpu0, CT_MEM_OPTIM, 700);
    ct_mem_record_on(gpu0, CT_MEM_OPTIM, -500);
    ct_mem_record_on(gpu0, CT_MEM_OPTIM, 300);  // 500 now, below the 700 peak
    ct_mem_record_on(gpu1, CT_MEM_OPTIM, 50);
    CHECK(ct_mem_current_on(gpu0, CT_MEM_OPTIM) == 500 && ct_mem_peak_on(gpu0, CT_MEM_OPTIM) == 700, "gpu0");
    CHECK(ct_mem_peak_on(gpu1, CT_MEM_OPTIM) == 50, "gpu1");
    ct_mem_record_on(gpu0, CT_MEM_OPTIM, 400);  // 900: a new peak
    CHECK(ct_mem_peak_on(gpu0, CT_MEM_OPTIM) == 900, "new peak");
    ct_mem_record_on(gpu0, CT_MEM_OPTIM, -900);
    ct_mem_record_on(gpu1, CT_MEM_OPTIM, -50);
    ct_mem_reset_peaks();
    CHECK(ct_mem_peak_on(gpu0, CT_MEM_OPTIM) == 0, "reset");
}

static void alloc_on_cuda(void) { ct_mem_alloc_on(gpu1, CT_MEM_PARAMS, 128); }
static void free_more_than_recorded(void) {
    ct_mem_record_on(gpu0, CT_MEM_GRADS, 10);
    ct_mem_record_on(gpu0, CT_MEM_GRADS, -11);
}
static void device_out_of_range(void) { ct_mem_current_on((ct_device){CT_DEVICE_CUDA, CT_MEM_MAX_DEVICES}, CT_MEM_PARAMS); }

static void test_fatal_cases(void) {
    char err[512];
    int rc = ct_test_run_fatal_void(alloc_on_cuda, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "memory: cannot allocate 128 bytes for params on cuda:1: this build has no cuda backend"),
          "rc %d: %s", rc, err);
    rc = ct_test_run_fatal_void(free_more_than_recorded, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "memory: freeing 11 bytes of grads on cuda:0, but only 10 are recorded"), "rc %d: %s",
          rc, err);
    rc = ct_test_run_fatal_void(device_out_of_range, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "memory: no such device (kind 1, index 16)"), "rc %d: %s", rc, err);
}

// A block of 4 MiB or more is advised into transparent huge pages before its first touch: where
// the kernel grants them on request (madvise or always mode), /proc/self/smaps shows huge pages
// in the mapping that holds the block. (Where THP is off -- "[never]" -- nothing is granted; then
// only that the block is usable, zeroed, is checked, and the test says so.)
static long anon_huge_kib_around(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int inside = 0;
    long kib = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
            break;
    }
    fclose(f);
    return kib;
}

static void test_big_blocks_in_huge_pages(void) {
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
        mode[strcspn(mode, "\n")] = 0;
        fclose(f);
    }
    size_t bytes = (size_t)16 << 20;
    unsigned char *b = ct_mem_alloc(CT_MEM_OTHER, bytes);
    long nonzero = 0;
    for (size_t i = 0; i < bytes; i += 4096) nonzero += b[i] != 0;
    CHECK(nonzero == 0, "the block is not zeroed");
    if (strstr(mode, "[madvise]") || strstr(mode, "[always]")) {
        long kib = anon_huge_kib_around(b + bytes / 2);
        CHECK(kib >= 2048, "a 16 MiB block has %ld KiB in huge pages (THP mode: %s)", kib, mode);
    } else {
        printf("    transparent huge pages are off here (%s): advice not checked\n", f ? "never" : "no sysfs file");
    }
    ct_mem_free(b);
}

int main(void) {
    CT_RUN(test_host_alloc_as_before);
    CT_RUN(test_devices_and_categories_are_separate);
    CT_RUN(test_threads_exact_peak);
    CT_RUN(test_threads_interleaved);
    CT_RUN(test_peak_behaviour);
    CT_RUN(test_fatal_cases);
    CT_RUN(test_big_blocks_in_huge_pages);
    CT_TEST_EXIT();
}
