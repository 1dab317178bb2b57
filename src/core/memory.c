#include "core/memory.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

// Each block carries a small header in front of the aligned user pointer: what ct_mem_free needs
// to give the bytes back to the right counter and the right allocator.
typedef struct {
    size_t bytes;
    int category;
    ct_device device;
    void *raw;  // what the allocator returned
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

void *ct_mem_alloc_on(ct_device dev, ct_mem_category cat, size_t bytes) {
    mem_counter *c = counter_of(dev, cat);
    if (dev.kind != CT_DEVICE_CPU) {
        char d[32];
        ct_device_format(dev, d, sizeof d);
        ct_fatal("memory", "cannot allocate %zu bytes for %s on %s: this build has no %s backend",
                 bytes, ct_mem_category_name(cat), d, ct_device_kind_name(dev.kind));
    }
    if (bytes > SIZE_MAX - ALIGN - sizeof(block_header))
        ct_fatal("memory", "cannot allocate %zu bytes for %s", bytes, ct_mem_category_name(cat));
    void *raw = malloc(bytes + ALIGN + sizeof(block_header));
    if (!raw) ct_fatal("memory", "out of memory allocating %zu bytes for %s", bytes, ct_mem_category_name(cat));
    uintptr_t user = ((uintptr_t)raw + sizeof(block_header) + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
    block_header *h = (block_header *)(user - sizeof(block_header));
    h->bytes = bytes;
    h->category = (int)cat;
    h->device = dev;
    h->raw = raw;
    memset((void *)user, 0, bytes);
    add(c, bytes);
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return (void *)user;
}

void *ct_mem_alloc(ct_mem_category cat, size_t bytes) { return ct_mem_alloc_on(CT_HOST, cat, bytes); }

void ct_mem_free(void *p) {
    if (!p) return;
    block_header *h = (block_header *)((uintptr_t)p - sizeof(block_header));
    sub(counter_of(h->device, (ct_mem_category)h->category), h->bytes, h->device,
        (ct_mem_category)h->category);
    free(h->raw);  // every block is host memory until a device backend allocates here
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
