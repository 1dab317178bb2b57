#include "core/memory.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file_check.h"

// Each block carries a small header in front of the aligned user pointer: what ct_mem_free needs
// to give the bytes back to the right counter and the right allocator.
typedef struct {
    size_t bytes;
    int category;
    ct_device device;
    void *raw;  // what the allocator returned
    int entry;  // its registry entry, -1 when the registry was full
} block_header;

// One counter pair per (device kind, device index, category). Indexed, not looked up, so that
// the hot path is one atomic add and a CAS loop that almost never loops.
typedef struct {
    _Atomic size_t current;
    _Atomic size_t peak;
} mem_counter;

static mem_counter counters[CT_DEVICE_NKINDS][CT_MEM_MAX_DEVICES][CT_MEM_NCATEGORIES];
static _Atomic long alloc_count;

enum { ALIGN = 64 };

static mem_counter *counter_of(ct_device dev, ct_mem_category cat) {
    if ((unsigned)dev.kind >= CT_DEVICE_NKINDS || dev.index < 0 || dev.index >= CT_MEM_MAX_DEVICES)
        ct_fatal("memory", "no such device (kind %d, index %d)", (int)dev.kind, dev.index);
    if ((unsigned)cat >= CT_MEM_NCATEGORIES) ct_fatal("memory", "no such category %d", (int)cat);
    return &counters[dev.kind][dev.index][cat];
}

// Raises c->peak to `now` unless another thread already raised it further. Every value the
// current counter takes is returned to exactly one thread's fetch_add, and that thread offers
// it here, so the peak ends as the exact maximum whatever the interleaving.
static void raise_peak(mem_counter *c, size_t now) {
    size_t seen = atomic_load_explicit(&c->peak, memory_order_relaxed);
    while (now > seen &&
           !atomic_compare_exchange_weak_explicit(&c->peak, &seen, now, memory_order_relaxed,
                                                  memory_order_relaxed)) {
        // `seen` now holds the peak another thread wrote; try again only if ours is higher.
    }
}

static void add(mem_counter *c, size_t bytes) {
    size_t now = atomic_fetch_add_explicit(&c->current, bytes, memory_order_relaxed) + bytes;
    raise_peak(c, now);
}

static void sub(mem_counter *c, size_t bytes, ct_device dev, ct_mem_category cat) {
    size_t before = atomic_fetch_sub_explicit(&c->current, bytes, memory_order_relaxed);
    if (before < bytes) {
        char d[32];
        ct_device_format(dev, d, sizeof d);
        ct_fatal("memory", "freeing %zu bytes of %s on %s, but only %zu are recorded", bytes,
                 ct_mem_category_name(cat), d, before);
    }
}

// ------------------------------------------------------------------ the registry

// Live blocks and where they were asked for, for snapshots. A fixed table (a run holds a few
// hundred buffers; the rest of a bigger population is still counted, as "unlisted") with a
// stack of free entries, under a spin lock: allocation is start-up work, and the lock is held
// for a few stores.
enum { REG_CAP = 16384 };
typedef struct {
    void *p;  // the user pointer, NULL: a free entry
    size_t bytes;
    const char *func, *file;
    int line;
    int category;
    ct_device device;
} reg_entry;
static reg_entry reg[REG_CAP];
static int reg_free[REG_CAP], reg_nfree, reg_top;  // free entries below reg_top; reg_top: never used yet
static int reg_live;
static atomic_flag reg_lock = ATOMIC_FLAG_INIT;

static void lock(void) {
    while (atomic_flag_test_and_set_explicit(&reg_lock, memory_order_acquire)) {
    }
}
static void unlock(void) { atomic_flag_clear_explicit(&reg_lock, memory_order_release); }

static int reg_add(void *p, size_t bytes, ct_mem_category cat, ct_device dev, const char *func, const char *file,
                   int line) {
    lock();
    int e = reg_nfree ? reg_free[--reg_nfree] : reg_top < REG_CAP ? reg_top++ : -1;
    if (e >= 0) {
        reg[e] = (reg_entry){p, bytes, func, file, line, (int)cat, dev};
        reg_live++;
    }
    unlock();
    return e;
}

static void reg_remove(int e) {
    if (e < 0) return;
    lock();
    reg[e].p = NULL;
    reg_free[reg_nfree++] = e;
    reg_live--;
    unlock();
}

int ct_mem_registered(void) {
    lock();
    int n = reg_live;
    unlock();
    return n;
}

// ------------------------------------------------------------------ allocation

static char failure_snapshot[4096];  // ct_mem_snapshot_on_failure's path, "" none

