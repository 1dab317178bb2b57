// Spans of work for profiling: what ran when, on which thread, recorded into a
// fixed buffer and written as a Chrome trace (JSON that Perfetto and chrome://tracing open).
//
// The recorder is process-wide, like the memory tracker: the code that opens spans (the
// executor, the model's stages, FSDP, comm's wait) has no run context to carry it through, and
// a span must cost one branch when profiling is off. It is off until ct_trace_start; the buffer
// is allocated once, at start-up (ct_trace_reserve), so a profiled step allocates nothing:
// a span is an atomic increment, two clock reads and a few stores. When the buffer is full, new
// spans are counted as dropped (the file says how many) instead of recorded.
//
// Names and argument keys are static strings (never copied, never freed); the one piece of
// text that is not -- a group's name, an action's token -- is copied into the event's `detail`.
//
// Threads: each thread that opens a span gets its own tid (0 for the first, normally the main
// thread), and spans of one thread nest because each thread opens and closes them in call
// order. OpenMP workers inside a kernel open none.
//
// The JSON writer below (ct_chrome_*) is the one every Chrome trace of ctitan goes through:
// these spans, and the pipeline timelines of train/pipeline_trace.c. It writes through a
// caller's buffer with write(2) -- no stdio, no allocation.
#ifndef CT_TRACE_H
#define CT_TRACE_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum {
    CT_TRACE_STEP = 0,  // the step and the trainer's phases: data, loss sharing, validation
    CT_TRACE_ACTION,    // executor actions: forward / backward of (stage, micro-batch), sends, receives
    CT_TRACE_COMPUTE,   // the model: a block's forward / backward, the embedding, the head with its loss
    CT_TRACE_FSDP,      // parameter all-gathers, gradient reduce-scatters, unshard / reshard, replicas
    CT_TRACE_COMM,      // time inside ct_comm_wait, named by collective and group
    CT_TRACE_OPTIM,     // gradient norm and optimizer update
    CT_TRACE_CKPT,      // checkpoint saves, memory snapshots
    CT_TRACE_KERNEL,    // one operation inside a block or the head: a linear layer by name, attention,
                        // rmsnorm, rope, swiglu, the output projection with cross-entropy, AdamW
    CT_TRACE_NCATS
} ct_trace_cat;

enum { CT_TRACE_DETAIL = 14 };  // bytes of copied text per event, NUL included

typedef struct {
    const char *name;              // static
    const char *key[2];            // static argument names, NULL: none
    int32_t val[2];                // their values
    int64_t t0, t1;                // ns on CLOCK_MONOTONIC; t1 == 0 while the span is open
    uint16_t tid;                  // recorder's thread number
    uint8_t cat;                   // ct_trace_cat
    char detail[CT_TRACE_DETAIL];  // copied text shown after the name ("fsdp", "0F3"), "" none
} ct_trace_event;

// Whether spans are being recorded now; read by every ct_trace_begin*.
extern _Atomic bool ct_trace_recording_;
static inline bool ct_trace_on(void) { return atomic_load_explicit(&ct_trace_recording_, memory_order_relaxed); }

// Allocates room for `capacity` spans (once; a later call with a larger capacity replaces the
// buffer, which is only legal while not recording). Start-up only.
void ct_trace_reserve(int capacity);
int ct_trace_capacity(void);
// Clears the buffer and starts recording; times in the file are relative to this moment.
// Fatal without a reserved buffer.
void ct_trace_start(void);
// Stops recording. Spans still open keep t1 == 0 (written as ending here, marked unfinished).
void ct_trace_stop(void);

// The slow path of ct_trace_begin*: records a span that starts now, returns its handle (-1 when
// the buffer is full).
int ct_trace_open_(ct_trace_cat cat, const char *name, const char *detail, const char *k0, int v0, const char *k1,
                   int v1);
void ct_trace_close_(int h);

