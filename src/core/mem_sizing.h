// Sizing without allocating. A module whose set-up takes its long-lived buffers through
// ct_mem_take can run that same set-up code in one of two modes: with a NULL sizing it allocates
// (ct_mem_alloc, tracked by category as usual); with a ct_mem_sizing it only adds the bytes it
// would have asked for to the sizing's category totals and gets NULL back. The planner's memory
// model (plan/memory_model.h) runs the trainer's set-up that way, so its prediction and the
// trainer's allocation are one piece of code, not two formulas that can drift apart.
#ifndef CT_MEM_SIZING_H
#define CT_MEM_SIZING_H
#include <stddef.h>

#include "core/memory.h"

typedef struct {
    double bytes[CT_MEM_NCATEGORIES];  // bytes set-up would allocate, per category
} ct_mem_sizing;

static inline void *ct_mem_sizing_add(ct_mem_sizing *s, ct_mem_category cat, size_t bytes) {
    s->bytes[cat] += (double)bytes;
    return NULL;
}

// Set-up that replaces a buffer it took (the sizing forgets its bytes; else it is freed).
#define ct_mem_give_back(sizing, p, cat, n) ((sizing) ? (void)((sizing)->bytes[(cat)] -= (double)(n)) : ct_mem_free(p))

// dev: where the buffer lives (the run's device; the sizing counts every device's bytes alike).
// A macro, so that an allocation keeps its call site (function, file, line) in memory snapshots.
#define ct_mem_take(sizing, dev, cat, bytes) \
    ((sizing) ? ct_mem_sizing_add((sizing), (cat), (bytes)) : ct_mem_alloc_on((dev), (cat), (bytes)))
#endif
