// The test device's memory: one reserved stretch of address space that the host can reach only
// while a backend call runs (ct_sim_open .. ct_sim_close), carved into page-aligned blocks first
// fit. Two ways to close it, chosen at start-up:
//   protection keys (x86 PKU, where the CPU and kernel have them): the reservation carries its own
//     key; closing denies the calling thread access through that key (WRPKRU: a register write,
//     no system call). Rights are per thread: the main thread is closed outside calls, and so are
//     threads it starts outside a call (a checkpoint writer, the loader); OpenMP's workers are
//     opened once for good, since they run only inside kernels -- a host loop that an OpenMP
//     team runs over device memory is still caught in the master thread's share of it.
//   mprotect (elsewhere, or CTITAN_SIM_NO_PKEYS=1): PROT_NONE for every thread, lifted while any
//     thread is in a call; two system calls per call over the range in use.
// Why a reservation rather than one mapping per block: one key or one mprotect range covers every
// block, and a stray pointer into a freed block still faults. Blocks are handed out as CUDA's are: not zeroed -- filled with 0xff bytes (a NaN
// in every float format), so code that trusts fresh device memory to be zero computes NaNs in a
// test rather than garbage on a GPU.
//
// A host access outside a backend call is a SIGSEGV at an address inside the reservation; the
// handler names the block (core/memory's registry: size, category, where it was allocated) and
// the offset, then lets the fault end the process as it would have. Faults elsewhere go to the
// handler that was there before.
#include "kernels/sim/device_sim.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "core/memory.h"

// Up to 256 GiB of address space (no memory until a block is touched): halved until the
// address-space limit (ulimit -v) lets it through.
#define RESERVE_MAX ((size_t)256 << 30)
#define RESERVE_MIN ((size_t)64 << 20)
#define PAGE ((size_t)4096)

typedef struct {
    size_t off, bytes;  // page-aligned offset in the reservation, bytes rounded up to pages
} sim_block;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int pkey = -1;                // the reservation's protection key, -1: the mprotect way
static _Thread_local int depth;      // this thread's open calls (protection keys)
static char *base;             // the reservation
static size_t reserved;        // its bytes
static size_t high;            // bytes below the end of the highest block ever handed out
static sim_block *blocks;      // live blocks by offset
static int n_blocks, cap_blocks;
static int opened;             // nesting depth of ct_sim_open
static struct sigaction previous_segv;

static void protect(size_t off, size_t bytes, int prot) {
    if (bytes && mprotect(base + off, bytes, prot) != 0)
        ct_fatal("cpu_sim", "mprotect of %zu bytes at offset %zu failed", bytes, off);
}

static void on_segv(int sig, siginfo_t *si, void *uctx) {
    uintptr_t a = (uintptr_t)si->si_addr, lo = (uintptr_t)base;
    if (base && a >= lo && a - lo < reserved) {
        char what[256], line[512];
        if (!ct_mem_describe(si->si_addr, what, sizeof what)) snprintf(what, sizeof what, "no live block");
        int n = snprintf(line, sizeof line,
                         "cpu_sim: the host touched device memory outside a backend call, at %p: %s\n",
                         si->si_addr, what);
        if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        void *frames[32];  // where: addr2line -e <program> turns the offsets into lines
        backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
        signal(SIGSEGV, SIG_DFL);  // the faulting access runs again and ends the process
        return;
    }
    sigaction(SIGSEGV, &previous_segv, NULL);  // not ours: as if we had never been there
    if (!(previous_segv.sa_flags & SA_SIGINFO) && previous_segv.sa_handler != SIG_DFL &&
        previous_segv.sa_handler != SIG_IGN)
        previous_segv.sa_handler(sig);
    else if ((previous_segv.sa_flags & SA_SIGINFO) && previous_segv.sa_sigaction)
        previous_segv.sa_sigaction(sig, si, uctx);
}