void ct_mem_snapshot_on_failure(const char *path) {
    snprintf(failure_snapshot, sizeof failure_snapshot, "%s", path ? path : "");
}

// The fatal path of an allocation: the snapshot first (what else holds memory is what the user
// needs to see), then one line naming the request and the file.
static _Noreturn void alloc_failed(size_t bytes, ct_mem_category cat, const char *func, const char *file, int line) {
    char why[512];
    snprintf(why, sizeof why, "allocation of %zu bytes for %s in %s (%s:%d) failed", bytes, ct_mem_category_name(cat),
             func, file, line);
    if (failure_snapshot[0]) {
        if (ct_mem_snapshot_write(failure_snapshot, why) == CT_OK)
            ct_fatal("memory", "out of memory: %s; memory snapshot written to %s", why, failure_snapshot);
        ct_fatal("memory", "out of memory: %s; the memory snapshot could not be written (%s)", why, ct_last_error());
    }
    ct_fatal("memory", "out of memory: %s", why);
}

// ------------------------------------------------------------------ device memory

// Device blocks have no header (the host never dereferences a device pointer), so ct_mem_free
// finds them here: a fixed table of live device blocks under the registry's lock. Allocation is
// start-up work and a run holds hundreds of buffers, so a linear search is cheap; host frees skip
// it entirely while no device block is live.
enum { DEV_CAP = 8192 };
typedef struct {
    void *p;  // NULL: free slot
    size_t bytes;
    int category, entry;
    ct_device device;
} dev_block;
static dev_block dev_blocks[DEV_CAP];
static _Atomic int dev_live;
static const ct_mem_device_allocator *dev_alloc[CT_DEVICE_NKINDS];

void ct_mem_set_device_allocator(ct_device_kind kind, const ct_mem_device_allocator *a) {
    if ((unsigned)kind >= CT_DEVICE_NKINDS || kind == CT_DEVICE_CPU)
        ct_fatal("memory", "no device allocator for kind %d", (int)kind);
    dev_alloc[kind] = a;
}

static void *device_alloc(ct_device dev, ct_mem_category cat, size_t bytes, const char *func, const char *file,
                          int line) {
    const ct_mem_device_allocator *a = dev_alloc[dev.kind];
    if (!a) {
        char d[32];
        ct_device_format(dev, d, sizeof d);
        ct_fatal("memory", "cannot allocate %zu bytes for %s on %s: this build has no %s backend (or it was never "
                 "selected)", bytes, ct_mem_category_name(cat), d, ct_device_kind_name(dev.kind));
    }
    void *p = a->alloc(dev.index, bytes ? bytes : 1);  // a distinct pointer even for 0 bytes
    if (!p) alloc_failed(bytes, cat, func, file, line);
    lock();
    int slot = -1;
    for (int i = 0; i < DEV_CAP && slot < 0; i++)
        if (!dev_blocks[i].p) slot = i;
    if (slot >= 0) dev_blocks[slot] = (dev_block){p, bytes, (int)cat, -1, dev};
    unlock();
    if (slot < 0) ct_fatal("memory", "more than %d live device blocks", DEV_CAP);
    dev_blocks[slot].entry = reg_add(p, bytes, cat, dev, func, file, line);
    atomic_fetch_add_explicit(&dev_live, 1, memory_order_relaxed);
    add(counter_of(dev, cat), bytes);
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return p;
}

// Frees p when it is a live device block; false when it is not one (then it is a host block).
static bool device_free(void *p) {
    if (atomic_load_explicit(&dev_live, memory_order_relaxed) == 0) return false;
    lock();
    dev_block b = {0};
    for (int i = 0; i < DEV_CAP; i++)
        if (dev_blocks[i].p == p) {
            b = dev_blocks[i];
            dev_blocks[i].p = NULL;
            break;
        }
    unlock();
    if (!b.p) return false;
    atomic_fetch_sub_explicit(&dev_live, 1, memory_order_relaxed);
    reg_remove(b.entry);
    sub(counter_of(b.device, (ct_mem_category)b.category), b.bytes, b.device, (ct_mem_category)b.category);
    dev_alloc[b.device.kind]->free(b.device.index, p);
    return true;
}

// Huge pages for the big host blocks (activations, gradients, optimizer state, the loss's logits
// chunk, attention's and the kernels' scratch). With 4 KiB pages the hardware prefetchers stop at
// every page boundary and the strided walks of packing and of the logits chunk miss the TLB;
// Debian's kernels leave transparent huge pages to regions that ask (madvise mode). Measured at
// bench S: steps 2-7% faster on one thread (two builds pinned at once, 5 pairs) and about 6% on
// two (313 of 348 MiB resident in huge pages). The memset below is the first touch.
#define CT_MEM_HUGE ((uintptr_t)2 << 20)
#define CT_MEM_HUGE_MIN ((size_t)4 << 20)

