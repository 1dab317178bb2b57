// The span recorder and the Chrome trace event writer (core/trace.h).
#include "core/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/memory.h"

_Atomic bool ct_trace_recording_;

static ct_trace_event *events;  // (capacity) allocated by ct_trace_reserve, kept for the process
static int capacity;
static _Atomic int used;        // spans begun since ct_trace_start (may pass capacity: dropped)
static _Atomic long dropped;
static int64_t origin_ns, stop_ns;
static _Atomic int next_tid;
static _Thread_local int my_tid = -1;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ct_trace_reserve(int n) {
    if (n <= capacity) return;
    if (ct_trace_on()) ct_fatal("trace", "cannot grow the span buffer while recording");
    ct_mem_free(events);
    events = ct_mem_alloc(CT_MEM_OTHER, (size_t)n * sizeof(ct_trace_event));
    capacity = n;
}

int ct_trace_capacity(void) { return capacity; }

static void (*device_sync)(void);

void ct_trace_start(void) {
    if (!events) ct_fatal("trace", "ct_trace_start without a span buffer (ct_trace_reserve)");
    atomic_store_explicit(&used, 0, memory_order_relaxed);
    atomic_store_explicit(&dropped, 0, memory_order_relaxed);
    origin_ns = now_ns();
    stop_ns = 0;
    atomic_store_explicit(&ct_trace_recording_, true, memory_order_release);
}

void ct_trace_stop(void) {
    atomic_store_explicit(&ct_trace_recording_, false, memory_order_release);
    stop_ns = now_ns();
}

int ct_trace_open_(ct_trace_cat cat, const char *name, const char *detail, const char *k0, int v0, const char *k1,
                   int v1) {
    int i = atomic_fetch_add_explicit(&used, 1, memory_order_relaxed);
    if (i >= capacity) {
        atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
        return -1;
    }
    if (my_tid < 0) my_tid = atomic_fetch_add_explicit(&next_tid, 1, memory_order_relaxed);
    ct_trace_event *e = &events[i];
    e->name = name;
    e->key[0] = k0;
    e->key[1] = k1;
    e->val[0] = v0;
    e->val[1] = v1;
    e->tid = (uint16_t)my_tid;
    e->cat = (uint8_t)cat;
    e->detail[0] = 0;
    if (detail) {
        size_t n = strnlen(detail, CT_TRACE_DETAIL - 1);
        memcpy(e->detail, detail, n);
        e->detail[n] = 0;
    }
    e->t1 = 0;
    if (device_sync) device_sync();  // the work launched before the span is not inside it
    e->t0 = now_ns();                // last: the span's own bookkeeping is not inside it
    return i;
}

void ct_trace_set_device_sync(void (*sync)(void)) { device_sync = sync; }

void ct_trace_close_(int h) {
    if (device_sync) device_sync();
    events[h].t1 = now_ns();
}

int ct_trace_count(void) {
    int n = atomic_load_explicit(&used, memory_order_relaxed);
    return n < capacity ? n : capacity;
}
const ct_trace_event *ct_trace_events(void) { return events; }
long ct_trace_dropped(void) { return atomic_load_explicit(&dropped, memory_order_relaxed); }

const char *ct_trace_cat_name(ct_trace_cat cat) {
    static const char *names[CT_TRACE_NCATS] = {"step", "action", "compute", "fsdp", "comm", "optim", "checkpoint",
                                                  "kernel"};
    return (unsigned)cat < CT_TRACE_NCATS ? names[cat] : "?";
}

// ------------------------------------------------------------------ the JSON writer

static void flush(ct_chrome_writer *w) {
    size_t off = 0;
    while (off < w->len && !w->err) {
        ssize_t n = write(w->fd, w->buf + off, w->len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) w->err = n < 0 ? errno : EIO;
        else off += (size_t)n;
    }
    w->len = 0;
}

// Appends formatted text. What does not fit in the rest of the buffer is formatted again after
// a flush; a piece longer than the whole buffer is cut (the pieces here are single events of a
// few hundred bytes).
__attribute__((format(printf, 2, 3))) static void put(ct_chrome_writer *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->buf + w->len, w->cap - w->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < w->cap - w->len) {
        w->len += (size_t)n;
        return;
    }
    flush(w);
    va_start(ap, fmt);
    n = vsnprintf(w->buf, w->cap, fmt, ap);
    va_end(ap);
    if (n >= 0) w->len = (size_t)n < w->cap ? (size_t)n : w->cap - 1;
}

// A JSON string body: quotes, backslashes and control characters escaped.
static void put_escaped(ct_chrome_writer *w, const char *s) {
    char tmp[256];
    size_t k = 0;
    for (; *s && k + 7 < sizeof tmp; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') tmp[k++] = '\\', tmp[k++] = (char)c;
        else if (c < 0x20) k += (size_t)snprintf(tmp + k, sizeof tmp - k, "\\u%04x", c);
        else tmp[k++] = (char)c;
    }
    tmp[k] = 0;
    put(w, "%s", tmp);
}

static void separator(ct_chrome_writer *w) {
    if (!w->first) put(w, ",\n");
    w->first = false;
}