// Under mu.
static void reserve_once(void) {
    if (base) return;
    void *p = MAP_FAILED;
    for (reserved = RESERVE_MAX; p == MAP_FAILED && reserved >= RESERVE_MIN; reserved /= 2)
        p = mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) ct_fatal("cpu_sim", "cannot reserve %zu MiB of address space", RESERVE_MIN >> 20);
    reserved *= 2;  // the size that succeeded
    base = p;
    const char *no = getenv("CTITAN_SIM_NO_PKEYS");
    if (!(no && *no && strcmp(no, "0"))) pkey = pkey_alloc(0, PKEY_DISABLE_ACCESS);
    if (pkey >= 0 && pkey_mprotect(base, reserved, PROT_READ | PROT_WRITE, pkey) != 0) {
        pkey_free(pkey);
        pkey = -1;
    }
    if (pkey >= 0) {
        // OpenMP's workers: open for good (see the top of the file); the master thread closes again.
#pragma omp parallel
        pkey_set(pkey, 0);
        pkey_set(pkey, PKEY_DISABLE_ACCESS);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
}

static void *sim_alloc(int index, size_t bytes) {
    (void)index;
    size_t need = (bytes + PAGE - 1) & ~(PAGE - 1);
    pthread_mutex_lock(&mu);
    reserve_once();
    // First fit: the gap before block i is [end of block i-1, off of block i).
    size_t at = 0;
    int i = 0;
    for (; i < n_blocks; i++) {
        if (blocks[i].off - at >= need) break;
        at = blocks[i].off + blocks[i].bytes;
    }
    if (at + need > reserved) {
        pthread_mutex_unlock(&mu);
        return NULL;
    }
    if (n_blocks == cap_blocks) {
        int cap = cap_blocks ? 2 * cap_blocks : 256;
        sim_block *nb = realloc(blocks, (size_t)cap * sizeof *nb);
        if (!nb) ct_fatal("cpu_sim", "no host memory for the block table");
        blocks = nb, cap_blocks = cap;
    }
    memmove(blocks + i + 1, blocks + i, (size_t)(n_blocks - i) * sizeof *blocks);
    blocks[i] = (sim_block){at, need};
    n_blocks++;
    if (at + need > high) high = at + need;
    if (pkey >= 0) {
        pthread_mutex_unlock(&mu);
        ct_sim_open();
        memset(base + at, 0xff, need);
        ct_sim_close();
        return base + at;
    }
    protect(at, need, PROT_READ | PROT_WRITE);
    memset(base + at, 0xff, need);
    if (!opened) protect(at, need, PROT_NONE);
    pthread_mutex_unlock(&mu);
    return base + at;
}

static void sim_free(int index, void *p) {
    (void)index;
    pthread_mutex_lock(&mu);
    size_t off = (size_t)((char *)p - base);
    int i = 0;
    while (i < n_blocks && blocks[i].off != off) i++;
    if (i == n_blocks) ct_fatal("cpu_sim", "freeing %p, which is not a live block", p);
    (void)madvise(base + off, blocks[i].bytes, MADV_DONTNEED);  // give the pages back
    memmove(blocks + i, blocks + i + 1, (size_t)(n_blocks - i - 1) * sizeof *blocks);
    n_blocks--;
    pthread_mutex_unlock(&mu);
}

void ct_sim_open(void) {
    if (pkey >= 0) {
        if (depth++ == 0) pkey_set(pkey, 0);
        return;
    }
    pthread_mutex_lock(&mu);
    if (opened++ == 0) protect(0, high, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&mu);
}

void ct_sim_close(void) {
    if (pkey >= 0) {
        if (depth <= 0) ct_fatal("cpu_sim", "closing device memory that is not open");
        if (--depth == 0) pkey_set(pkey, PKEY_DISABLE_ACCESS);
        return;
    }
    pthread_mutex_lock(&mu);
    if (opened <= 0) ct_fatal("cpu_sim", "closing device memory that is not open");
    if (--opened == 0) protect(0, high, PROT_NONE);
    pthread_mutex_unlock(&mu);
}

static _Atomic long host_reads;  // copy_to_host calls so far

void ct_sim_count_host_read(void) { host_reads++; }
long ct_sim_host_reads(void) { return host_reads; }

bool ct_sim_uses_protection_keys(void) { return pkey >= 0; }

bool ct_sim_is_device_pointer(const void *p) {
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)base;
    return base && a >= lo && a - lo < reserved;
}

static const ct_mem_device_allocator allocator = {sim_alloc, sim_free};
static const ct_mem_access_guard guard = {ct_sim_open, ct_sim_close};

void ct_sim_backend_init(void) {
    ct_mem_set_device_allocator(CT_DEVICE_SIM, &allocator);
    ct_mem_set_access_guard(&guard);
}
