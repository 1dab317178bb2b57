#include "core/memory.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

// Each block carries a small header in front of the aligned user pointer: its category and size.
typedef struct {
    size_t bytes;
    int category;
    int pad;
    void *raw;
} block_header;

static size_t current[CT_MEM_NCATEGORIES];
static size_t peak[CT_MEM_NCATEGORIES];
static long alloc_count;

enum { ALIGN = 64 };

void *ct_mem_alloc(ct_mem_category cat, size_t bytes) {
    size_t total = bytes + ALIGN + sizeof(block_header);
    void *raw = malloc(total);
    if (!raw) ct_fatal("memory", "out of memory allocating %zu bytes for %s", bytes, ct_mem_category_name(cat));
    uintptr_t user = ((uintptr_t)raw + sizeof(block_header) + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
    block_header *h = (block_header *)(user - sizeof(block_header));
    h->bytes = bytes;
    h->category = (int)cat;
    h->raw = raw;
    memset((void *)user, 0, bytes);
    current[cat] += bytes;
    if (current[cat] > peak[cat]) peak[cat] = current[cat];
    alloc_count++;
    return (void *)user;
}

void ct_mem_free(void *p) {
    if (!p) return;
    block_header *h = (block_header *)((uintptr_t)p - sizeof(block_header));
    current[h->category] -= h->bytes;
    free(h->raw);
}

size_t ct_mem_current(ct_mem_category cat) { return current[cat]; }
size_t ct_mem_peak(ct_mem_category cat) { return peak[cat]; }
long ct_mem_alloc_count(void) { return alloc_count; }

void ct_mem_reset_peaks(void) {
    for (int i = 0; i < CT_MEM_NCATEGORIES; i++) peak[i] = current[i];
}

const char *ct_mem_category_name(ct_mem_category cat) {
    static const char *names[] = {"params", "grads", "optim", "activations", "comm", "other"};
    return (unsigned)cat < CT_MEM_NCATEGORIES ? names[cat] : "?";
}
