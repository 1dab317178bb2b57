// The test device, cpu_sim (kernels/sim): its table wraps every cpu member, its memory is not the
// host's (a host read or write outside a backend call ends the process with a line naming the
// buffer), fresh blocks are not zero, and kernels and copies through it give the cpu's bits.
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/memory.h"
#include "fatal_child.h"
#include "kernels/backend.h"
#include "kernels/sim/device_sim.h"
#include "test.h"
#include "test_rand.h"

static const ct_device SIM = {CT_DEVICE_SIM, 0};

static void test_lookup_and_members(void) {
    const ct_kernels *s = ct_kernels_get("cpu_sim"), *c = ct_kernels_get("cpu");
    CHECK(s && !strcmp(s->name, "cpu_sim") && s->device == CT_DEVICE_SIM, "no cpu_sim table");
    if (!s) return;
    CHECK(!ct_device_host_visible(s->device) && ct_device_host_visible(c->device), "host visibility");
    // Every member after `device` is a function pointer: each must be set, and none may be the
    // cpu's own (that one would run with the device memory closed, or skip the guard).
    typedef void (*fn)(void);
    int n = 0;
    for (size_t off = offsetof(ct_kernels, zero); off + sizeof(fn) <= sizeof(ct_kernels); off += sizeof(fn), n++) {
        fn fs, fc;
        memcpy(&fs, (const char *)s + off, sizeof fs);
        memcpy(&fc, (const char *)c + off, sizeof fc);
        CHECK(fs != NULL && fs != fc, "member %d (byte offset %zu) is %s", n, off, fs ? "the cpu's" : "NULL");
    }
    CHECK(n >= 30, "only %d members", n);
}

// Fresh device memory holds 0xff bytes (as cudaMalloc's does not hold zeros); copies both ways
// and zero work; the memory is counted on the sim device, not the host.
static void test_memory(void) {
    const ct_kernels *k = ct_kernels_get("cpu_sim");
    size_t host_before = ct_mem_current(CT_MEM_OTHER), dev_before = ct_mem_current_on(SIM, CT_MEM_OTHER);
    const size_t n = 10007;
    unsigned char *d = ct_mem_alloc_on(SIM, CT_MEM_OTHER, n), *h = malloc(n), *back = malloc(n);
    CHECK(ct_sim_is_device_pointer(d) && !ct_sim_is_device_pointer(h), "pointer kinds");
    CHECK(ct_mem_current_on(SIM, CT_MEM_OTHER) == dev_before + n && ct_mem_current(CT_MEM_OTHER) == host_before,
          "accounting: device %zu host %zu", ct_mem_current_on(SIM, CT_MEM_OTHER), ct_mem_current(CT_MEM_OTHER));
    k->copy_to_host(back, d, n);
    size_t ff = 0;
    for (size_t i = 0; i < n; i++) ff += back[i] == 0xff;
    CHECK(ff == n, "%zu of %zu fresh bytes are 0xff", ff, n);
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 37 + 1);
    k->copy_from_host(d, h, n);
    memset(back, 0, n);
    k->copy_to_host(back, d, n);
    CHECK(!memcmp(back, h, n), "round trip through the device");
    unsigned char *d2 = ct_mem_alloc_on(SIM, CT_MEM_OTHER, n);
    k->copy(d2, d, n);
    k->zero(d, n / 2);
    k->copy_to_host(back, d, n);
    size_t zeros = 0;
    for (size_t i = 0; i < n / 2; i++) zeros += back[i] == 0;
    CHECK(zeros == n / 2 && !memcmp(back + n / 2, h + n / 2, n - n / 2), "zero of the first half");
    k->copy_to_host(back, d2, n);
    CHECK(!memcmp(back, h, n), "device to device copy");
    ct_mem_free(d);
    ct_mem_free(d2);
    CHECK(ct_mem_current_on(SIM, CT_MEM_OTHER) == dev_before, "freed");
    free(h);
    free(back);
}

// A matmul and an RMSNorm through the sim table equal the cpu table's bits.
static void test_kernels_same_bits(void) {
    const ct_kernels *s = ct_kernels_get("cpu_sim"), *c = ct_kernels_get("cpu");
    const long M = 37, N = 29, K = 53;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N),
          *Cs = malloc(sizeof(float) * M * N), *w = malloc(sizeof(float) * K), *r = malloc(sizeof(float) * M),
          *o = malloc(sizeof(float) * M * K), *os = malloc(sizeof(float) * M * K);
    for (long i = 0; i < M * K; i++) A[i] = frand(1.0f);
    for (long i = 0; i < K * N; i++) B[i] = frand(1.0f);
    for (long i = 0; i < K; i++) w[i] = 1.0f + frand(0.1f);
    c->gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    c->rmsnorm_forward(o, r, A, w, M, K, 1e-5f);
    float *dA = ct_mem_alloc_on(SIM, CT_MEM_OTHER, sizeof(float) * M * K),
          *dB = ct_mem_alloc_on(SIM, CT_MEM_OTHER, sizeof(float) * K * N),
          *dC = ct_mem_alloc_on(SIM, CT_MEM_OTHER, sizeof(float) * M * N),
          *dw = ct_mem_alloc_on(SIM, CT_MEM_OTHER, sizeof(float) * K),
          *dr = ct_mem_alloc_on(SIM, CT_MEM_OTHER, sizeof(float) * M),
          *dO = ct_mem_alloc_on(SIM, CT_MEM_OTHER, sizeof(float) * M * K);
    s->copy_from_host(dA, A, sizeof(float) * M * K);
    s->copy_from_host(dB, B, sizeof(float) * K * N);
    s->copy_from_host(dw, w, sizeof(float) * K);
    s->gemm(0, 0, M, N, K, 1.0f, dA, K, dB, N, 0.0f, dC, N);  // beta 0: the 0xff bytes must not matter
    s->rmsnorm_forward(dO, dr, dA, dw, M, K, 1e-5f);
    s->copy_to_host(Cs, dC, sizeof(float) * M * N);
    s->copy_to_host(os, dO, sizeof(float) * M * K);
    CHECK(!memcmp(C, Cs, sizeof(float) * M * N), "gemm bits differ");
    CHECK(!memcmp(o, os, sizeof(float) * M * K), "rmsnorm bits differ");
    void *dev[] = {dA, dB, dC, dw, dr, dO};
    for (int i = 0; i < 6; i++) ct_mem_free(dev[i]);
    free(A), free(B), free(C), free(Cs), free(w), free(r), free(o), free(os);
}