ct_status ct_chrome_open(ct_chrome_writer *w, const char *path, char *buf, size_t cap) {
    *w = (ct_chrome_writer){.fd = -1, .buf = buf, .cap = cap, .first = true, .path = path};
    if (cap < 256) return ct_set_error("%s: trace writer buffer of %zu bytes is too small", path, cap);
    if (ct_file_open_write(path, "trace", CT_FILE_WRITE_TRUNC, &w->fd)) return CT_ERR;
    put(w, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    return CT_OK;
}

void ct_chrome_process_name(ct_chrome_writer *w, int pid, const char *name) {
    separator(w);
    put(w, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"ts\": 0, \"args\": {\"name\": \"", pid);
    put_escaped(w, name);
    put(w, "\"}}");
}

void ct_chrome_process_sort(ct_chrome_writer *w, int pid, int index) {
    separator(w);
    put(w, "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"ts\": 0, \"args\": {\"sort_index\": %d}}",
        pid, index);
}

void ct_chrome_thread_name(ct_chrome_writer *w, int pid, int tid, const char *name) {
    separator(w);
    put(w, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"ts\": 0, \"args\": {\"name\": \"", pid, tid);
    put_escaped(w, name);
    put(w, "\"}}");
}

void ct_chrome_complete(ct_chrome_writer *w, const char *name, const char *detail, const char *cat, int pid, int tid,
                        int64_t ts_ns, int64_t dur_ns, const char *args) {
    separator(w);
    put(w, "{\"name\": \"");
    put_escaped(w, name);
    if (detail && *detail) {
        put(w, " ");
        put_escaped(w, detail);
    }
    put(w, "\", \"cat\": \"");
    put_escaped(w, cat);
    // Whole nanoseconds as microseconds with three decimals: exact, so nesting survives.
    put(w, "\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %" PRId64 ".%03d, \"dur\": %" PRId64 ".%03d", pid, tid,
        ts_ns / 1000, (int)(ts_ns % 1000), dur_ns / 1000, (int)(dur_ns % 1000));
    if (args) put(w, ", \"args\": {%s}", args);
    put(w, "}");
}

void ct_chrome_raw(ct_chrome_writer *w, const char *object) {
    separator(w);
    put(w, "%s", object);
}

ct_status ct_chrome_close(ct_chrome_writer *w) {
    put(w, "\n]}\n");
    flush(w);
    int err = w->err;
    if (close(w->fd) != 0 && !err) err = errno;
    w->fd = -1;
    if (err) return ct_set_error("%s: write failed: %s", w->path, strerror(err));
    return CT_OK;
}

// ------------------------------------------------------------------ the recording as a file

ct_status ct_trace_write_chrome(const char *path, int pid, const char *process_name) {
    char buf[16384];
    ct_chrome_writer w;
    if (ct_chrome_open(&w, path, buf, sizeof buf)) return CT_ERR;
    ct_chrome_process_name(&w, pid, process_name);
    ct_chrome_process_sort(&w, pid, pid);
    int n = ct_trace_count();
    // Thread names for the tids that appear (tids are small: one per thread that opened a span).
    enum { MAX_NAMED = 64 };
    bool named[MAX_NAMED] = {0};
    for (int i = 0; i < n; i++) {
        int tid = events[i].tid;
        if (tid >= MAX_NAMED || named[tid]) continue;
        named[tid] = true;
        char tn[32] = "main";
        if (tid) snprintf(tn, sizeof tn, "thread %d", tid);
        ct_chrome_thread_name(&w, pid, tid, tn);
    }
    long lost = ct_trace_dropped();
    if (lost) {
        char m[160];
        snprintf(m, sizeof m,
                 "{\"name\": \"dropped_spans\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"ts\": 0, \"args\": "
                 "{\"count\": %ld, \"capacity\": %d}}",
                 pid, lost, capacity);
        ct_chrome_raw(&w, m);
    }
    int64_t end = stop_ns ? stop_ns : now_ns();
    for (int i = 0; i < n; i++) {
        const ct_trace_event *e = &events[i];
        int64_t t0 = e->t0 - origin_ns, t1 = (e->t1 ? e->t1 : end) - origin_ns;
        if (t0 < 0) t0 = 0;
        if (t1 < t0) t1 = t0;
        char args[160];
        int len = 0;
        for (int k = 0; k < 2; k++)
            if (e->key[k])
                len += snprintf(args + len, sizeof args - (size_t)len, "%s\"%s\": %d", len ? ", " : "", e->key[k],
                                (int)e->val[k]);
        if (e->detail[0] && e->cat == CT_TRACE_COMM)
            len += snprintf(args + len, sizeof args - (size_t)len, "%s\"group\": \"%s\"", len ? ", " : "", e->detail);
        if (!e->t1) len += snprintf(args + len, sizeof args - (size_t)len, "%s\"unfinished\": true", len ? ", " : "");
        ct_chrome_complete(&w, e->name, e->detail, ct_trace_cat_name((ct_trace_cat)e->cat), pid, e->tid, t0, t1 - t0,
                           len ? args : NULL);
    }
    return ct_chrome_close(&w);
}