void ct_mem_advise_huge_pages(void *p, size_t bytes) {
    uintptr_t lo = ((uintptr_t)p + CT_MEM_HUGE - 1) & ~(CT_MEM_HUGE - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(CT_MEM_HUGE - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);  // advice: an error changes nothing
}

void *ct_mem_alloc_on_at(ct_device dev, ct_mem_category cat, size_t bytes, const char *func, const char *file,
                         int line) {
    mem_counter *c = counter_of(dev, cat);
    if (dev.kind != CT_DEVICE_CPU) return device_alloc(dev, cat, bytes, func, file, line);
    if (bytes > SIZE_MAX - ALIGN - sizeof(block_header)) alloc_failed(bytes, cat, func, file, line);
    void *raw = malloc(bytes + ALIGN + sizeof(block_header));
    if (!raw) alloc_failed(bytes, cat, func, file, line);
    uintptr_t user = ((uintptr_t)raw + sizeof(block_header) + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
    block_header *h = (block_header *)(user - sizeof(block_header));
    h->bytes = bytes;
    h->category = (int)cat;
    h->device = dev;
    h->raw = raw;
    if (bytes >= CT_MEM_HUGE_MIN) ct_mem_advise_huge_pages((void *)user, bytes);
    memset((void *)user, 0, bytes);
    h->entry = reg_add((void *)user, bytes, cat, dev, func, file, line);
    add(c, bytes);
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return (void *)user;
}

void *ct_mem_alloc_at(ct_mem_category cat, size_t bytes, const char *func, const char *file, int line) {
    return ct_mem_alloc_on_at(CT_HOST, cat, bytes, func, file, line);
}

void ct_mem_free(void *p) {
    if (!p) return;
    if (device_free(p)) return;
    block_header *h = (block_header *)((uintptr_t)p - sizeof(block_header));
    reg_remove(h->entry);
    sub(counter_of(h->device, (ct_mem_category)h->category), h->bytes, h->device,
        (ct_mem_category)h->category);
    free(h->raw);
}

void ct_mem_record_on(ct_device dev, ct_mem_category cat, long long delta) {
    mem_counter *c = counter_of(dev, cat);
    if (delta > 0) {
        add(c, (size_t)delta);
        atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    } else if (delta < 0) {
        sub(c, (size_t)0 - (size_t)delta, dev, cat);  // |delta| without overflow at LLONG_MIN
    }
}

size_t ct_mem_current_on(ct_device dev, ct_mem_category cat) {
    return atomic_load_explicit(&counter_of(dev, cat)->current, memory_order_relaxed);
}

size_t ct_mem_peak_on(ct_device dev, ct_mem_category cat) {
    return atomic_load_explicit(&counter_of(dev, cat)->peak, memory_order_relaxed);
}

size_t ct_mem_current(ct_mem_category cat) { return ct_mem_current_on(CT_HOST, cat); }
size_t ct_mem_peak(ct_mem_category cat) { return ct_mem_peak_on(CT_HOST, cat); }
long ct_mem_alloc_count(void) { return atomic_load_explicit(&alloc_count, memory_order_relaxed); }

// Not atomic as a whole: meant for quiet moments (between steps), like the old version.
void ct_mem_reset_peaks(void) {
    for (int k = 0; k < CT_DEVICE_NKINDS; k++)
        for (int d = 0; d < CT_MEM_MAX_DEVICES; d++)
            for (int i = 0; i < CT_MEM_NCATEGORIES; i++) {
                mem_counter *c = &counters[k][d][i];
                atomic_store_explicit(&c->peak, atomic_load_explicit(&c->current, memory_order_relaxed),
                                      memory_order_relaxed);
            }
}

const char *ct_mem_category_name(ct_mem_category cat) {
    static const char *names[] = {"params", "grads", "optim", "activations", "comm", "other"};
    return (unsigned)cat < CT_MEM_NCATEGORIES ? names[cat] : "?";
}

// ------------------------------------------------------------------ access guard

static const ct_mem_access_guard *_Atomic guard;

void ct_mem_set_access_guard(const ct_mem_access_guard *g) { atomic_store(&guard, g); }

void ct_mem_device_open(void) {
    const ct_mem_access_guard *g = atomic_load_explicit(&guard, memory_order_acquire);
    if (g) g->open();
}

bool ct_mem_device_guarded(void) { return atomic_load(&guard) != NULL; }

void ct_mem_device_close(void) {
    const ct_mem_access_guard *g = atomic_load_explicit(&guard, memory_order_acquire);
    if (g) g->close();
}

bool ct_mem_describe(const void *p, char *buf, size_t n) {
    if (n) buf[0] = 0;
    uintptr_t a = (uintptr_t)p;
    for (int e = 0; e < reg_top && e < REG_CAP; e++) {
        const reg_entry *r = &reg[e];
        uintptr_t lo = (uintptr_t)r->p;
        if (!r->p || a < lo || a - lo >= (r->bytes ? r->bytes : 1)) continue;
        char d[32];
        ct_device_format(r->device, d, sizeof d);
        snprintf(buf, n, "%zu bytes of %s on %s from %s (%s:%d), offset %zu", r->bytes,
                 ct_mem_category_name((ct_mem_category)r->category), d, r->func, r->file, r->line, (size_t)(a - lo));
        return true;
    }
    return false;
}

// ------------------------------------------------------------------ snapshots

// Output without stdio (a FILE allocates its buffer, and a snapshot may be written because an
// allocation failed): each line formatted on the stack and written whole.
typedef struct {
    int fd, err;
} snap_out;

__attribute__((format(printf, 2, 3))) static void out(snap_out *o, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || o->err) return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1, off = 0;
    while (off < len) {
        ssize_t w = write(o->fd, line + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            o->err = w < 0 ? errno : EIO;
            return;
        }
        off += (size_t)w;
    }
}

// Live host entries ordered by category, then largest first (Shell sort: in place, no
// allocation, fast enough for the registry's size), into idx; returns their count.
static int sorted_entries(int *idx) {
    int n = 0;
    for (int e = 0; e < reg_top; e++)
        if (reg[e].p && reg[e].device.kind == CT_HOST.kind && reg[e].device.index == CT_HOST.index) idx[n++] = e;
    for (int gap = n / 2; gap > 0; gap /= 2)
        for (int i = gap; i < n; i++) {
            int x = idx[i], j = i;
            for (; j >= gap; j -= gap) {
                const reg_entry *a = &reg[idx[j - gap]], *b = &reg[x];
                bool after = a->category > b->category || (a->category == b->category && a->bytes < b->bytes);
                if (!after) break;
                idx[j] = idx[j - gap];
            }
            idx[j] = x;
        }
    return n;
}

ct_status ct_mem_snapshot_write(const char *path, const char *why) {
    snap_out o = {-1, 0};
    if (ct_file_open_write(path, "memory snapshot", CT_FILE_WRITE_TRUNC, &o.fd)) return CT_ERR;
    static int idx[REG_CAP];  // under the lock: one snapshot at a time
    lock();
    int n = sorted_entries(idx);
    size_t total = 0;
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++) total += ct_mem_current((ct_mem_category)k);
    out(&o, "# ctitan memory snapshot: %s\n", why ? why : "");
    out(&o, "# host memory held through ct_mem_alloc, in bytes; buffers by category, largest first\n");
    out(&o, "# category <name> current <bytes> peak <bytes> buffers <n>; buffer <category> <bytes> <function> "
            "<file>:<line>;\n# unlisted <category> <bytes>: recorded by a backend, or beyond the registry's %d "
            "entries\n",
        REG_CAP);
    out(&o, "total %zu (%.2f MiB) allocations_so_far %ld\n", total, (double)total / 1048576.0, ct_mem_alloc_count());
    int at = 0;
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++) {
        int first = at;
        size_t listed = 0;
        while (at < n && reg[idx[at]].category == k) listed += reg[idx[at++]].bytes;
        size_t cur = ct_mem_current((ct_mem_category)k);
        out(&o, "category %s current %zu peak %zu buffers %d (%.2f MiB)\n", ct_mem_category_name((ct_mem_category)k),
            cur, ct_mem_peak((ct_mem_category)k), at - first, (double)cur / 1048576.0);
        for (int i = first; i < at; i++) {
            const reg_entry *r = &reg[idx[i]];
            out(&o, "buffer %s %zu %s %s:%d\n", ct_mem_category_name((ct_mem_category)k), r->bytes, r->func, r->file,
                r->line);
        }
        if (cur != listed)
            out(&o, "unlisted %s %zu\n", ct_mem_category_name((ct_mem_category)k), cur > listed ? cur - listed : 0);
    }
    unlock();
    int err = o.err;
    if (close(o.fd) != 0 && !err) err = errno;
    if (err) return ct_set_error("%s: memory snapshot write failed: %s", path, strerror(err));
    return CT_OK;
}