// Opens a span (a handle for ct_trace_end, -1 when not recording). name: a static string.
static inline int ct_trace_begin(ct_trace_cat cat, const char *name) {
    return ct_trace_on() ? ct_trace_open_(cat, name, NULL, NULL, 0, NULL, 0) : -1;
}
// ... with up to two integer arguments (static keys; NULL key: none), e.g. "layer", 3, "mb", 1.
static inline int ct_trace_begin2(ct_trace_cat cat, const char *name, const char *k0, int v0, const char *k1, int v1) {
    return ct_trace_on() ? ct_trace_open_(cat, name, NULL, k0, v0, k1, v1) : -1;
}
// ... with copied text after the name (cut to CT_TRACE_DETAIL - 1 bytes), e.g. a group's name.
static inline int ct_trace_begin_on(ct_trace_cat cat, const char *name, const char *detail) {
    return ct_trace_on() ? ct_trace_open_(cat, name, detail, NULL, 0, NULL, 0) : -1;
}
// ... with both.
static inline int ct_trace_begin_full(ct_trace_cat cat, const char *name, const char *detail, const char *k0, int v0,
                                      const char *k1, int v1) {
    return ct_trace_on() ? ct_trace_open_(cat, name, detail, k0, v0, k1, v1) : -1;
}
static inline void ct_trace_end(int h) {
    if (h >= 0) ct_trace_close_(h);
}

// A function each span calls at its start and its end, before reading the clock (NULL: none):
// the kernel backend's synchronize on an asynchronous device, so that spans time the device's
// work, not its launch. Set once before recording; it costs a device round trip per span end.
void ct_trace_set_device_sync(void (*sync)(void));

// What the last recording holds (valid after ct_trace_stop): events in the order they began.
int ct_trace_count(void);
const ct_trace_event *ct_trace_events(void);
long ct_trace_dropped(void);  // spans that found the buffer full
const char *ct_trace_cat_name(ct_trace_cat cat);  // "step", "action", "compute", "fsdp", "comm", ..., "kernel"

// Writes the last recording as a Chrome trace: {"traceEvents": [...]}, process name and sort
// index (pid), thread names, then one complete event (ph "X") per span in the order they began,
// name = name + " " + detail, cat = its category, ts / dur in microseconds from ct_trace_start
// (whole nanoseconds, so a span that nests in another in time still does in the file), args =
// its integer arguments (+ "unfinished": true for a span still open at the stop). Dropped spans
// are counted in a metadata event "dropped_spans". No allocation. CT_ERR + message naming path.
ct_status ct_trace_write_chrome(const char *path, int pid, const char *process_name);

// ---- the Chrome trace event writer ---------------------------------------------------------
typedef struct {
    int fd;
    char *buf;        // the caller's buffer
    size_t cap, len;
    int err;          // errno of the first failed write, 0 while all is well
    bool first;       // no event written yet (no separator before the next)
    const char *path;
} ct_chrome_writer;

// Creates path and writes the header {"displayTimeUnit": "ms", "traceEvents": [ ; every event
// goes on its own line. buf (cap bytes, >= 256) holds output between writes.
ct_status ct_chrome_open(ct_chrome_writer *w, const char *path, char *buf, size_t cap);
// Metadata events carry "tid" and "ts" too (0), so every event has name, ph, pid, tid and ts.
// {"name": "process_name", "ph": "M", "pid": P, "tid": 0, "ts": 0, "args": {"name": "..."}}
void ct_chrome_process_name(ct_chrome_writer *w, int pid, const char *name);
// {"name": "process_sort_index", "ph": "M", "pid": P, "tid": 0, "ts": 0, "args": {"sort_index": P}}
void ct_chrome_process_sort(ct_chrome_writer *w, int pid, int index);
// {"name": "thread_name", "ph": "M", "pid": P, "tid": T, "ts": 0, "args": {"name": "..."}}
void ct_chrome_thread_name(ct_chrome_writer *w, int pid, int tid, const char *name);
// {"name": "<name>[ <detail>]", "cat": "<cat>", "ph": "X", "pid": P, "tid": T, "ts": us.ns,
//  "dur": us.ns[, "args": {<args>}]}; ts_ns, dur_ns >= 0; args: the object's members as JSON
// text ("\"stage\": 0, \"mb\": 1") or NULL. Names are escaped.
void ct_chrome_complete(ct_chrome_writer *w, const char *name, const char *detail, const char *cat, int pid, int tid,
                        int64_t ts_ns, int64_t dur_ns, const char *args);
// Any event given as a whole JSON object text (metadata with other members).
void ct_chrome_raw(ct_chrome_writer *w, const char *object);
// Closes the array and the object, flushes and closes the file. CT_ERR when any write failed.
ct_status ct_chrome_close(ct_chrome_writer *w);
#endif
