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
//
// Every live block is also in a registry (fixed size, no allocation of its own) with where it was
// allocated -- ct_mem_alloc is a macro that passes the calling function, file and line -- so a
// memory snapshot (ct_mem_snapshot_write) can list the buffers behind each category's total:
// by the profiler after a run's first step, and by ct_mem_alloc itself when an allocation fails.
#ifndef CT_MEMORY_H
#define CT_MEMORY_H
#include <stdbool.h>
#include <stddef.h>

#include "core/device.h"
#include "core/error.h"

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
// 64-byte aligned, zeroed. Fatal on failure, after writing a memory snapshot where one was asked
// for (ct_mem_snapshot_on_failure); the message names the failed request and the snapshot.
// (Variadic so that an argument holding a comma -- a compound literal -- passes through whole.)
#define ct_mem_alloc(...) ct_mem_alloc_at(__VA_ARGS__, __func__, __FILE__, __LINE__)
// The function behind the macro: func / file / line say where the buffer was asked for (static
// strings, kept as they are).
void *ct_mem_alloc_at(ct_mem_category cat, size_t bytes, const char *func, const char *file, int line);
// Frees a block from ct_mem_alloc or ct_mem_alloc_on (the block knows its device); NULL is ok.
void ct_mem_free(void *p);
// Asks the kernel to back the 2 MiB-aligned interior of [p, p + bytes) with huge pages, before
// it is first touched. ct_mem_alloc does this for every block of 4 MiB or more; call it for big
// host buffers allocated elsewhere. Advice only: no effect where transparent huge pages are off.
void ct_mem_advise_huge_pages(void *p, size_t bytes);

size_t ct_mem_current(ct_mem_category cat);  // = ct_mem_current_on(CT_HOST, cat)
size_t ct_mem_peak(ct_mem_category cat);     // = ct_mem_peak_on(CT_HOST, cat)
// Allocations so far: every ct_mem_alloc / ct_mem_alloc_on, and every positive
// ct_mem_record_on (a backend's own allocation is still an allocation).
long ct_mem_alloc_count(void);
const char *ct_mem_category_name(ct_mem_category cat);
// Sets every peak, on every device, to its current value.
void ct_mem_reset_peaks(void);

// ---- on a given device -----------------------------------------------------------------
// Host memory (as ct_mem_alloc) for a CPU device. Device memory through the allocator its
// backend installed (ct_mem_set_device_allocator; the cuda backend does so when ct_kernels_get
// ("cuda") first returns it): not zeroed, no header in front of it (the host never touches it),
// found again by ct_mem_free in a table of live device blocks. A kind without an allocator is
// fatal ("this build has no ... backend").
#define ct_mem_alloc_on(...) ct_mem_alloc_on_at(__VA_ARGS__, __func__, __FILE__, __LINE__)
void *ct_mem_alloc_on_at(ct_device dev, ct_mem_category cat, size_t bytes, const char *func, const char *file,
                         int line);
// A device allocator: alloc returns `bytes` of memory on device `index` (NULL when out of memory),
// free gives a block back. Installed once per kind by its backend (core cannot call CUDA itself).
typedef struct {
    void *(*alloc)(int index, size_t bytes);
    void (*free)(int index, void *p);
} ct_mem_device_allocator;
void ct_mem_set_device_allocator(ct_device_kind kind, const ct_mem_device_allocator *a);
size_t ct_mem_current_on(ct_device dev, ct_mem_category cat);
size_t ct_mem_peak_on(ct_device dev, ct_mem_category cat);
// Accounts `delta` bytes (> 0: allocated, < 0: freed) that a backend manages itself. Freeing
// more than is recorded is fatal: it means the backend's books and ours disagree.
void ct_mem_record_on(ct_device dev, ct_mem_category cat, long long delta);

// ---- host access to device memory --------------------------------------------------------
// A device whose memory the host must not touch outside backend calls (the test device,
// kernels/sim) installs a guard: its kernel table opens it around every kernel, comm/ around
// every transport call, so memory is reachable exactly while a backend works on it. Opens nest
// and may come from several threads; the memory closes when the last open is closed. Without a
// guard (cpu, cuda) both calls do nothing.
typedef struct {
    void (*open)(void);
    void (*close)(void);
} ct_mem_access_guard;
void ct_mem_set_access_guard(const ct_mem_access_guard *g);
void ct_mem_device_open(void);
void ct_mem_device_close(void);
// Whether a guard is installed (a transport must then not let another process read this one's
// memory directly, outside this process's own calls).
bool ct_mem_device_guarded(void);
// Which live block holds address p, as "N bytes of CATEGORY on DEVICE from FUNC (FILE:LINE),
// offset M" into buf; false (buf "") when none does. Takes no lock and allocates nothing: a crash
// handler may call it.
bool ct_mem_describe(const void *p, char *buf, size_t n);

// ---- snapshots ---------------------------------------------------------------------------
// Writes where host memory goes now to `path`: a header (why: "end of step 1"), then per
// category one line
//   category <name> current <bytes> peak <bytes> buffers <n> (<MiB> MiB)
// followed by its buffers, largest first,
//   buffer <category> <bytes> <function> <file>:<line>
// and, when the buffers do not add up to the category's total (bytes a backend recorded with
// ct_mem_record_on, or blocks beyond the registry's capacity), one line
//   unlisted <category> <bytes>
// so that buffers + unlisted = current for every category. Lines starting with '#' are comments.
// Allocates nothing (it may run because an allocation failed). CT_ERR + message naming path.
ct_status ct_mem_snapshot_write(const char *path, const char *why);
// Where a failed allocation writes its snapshot before ending the job ("" or NULL: nowhere).
void ct_mem_snapshot_on_failure(const char *path);
// Live blocks the registry holds now (tests).
int ct_mem_registered(void);
#endif
