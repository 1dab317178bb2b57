// Memory accounting by device and category. Every long-lived buffer of a run is allocated here
// at start-up, tagged with what it is for, so the trainer can print (and the planner predict)
// the peak of each category on each device. The step itself allocates nothing;
// ct_mem_alloc_count lets tests check that.
//
// The tracker is process-wide on purpose: like malloc, it describes the process, not a run.
// Its counters are atomics, so threads (OpenMP workers, a loader thread) may allocate and free
// concurrently and the totals stay exact; a peak is the largest value its counter ever held.
//
// Memory a backend allocates itself (a CUDA pool, NCCL buffers) is not allocated here, but the
// backend reports it with ct_mem_record_on so that the same tables show it.
#ifndef CT_MEMORY_H
#define CT_MEMORY_H
#include <stddef.h>

#include "core/device.h"

typedef enum {
    CT_MEM_PARAMS = 0,   // model parameters (full or sharded), incl. gathered copies
    CT_MEM_GRADS,        // gradients
    CT_MEM_OPTIM,        // optimizer state (AdamW m, v; fp32 master copies)
    CT_MEM_ACTIVATIONS,  // activations kept for backward and per-step scratch
    CT_MEM_COMM,         // communication buffers
    CT_MEM_OTHER,        // data loader, tables, everything else
    CT_MEM_NCATEGORIES
} ct_mem_category;

// Devices of each kind the tracker can tell apart (index 0 .. CT_MEM_MAX_DEVICES-1).
enum { CT_MEM_MAX_DEVICES = 16 };

// ---- on the host (what most callers want) --------------------------------------------------
// 64-byte aligned, zeroed. Fatal on failure.
void *ct_mem_alloc(ct_mem_category cat, size_t bytes);
// Frees a block from ct_mem_alloc or ct_mem_alloc_on (the block knows its device); NULL is ok.
void ct_mem_free(void *p);

size_t ct_mem_current(ct_mem_category cat);  // = ct_mem_current_on(CT_HOST, cat)
size_t ct_mem_peak(ct_mem_category cat);     // = ct_mem_peak_on(CT_HOST, cat)
// Allocations so far: every ct_mem_alloc / ct_mem_alloc_on, and every positive
// ct_mem_record_on (a backend's own allocation is still an allocation).
long ct_mem_alloc_count(void);
const char *ct_mem_category_name(ct_mem_category cat);
// Sets every peak, on every device, to its current value.
void ct_mem_reset_peaks(void);

// ---- on a given device -----------------------------------------------------------------
// Host memory (as ct_mem_alloc) for a CPU device. No build has a CUDA backend yet, so a CUDA
// device is fatal ("not built") for now; the backend will allocate here when it exists.
void *ct_mem_alloc_on(ct_device dev, ct_mem_category cat, size_t bytes);
size_t ct_mem_current_on(ct_device dev, ct_mem_category cat);
size_t ct_mem_peak_on(ct_device dev, ct_mem_category cat);
// Accounts `delta` bytes (> 0: allocated, < 0: freed) that a backend manages itself. Freeing
// more than is recorded is fatal: it means the backend's books and ours disagree.
void ct_mem_record_on(ct_device dev, ct_mem_category cat, long long delta);
#endif
