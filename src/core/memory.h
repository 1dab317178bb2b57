// Memory accounting by category. Every long-lived buffer of a run is allocated here at start-up,
// tagged with what it is for, so the trainer can print (and the planner predict) the peak of
// each category. The step itself allocates nothing; ct_mem_alloc_count lets tests check that.
//
// The tracker is process-wide on purpose: like malloc, it describes the process, not a run.
#ifndef CT_MEMORY_H
#define CT_MEMORY_H
#include <stddef.h>

typedef enum {
    CT_MEM_PARAMS = 0,   // model parameters (full or sharded), incl. gathered copies
    CT_MEM_GRADS,        // gradients
    CT_MEM_OPTIM,        // optimizer state (AdamW m, v; fp32 master copies)
    CT_MEM_ACTIVATIONS,  // activations kept for backward and per-step scratch
    CT_MEM_COMM,         // communication buffers
    CT_MEM_OTHER,        // data loader, tables, everything else
    CT_MEM_NCATEGORIES
} ct_mem_category;

// 64-byte aligned, zeroed. Fatal on failure.
void *ct_mem_alloc(ct_mem_category cat, size_t bytes);
void ct_mem_free(void *p);

size_t ct_mem_current(ct_mem_category cat);
size_t ct_mem_peak(ct_mem_category cat);
long ct_mem_alloc_count(void);  // number of ct_mem_alloc calls so far
const char *ct_mem_category_name(ct_mem_category cat);
void ct_mem_reset_peaks(void);
#endif