// A host write to a device buffer, outside any backend call: the process ends by the fault,
// with a line naming the buffer's size, category and where it was allocated.
static void touch_device(void *arg) {
    (void)arg;
    ct_kernels_get("cpu_sim");
    float *d = ct_mem_alloc_on(SIM, CT_MEM_ACTIVATIONS, 4096 * sizeof(float));
    d[100] = 1.0f;  // the bug a GPU run would not report
    _exit(0);
}
static void touch_after_kernel(void *arg) {
    (void)arg;
    const ct_kernels *s = ct_kernels_get("cpu_sim");
    float *d = ct_mem_alloc_on(SIM, CT_MEM_GRADS, 64 * sizeof(float));
    s->zero(d, 64 * sizeof(float));  // open, then closed again
    volatile float x = d[3];         // a host read after the call
    (void)x;
    _exit(0);
}
static void test_host_access_caught(void) {
    char buf[2048];
    int rc = ct_test_run_fatal(touch_device, NULL, buf, sizeof buf);
    CHECK(rc == -1, "a host write to device memory was not stopped (exit %d)", rc);
    CHECK(strstr(buf, "cpu_sim: the host touched device memory") && strstr(buf, "16384 bytes of activations") &&
              strstr(buf, "test_device_sim.c") && strstr(buf, "offset 400"),
          "message: %s", buf);
    rc = ct_test_run_fatal(touch_after_kernel, NULL, buf, sizeof buf);
    CHECK(rc == -1 && strstr(buf, "256 bytes of grads"), "a host read after a kernel: exit %d, %s", rc, buf);
}

// A thread started outside any backend call (a checkpoint writer, a loader) is closed too.
static void *thread_touch(void *p) {
    ((volatile float *)p)[1] = 3.0f;
    return NULL;
}
static void touch_from_thread(void *arg) {
    (void)arg;
    ct_kernels_get("cpu_sim");
    float *d = ct_mem_alloc_on(SIM, CT_MEM_OPTIM, 1024 * sizeof(float));
    pthread_t th;
    pthread_create(&th, NULL, thread_touch, d);
    pthread_join(th, NULL);
    _exit(0);
}
static void test_other_thread_caught(void) {
    char buf[2048];
    int rc = ct_test_run_fatal(touch_from_thread, NULL, buf, sizeof buf);
    CHECK(rc == -1 && strstr(buf, "4096 bytes of optim"), "a write from another thread: exit %d, %s", rc, buf);
}

// Opens nest: memory stays reachable until the outermost close.
static void test_nesting(void) {
    float *d = ct_mem_alloc_on(SIM, CT_MEM_OTHER, 16 * sizeof(float));
    ct_mem_device_open();
    ct_mem_device_open();
    d[0] = 2.0f;
    ct_mem_device_close();
    d[1] = d[0];  // still open
    ct_mem_device_close();
    float back[2];
    ct_kernels_get("cpu_sim")->copy_to_host(back, d, sizeof back);
    CHECK(back[0] == 2.0f && back[1] == 2.0f, "%g %g", back[0], back[1]);
    ct_mem_free(d);
}

static const char *self;

// Both ways of closing the memory: this program again, told not to use protection keys.
static void test_without_protection_keys(void) {
    if (!ct_sim_uses_protection_keys()) {
        printf("  (this machine has no protection keys: the cases above ran with mprotect)\n");
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "CTITAN_SIM_NO_PKEYS=1 '%s' --no-recurse > /dev/null 2>&1", self);
    int rc = system(cmd);
    CHECK(rc == 0, "the cases with mprotect failed (status %d): run CTITAN_SIM_NO_PKEYS=1 %s", rc, self);
}

int main(int argc, char **argv) {
    self = argv[0];
    CT_RUN(test_lookup_and_members);
    CT_RUN(test_memory);
    CT_RUN(test_kernels_same_bits);
    CT_RUN(test_host_access_caught);
    CT_RUN(test_nesting);
    CT_RUN(test_other_thread_caught);
    if (!(argc > 1 && !strcmp(argv[1], "--no-recurse"))) CT_RUN(test_without_protection_keys);
    CT_TEST_EXIT();
}
