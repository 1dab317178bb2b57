// Profiling: the span recorder (core/trace.h), the Chrome trace files and
// memory snapshots a run writes (train/profiling.h), checked by a validator of the Chrome trace
// event format written here (its own rules; core/json only tokenises):
//   - a JSON array of events, or an object whose "traceEvents" is one;
//   - every event an object with a string name, ph in {B, E, X, i, M}, numbers pid, tid, ts;
//   - X events with a number dur >= 0, nested per (pid, tid): a span that starts inside
//     another ends inside it;
//   - B / E properly nested per (pid, tid) (an E closes the last open B, of the same name
//     when it has one), none left open;
//   - timestamps of B, E, X and i events never decreasing per (pid, tid), in file order.
// The validator itself is shown to reject each kind of broken trace.
//
// Cases: the recorder (off, nesting, arguments, threads, a full buffer, a span still open);
// a memory snapshot adding up to the accounting, also with backend-recorded bytes; the
// snapshot an allocation failure writes before the job ends; a profiled step that makes no heap
// call (single process, malloc interposed as in test_steady_alloc.c); nothing written with
// profiling off; and a 4-rank FSDP 2 x TP 2 run (mpirun) with profiling every 2nd of 4 steps:
// one valid trace per rank and profiled step, the expected spans (forward, backward, blocks,
// all_gather on fsdp, all_reduce on tp, reduce-scatters, gradient norm, optimizer, a checkpoint
// save), the SVG
// timeline with one rect per span, and each rank's memory snapshot equal to its accounting;
// and a 4-rank pipeline 2 x context parallel 2 run: its pipeline actions and pp / cp waits.
#include <dirent.h>
#include <ftw.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/json.h"
#include "core/memory.h"
#include "core/trace.h"
#include "fatal_child.h"
#include "heap_count.h"
#include "mpi_test.h"
#include "train/profiling.h"
#include "train/trainer.h"

// ---- every malloc-family call in the process passes through here (heap_count.h)
static long alloc_calls;
static void heap_call_counted(void) { __atomic_fetch_add(&alloc_calls, 1, __ATOMIC_RELAXED); }
static long calls_now(void) { return __atomic_load_n(&alloc_calls, __ATOMIC_RELAXED); }
#if defined(__SANITIZE_ADDRESS__)
// The allocation-failure case asks for 2^60 bytes: under ASan that must return NULL, as malloc
// does, instead of ending the process with ASan's own report.
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

// ------------------------------------------------------------------ the validator

enum { MAX_LANES = 64, MAX_DEPTH = 128 };

typedef struct {
    double pid, tid, last_ts;
    int nx, nb;
    double x_end[MAX_DEPTH];      // open X spans' ends
    const char *b_name[MAX_DEPTH];  // open B events' names
} lane;

typedef struct {
    ct_json *doc;            // kept for the caller's own look-ups (free with trace_free)
    const ct_json *events;   // the event array
    int n_events, n_complete;
    char why[300];           // "" when valid
} trace;

static const char *jstr(const ct_json *o, const char *k) {
    const ct_json *v = ct_json_get(o, k);
    return v && v->type == CT_JSON_STRING ? v->string : NULL;
}
static bool jnum(const ct_json *o, const char *k, double *out) {
    const ct_json *v = ct_json_get(o, k);
    if (!v || v->type != CT_JSON_NUMBER) return false;
    *out = v->number;
    return true;
}

static lane *lane_of(lane *lanes, int *n, double pid, double tid) {
    for (int i = 0; i < *n; i++)
        if (lanes[i].pid == pid && lanes[i].tid == tid) return &lanes[i];
    if (*n == MAX_LANES) return NULL;
    lanes[*n] = (lane){.pid = pid, .tid = tid, .last_ts = -INFINITY};
    return &lanes[(*n)++];
}

#define BAD(...)                                               \
    do {                                                       \
        snprintf(t->why, sizeof t->why, __VA_ARGS__);          \
        return false;                                          \
    } while (0)

// Validates path; t->why says what is wrong (and the function returns false).
static bool check_trace(const char *path, trace *t) {
    memset(t, 0, sizeof *t);
    t->doc = ct_json_read_file(path, "trace", 1u << 30);
    if (!t->doc) BAD("not JSON: %s", ct_last_error());
    const ct_json *ev = t->doc->type == CT_JSON_ARRAY ? t->doc : ct_json_get(t->doc, "traceEvents");
    if (!ev || ev->type != CT_JSON_ARRAY) BAD("neither an event array nor an object with traceEvents");
    t->events = ev;
    static lane lanes[MAX_LANES];
    int n_lanes = 0;
    const double eps = 1e-6;  // microseconds: far below the files' nanosecond resolution
    for (int i = 0; i < ev->n; i++) {
        const ct_json *e = &ev->items[i];
        if (e->type != CT_JSON_OBJECT) BAD("event %d is not an object", i);
        const char *name = jstr(e, "name"), *ph = jstr(e, "ph");
        double pid, tid, ts, dur;
        if (!name) BAD("event %d has no name", i);
        if (!ph || strlen(ph) != 1 || !strchr("BEXiM", ph[0])) BAD("event %d (%s): ph '%s' not in B E X i M", i, name, ph ? ph : "");
        if (!jnum(e, "pid", &pid) || !jnum(e, "tid", &tid) || !jnum(e, "ts", &ts))
            BAD("event %d (%s) lacks pid, tid or ts", i, name);
        t->n_events++;
        if (ph[0] == 'M') continue;
        lane *l = lane_of(lanes, &n_lanes, pid, tid);
        if (!l) BAD("more than %d (pid, tid) lanes", MAX_LANES);
        if (ts < l->last_ts) BAD("event %d (%s): ts %.3f before %.3f on pid %g tid %g", i, name, ts, l->last_ts, pid, tid);
        l->last_ts = ts;
        if (ph[0] == 'X') {
            if (!jnum(e, "dur", &dur) || dur < 0) BAD("event %d (%s): X without a dur >= 0", i, name);
            while (l->nx && l->x_end[l->nx - 1] <= ts + eps) l->nx--;
            if (l->nx && ts + dur > l->x_end[l->nx - 1] + eps)
                BAD("event %d (%s): [%.3f, %.3f] overlaps a span ending at %.3f without nesting in it", i, name, ts,
                    ts + dur, l->x_end[l->nx - 1]);
            if (l->nx == MAX_DEPTH) BAD("spans nested deeper than %d", MAX_DEPTH);
            l->x_end[l->nx++] = ts + dur;
            t->n_complete++;
        } else if (ph[0] == 'B') {
            if (l->nb == MAX_DEPTH) BAD("B events nested deeper than %d", MAX_DEPTH);
            l->b_name[l->nb++] = name;
        } else if (ph[0] == 'E') {
            if (!l->nb) BAD("event %d: E (%s) without an open B on pid %g tid %g", i, name, pid, tid);
            const char *open = l->b_name[--l->nb];
            if (*name && strcmp(name, open)) BAD("event %d: E (%s) closes B (%s)", i, name, open);
        }
    }
    for (int k = 0; k < n_lanes; k++)
        if (lanes[k].nb) BAD("pid %g tid %g: B (%s) never ended", lanes[k].pid, lanes[k].tid, lanes[k].b_name[lanes[k].nb - 1]);
    return true;
}

static void trace_free(trace *t) {
    ct_json_free(t->doc);
    t->doc = NULL;
}

// X events whose name is `name` or starts with `name` and a space ("forward" matches "forward 0F1").
static int count_named(const trace *t, const char *name) {
    int n = 0;
    size_t len = strlen(name);
    for (int i = 0; t->events && i < t->events->n; i++) {
        const ct_json *e = &t->events->items[i];
        const char *nm = jstr(e, "name"), *ph = jstr(e, "ph");
        if (nm && ph && !strcmp(ph, "X") && !strncmp(nm, name, len) && (nm[len] == 0 || nm[len] == ' ')) n++;
    }
    return n;
}

// The first X event so named.
static const ct_json *find_named(const trace *t, const char *name) {
    for (int i = 0; t->events && i < t->events->n; i++) {
        const ct_json *e = &t->events->items[i];
        const char *nm = jstr(e, "name"), *ph = jstr(e, "ph");
        if (nm && ph && !strcmp(ph, "X") && !strcmp(nm, name)) return e;
    }
    return NULL;
}

// ---- per-operation spans (category "kernel", model/llama3/block.c, model/stage.c, train/adamw.c)

// Every operation a plain fp32 training step runs (no fused kernels, combined backward).
static const char *const kernel_spans[] = {
    "attention.wqkv.forward",  "attention.wo.forward",   "feed_forward.w13.forward", "feed_forward.w2.forward",
    "attention.wqkv.backward", "attention.wo.backward",  "feed_forward.w13.backward", "feed_forward.w2.backward",
    "attention.forward",       "attention.backward",     "rmsnorm.forward",          "rmsnorm.backward",
    "rope.forward",            "rope.backward",          "swiglu.forward",           "swiglu.backward",
    "residual_add.forward",    "tok_embeddings.forward", "tok_embeddings.backward",
    "output+cross_entropy.forward_backward", "adamw.update",
};

static bool inside(const ct_json *in, const ct_json *out) {
    double a0, ad, b0, bd, at, bt;
    if (!jnum(in, "ts", &a0) || !jnum(in, "dur", &ad) || !jnum(out, "ts", &b0) || !jnum(out, "dur", &bd) ||
        !jnum(in, "tid", &at) || !jnum(out, "tid", &bt))
        return false;
    return at == bt && a0 >= b0 - 1e-6 && a0 + ad <= b0 + bd + 1e-6;
}
static bool layer_of(const ct_json *e, double *layer) { return jnum(ct_json_get(e, "args"), "layer", layer); }
static bool is_x(const ct_json *e) { return jstr(e, "ph") && !strcmp(jstr(e, "ph"), "X"); }

// A profiled training step's trace (one micro-batch, `layers` blocks) has a span per operation:
// each name above, each linear layer once per block and pass (twice forward where `recompute`:
// a full recompute runs the forward again, inside "block.recompute"); every per-operation span
// of a block nests in a block span of its layer, the others in the head's, the embedding's or
// the optimizer's span; and the spans inside one block's spans fit the span buffer's planning.
static void check_kernel_spans(const trace *tr, int layers, bool recompute, int rank) {
    for (size_t k = 0; k < sizeof kernel_spans / sizeof kernel_spans[0]; k++)
        CHECK(count_named(tr, kernel_spans[k]) > 0, "rank %d: no '%s' span", rank, kernel_spans[k]);
    static const char *const linears[] = {"attention.wqkv", "attention.wo", "feed_forward.w13", "feed_forward.w2"};
    for (int l = 0; l < 4; l++) {
        char fwd[64], bwd[64];
        snprintf(fwd, sizeof fwd, "%s.forward", linears[l]);
        snprintf(bwd, sizeof bwd, "%s.backward", linears[l]);
        CHECK(count_named(tr, fwd) == layers * (recompute ? 2 : 1) && count_named(tr, bwd) == layers,
              "rank %d: %d %s, %d %s for %d blocks", rank, count_named(tr, fwd), fwd, count_named(tr, bwd), bwd,
              layers);
    }
    int n_kernel = 0, in_recompute = 0, per_block = 0;
    const ct_json *ev = tr->events;
    for (int i = 0; ev && i < ev->n; i++) {
        const ct_json *e = &ev->items[i];
        if (!is_x(e) || strcmp(jstr(e, "cat"), "kernel")) continue;
        n_kernel++;
        double layer, bl;
        bool nested = false;
        for (int j = 0; j < ev->n && !nested; j++) {
            const ct_json *b = &ev->items[j];
            const char *bn = jstr(b, "name");
            if (!is_x(b) || j == i || !inside(e, b)) continue;
            if (layer_of(e, &layer))
                nested = !strncmp(bn, "block.", 6) && layer_of(b, &bl) && bl == layer;
            else
                nested = !strcmp(jstr(b, "cat"), "compute") || !strcmp(bn, "optimizer");
            if (nested && !strcmp(bn, "block.recompute")) in_recompute++;
        }
        CHECK(nested, "rank %d: '%s' (event %d) is not inside its block's, the head's or the optimizer's span", rank,
              jstr(e, "name"), i);
    }
    CHECK(!recompute || in_recompute >= layers * 11, "rank %d: %d operation spans inside block.recompute", rank,
          in_recompute);
    // Everything recorded inside layer 0's block spans (theirs included): one micro-batch.
    for (int j = 0; ev && j < ev->n; j++) {
        const ct_json *b = &ev->items[j];
        double bl;
        if (!is_x(b) || strncmp(jstr(b, "name"), "block.", 6) || !layer_of(b, &bl) || bl != 0) continue;
        for (int i = 0; i < ev->n; i++) per_block += is_x(&ev->items[i]) && inside(&ev->items[i], b);
    }
    CHECK(per_block > 0 && per_block <= CT_PROFILE_BLOCK_SPANS, "rank %d: %d spans in block 0's spans, planned %d",
          rank, per_block, CT_PROFILE_BLOCK_SPANS);
    printf("  rank %d: %d spans, %d of them per operation, %d in block 0%s\n", rank, tr->n_complete, n_kernel,
           per_block, recompute ? " (full recompute)" : "");
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc((size_t)n + 1, 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

static int count_of(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) { return remove(p); }
static void rm_tree(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

// The validator rejects each kind of broken trace, naming what is wrong, and accepts both forms.
static void validator_rejects_broken_traces(void) {
    static const struct {
        const char *text, *why;
    } cases[] = {
        {"{\"traceEvents\": [", "not JSON"},
        {"{\"events\": []}", "neither an event array"},
        {"[{\"name\": \"a\", \"ph\": \"Q\", \"pid\": 0, \"tid\": 0, \"ts\": 0}]", "not in B E X i M"},
        {"[{\"name\": \"a\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"dur\": 1}]", "lacks pid, tid or ts"},
        {"[{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 0, \"dur\": 1}]", "has no name"},
        {"[{\"name\": \"a\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 0, \"dur\": -1}]", "X without a dur >= 0"},
        {"[{\"name\": \"a\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 0, \"dur\": 10},"
         " {\"name\": \"b\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 5, \"dur\": 10}]",
         "without nesting"},
        {"[{\"name\": \"a\", \"ph\": \"i\", \"pid\": 0, \"tid\": 0, \"ts\": 5},"
         " {\"name\": \"b\", \"ph\": \"i\", \"pid\": 0, \"tid\": 0, \"ts\": 4}]",
         "before"},
        {"[{\"name\": \"a\", \"ph\": \"E\", \"pid\": 0, \"tid\": 0, \"ts\": 1}]", "without an open B"},
        {"[{\"name\": \"a\", \"ph\": \"B\", \"pid\": 0, \"tid\": 0, \"ts\": 1},"
         " {\"name\": \"b\", \"ph\": \"E\", \"pid\": 0, \"tid\": 0, \"ts\": 2}]",
         "closes B (a)"},
        {"[{\"name\": \"a\", \"ph\": \"B\", \"pid\": 0, \"tid\": 0, \"ts\": 1}]", "never ended"},
    };
    char path[] = "/tmp/ct_test_trace_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    trace t;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        write_text(path, cases[k].text);
        CHECK(!check_trace(path, &t) && strstr(t.why, cases[k].why), "case %zu: want \"%s\", got \"%s\"", k,
              cases[k].why, t.why);
        trace_free(&t);
    }
    // Valid: the array form, B/E nested in an X, the same ts twice, other tids interleaved.
    write_text(path, "[{\"name\": \"p\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"ts\": 0},"
                     " {\"name\": \"a\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"dur\": 10},"
                     " {\"name\": \"b\", \"ph\": \"B\", \"pid\": 0, \"tid\": 0, \"ts\": 2},"
                     " {\"name\": \"x\", \"ph\": \"X\", \"pid\": 0, \"tid\": 1, \"ts\": 0, \"dur\": 50},"
                     " {\"name\": \"b\", \"ph\": \"E\", \"pid\": 0, \"tid\": 0, \"ts\": 2},"
                     " {\"name\": \"c\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 11, \"dur\": 0}]");
    CHECK(check_trace(path, &t), "%s", t.why);
    CHECK(t.n_events == 6 && t.n_complete == 3, "%d events, %d complete", t.n_events, t.n_complete);
    trace_free(&t);
    unlink(path);
}

// ------------------------------------------------------------------ the recorder

static void *other_thread(void *arg) {
    int h = ct_trace_begin(CT_TRACE_CKPT, "writer");
    ct_trace_end(h);
    return NULL;
}

// A device's synchronize runs at both ends of every span recorded, before the clock is read,
// and never while not recording.
static int syncs;
static void count_sync(void) { syncs++; }
static void device_sync_brackets_every_span(void) {
    ct_trace_reserve(8);
    ct_trace_set_device_sync(count_sync);
    syncs = 0;
    ct_trace_end(ct_trace_begin(CT_TRACE_KERNEL, "not recorded"));
    CHECK(syncs == 0, "%d synchronizes while not recording", syncs);
    ct_trace_start();
    int a = ct_trace_begin(CT_TRACE_STEP, "outer");
    ct_trace_end(ct_trace_begin(CT_TRACE_KERNEL, "inner"));
    ct_trace_end(a);
    ct_trace_stop();
    ct_trace_set_device_sync(NULL);
    CHECK(syncs == 4, "%d synchronizes for 2 spans (expected 4)", syncs);
}

static void recorder_spans_nest_and_count(void) {
    CHECK(!ct_trace_on() && ct_trace_begin(CT_TRACE_STEP, "off") == -1, "a span recorded while off");
    ct_trace_reserve(8);
    CHECK(ct_trace_capacity() >= 8, "capacity %d", ct_trace_capacity());
    int cap = ct_trace_capacity();
    ct_trace_start();
    CHECK(ct_trace_on(), "not recording after start");
    int a = ct_trace_begin(CT_TRACE_STEP, "outer");
    int b = ct_trace_begin2(CT_TRACE_COMPUTE, "block.forward", "layer", 3, "mb", 1);
    int c = ct_trace_begin_on(CT_TRACE_COMM, "all_reduce", "a_group_name_longer_than_13");
    ct_trace_end(c);
    ct_trace_end(b);
    pthread_t th;
    pthread_create(&th, NULL, other_thread, NULL);
    pthread_join(th, NULL);
    ct_trace_end(a);
    // A span left open at the stop (the fillers nest in it), then past the capacity: refused
    // and counted.
    int open = ct_trace_begin(CT_TRACE_OPTIM, "still_open");
    int extra = cap - 5, refused = 0;
    for (int i = 0; i < extra + 3; i++) {
        int h = ct_trace_begin(CT_TRACE_STEP, "filler");
        refused += h < 0;
        ct_trace_end(h);
    }
    ct_trace_stop();
    CHECK(open >= 0 && refused == 3 && ct_trace_dropped() == 3, "refused %d, dropped %ld", refused, ct_trace_dropped());
    CHECK(!ct_trace_on() && ct_trace_begin(CT_TRACE_STEP, "after") == -1, "recording after stop");
    CHECK(ct_trace_count() == cap, "count %d of %d", ct_trace_count(), cap);
    const ct_trace_event *e = ct_trace_events();
    CHECK(!strcmp(e[a].name, "outer") && !strcmp(e[b].name, "block.forward") && !strcmp(e[c].name, "all_reduce"),
          "names");
    CHECK(e[a].t0 <= e[b].t0 && e[b].t0 <= e[c].t0 && e[c].t1 <= e[b].t1 && e[b].t1 <= e[a].t1 && e[c].t0 <= e[c].t1,
          "times do not nest");
    CHECK(!strcmp(e[b].key[0], "layer") && e[b].val[0] == 3 && !strcmp(e[b].key[1], "mb") && e[b].val[1] == 1, "args");
    CHECK(!strcmp(e[c].detail, "a_group_name_") && e[c].cat == CT_TRACE_COMM, "detail cut to 13 bytes: %s", e[c].detail);
    CHECK(e[open].t1 == 0, "a span open at the stop has no end");
    int writer = -1;
    for (int i = 0; i < ct_trace_count(); i++)
        if (!strcmp(e[i].name, "writer")) writer = i;
    CHECK(writer >= 0 && e[writer].tid != e[a].tid, "the other thread's span has its own tid");

    char path[] = "/tmp/ct_test_trace_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(ct_trace_write_chrome(path, 7, "rank 7: test") == CT_OK, "%s", ct_last_error());
    trace t;
    CHECK(check_trace(path, &t), "%s", t.why);
    CHECK(t.n_complete == cap, "%d complete events for %d spans", t.n_complete, cap);
    const ct_json *blk = find_named(&t, "block.forward"), *ar = find_named(&t, "all_reduce a_group_name_"),
                  *so = find_named(&t, "still_open");
    double v;
    CHECK(blk && jnum(ct_json_get(blk, "args"), "layer", &v) && v == 3, "block.forward args");
    CHECK(ar && !strcmp(jstr(ar, "cat"), "comm") && jstr(ct_json_get(ar, "args"), "group"), "comm event and group");
    CHECK(so && ct_json_get(ct_json_get(so, "args"), "unfinished"), "unfinished span marked");
    char *text = slurp(path);
    CHECK(text && strstr(text, "\"dropped_spans\"") && strstr(text, "\"count\": 3"), "dropped spans noted");
    CHECK(text && strstr(text, "\"name\": \"rank 7: test\"") && strstr(text, "\"name\": \"thread 1\""),
          "process and thread names");
    free(text);
    trace_free(&t);
    CHECK(ct_trace_write_chrome("/nonexistent/dir/t.json", 0, "x") == CT_ERR &&
              strstr(ct_last_error(), "/nonexistent/dir/t.json"),
          "write error: %s", ct_last_error());
    unlink(path);
}

// ------------------------------------------------------------------ memory snapshots

typedef struct {
    size_t current[CT_MEM_NCATEGORIES], listed[CT_MEM_NCATEGORIES], unlisted[CT_MEM_NCATEGORIES];
    int buffers[CT_MEM_NCATEGORIES], lines[CT_MEM_NCATEGORIES], categories;
    char header[300];
} snapshot;

static int cat_index(const char *name) {
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++)
        if (!strcmp(name, ct_mem_category_name((ct_mem_category)k))) return k;
    return -1;
}

// Parses a snapshot; false (with why) on a line that is none of the documented kinds.
static bool read_snapshot(const char *path, snapshot *s, char *why, size_t n) {
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "r");
    if (!f) return snprintf(why, n, "cannot open %s", path), false;
    char line[1024], name[64];
    size_t a, b;
    int k, bufs;
    while (fgets(line, sizeof line, f)) {
        if (!s->header[0]) snprintf(s->header, sizeof s->header, "%.299s", line);
        if (line[0] == '#' || !strncmp(line, "total ", 6)) continue;
        if (sscanf(line, "category %63s current %zu peak %zu buffers %d", name, &a, &b, &bufs) == 4 &&
            (k = cat_index(name)) >= 0) {
            s->current[k] = a, s->buffers[k] = bufs, s->categories++;
        } else if (sscanf(line, "buffer %63s %zu", name, &a) == 2 && (k = cat_index(name)) >= 0) {
            s->listed[k] += a, s->lines[k]++;
        } else if (sscanf(line, "unlisted %63s %zu", name, &a) == 2 && (k = cat_index(name)) >= 0) {
            s->unlisted[k] += a;
        } else {
            fclose(f);
            return snprintf(why, n, "unexpected line: %s", line), false;
        }
    }
    fclose(f);
    return true;
}

// Every category: its buffers (and unlisted bytes) add up to its total, which is the accounting's.
static void check_snapshot_sums(const snapshot *s, const char *what) {
    CHECK(s->categories == CT_MEM_NCATEGORIES, "%s: %d categories", what, s->categories);
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++) {
        const char *c = ct_mem_category_name((ct_mem_category)k);
        CHECK(s->listed[k] + s->unlisted[k] == s->current[k], "%s: %s buffers %zu + unlisted %zu != total %zu", what, c,
              s->listed[k], s->unlisted[k], s->current[k]);
        CHECK(s->current[k] == ct_mem_current((ct_mem_category)k), "%s: %s total %zu, accounting %zu", what, c,
              s->current[k], ct_mem_current((ct_mem_category)k));
        CHECK(s->lines[k] == s->buffers[k], "%s: %s: %d buffer lines, header says %d", what, c, s->lines[k],
              s->buffers[k]);
    }
}

static void snapshot_adds_up(void) {
    int live0 = ct_mem_registered();
    void *p = ct_mem_alloc(CT_MEM_PARAMS, 1000), *g = ct_mem_alloc(CT_MEM_GRADS, 3000), *q = ct_mem_alloc(CT_MEM_PARAMS, 5000);
    CHECK(ct_mem_registered() == live0 + 3, "registered %d, was %d", ct_mem_registered(), live0);
    ct_mem_record_on(CT_HOST, CT_MEM_COMM, 777);  // a backend's own bytes: unlisted
    char path[] = "/tmp/ct_test_snapshot_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(ct_mem_snapshot_write(path, "a test") == CT_OK, "%s", ct_last_error());
    snapshot s;
    char why[1100] = "";
    CHECK(read_snapshot(path, &s, why, sizeof why), "%s", why);
    check_snapshot_sums(&s, "snapshot");
    CHECK(s.unlisted[CT_MEM_COMM] == 777, "comm unlisted %zu", s.unlisted[CT_MEM_COMM]);
    CHECK(strstr(s.header, "a test"), "header: %s", s.header);
    char *text = slurp(path);
    // Largest first within a category, each named by the function and line that asked for it.
    char *big = text ? strstr(text, "buffer params 5000 snapshot_adds_up tests/test_trace.c:") : NULL,
         *small = text ? strstr(text, "buffer params 1000 snapshot_adds_up tests/test_trace.c:") : NULL;
    CHECK(big && small && big < small, "params buffers not listed largest first:\n%s", text ? text : "");
    CHECK(text && strstr(text, "buffer grads 3000 snapshot_adds_up"), "grads buffer");
    free(text);
    ct_mem_record_on(CT_HOST, CT_MEM_COMM, -777);
    ct_mem_free(p);
    ct_mem_free(g);
    ct_mem_free(q);
    CHECK(ct_mem_registered() == live0, "registry after free %d, was %d", ct_mem_registered(), live0);
    CHECK(ct_mem_snapshot_write("/nonexistent/dir/s.txt", "x") == CT_ERR && strstr(ct_last_error(), "/nonexistent"),
          "%s", ct_last_error());
    unlink(path);
}

static char oom_path[64];

static void oom_child(void *arg) {
    ct_mem_snapshot_on_failure(oom_path);
    void *keep = ct_mem_alloc(CT_MEM_PARAMS, 4096);
    (void)keep;
    ct_mem_alloc(CT_MEM_OTHER, (size_t)1 << 60);  // fails: the snapshot, then the fatal line
}

static void allocation_failure_writes_snapshot(void) {
    snprintf(oom_path, sizeof oom_path, "/tmp/ct_test_oom_%d.txt", (int)getpid());
    unlink(oom_path);
    char err[4096];
    int rc = ct_test_run_fatal(oom_child, NULL, err, sizeof err);
    CHECK(rc != 0 && rc != -1, "exit %d", rc);
    CHECK(strstr(err, "out of memory: allocation of 1152921504606846976 bytes for other in oom_child (tests/test_trace.c:") &&
              strstr(err, "memory snapshot written to") && strstr(err, oom_path),
          "message: %s", err);
    char *text = slurp(oom_path);
    CHECK(text && strstr(text, "# ctitan memory snapshot: allocation of 1152921504606846976 bytes for other"),
          "snapshot header: %s", text ? text : "(no file)");
    CHECK(text && strstr(text, "buffer params 4096 oom_child tests/test_trace.c:"), "the live buffer is listed");
    free(text);
    unlink(oom_path);
}

// ------------------------------------------------------------------ a profiled trainer, one process

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) ct_fatal("test", "%s", ct_last_error());
}

static void tiny(ct_config *c, const char *dump) {
    ct_config_defaults(c);
    const char *kv[][2] = {
        {"model.n_layers", "2"},     {"model.dim", "64"},         {"model.n_heads", "4"},
        {"model.n_kv_heads", "2"},   {"model.ffn_hidden_dim", "128"}, {"model.vocab_size", "256"},
        {"micro_batch_size", "2"},   {"training.seq_len", "32"},  {"training.dataset", "synthetic"},
        {"training.steps", "100"},   {"metrics.peak_tflops", "1"}, {"training.seed", "3"},
        {"comm.init_timeout_seconds", "30"}, {"comm.train_timeout_seconds", "30"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) set(c, kv[i][0], kv[i][1]);
    set(c, "job.dump_folder", dump);
}

// Recording a step and writing its trace make no heap call; with profiling off nothing is
// written at all.
static void profiled_step_makes_no_heap_call(void) {
    char dump[] = "/tmp/ct_test_prof_XXXXXX";
    CHECK(mkdtemp(dump), "mkdtemp");
    ct_config c;
    tiny(&c, dump);
    set(&c, "profiling.enable_profiling", "true");
    set(&c, "profiling.profile_freq", "1");
    set(&c, "activation_checkpoint.mode", "full");  // the recompute's per-operation spans too
    // Two threads whatever OMP_NUM_THREADS says, as tests/test_steady_alloc.c: with one, libgomp
    // allocates a team of one for every parallel region of the kernels (not the profiler's doing).
    omp_set_num_threads(2);
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) {
        CHECK(0, "init: %s", ct_last_error());
        return;
    }
    char path[1200];
    long calls = 0;
    for (int i = 0; i < 4; i++) {
        long c0 = calls_now();
        ct_profiler_step_begin(&t.prof, t.step);
        ct_trainer_step(&t);
        ct_status st = ct_profiler_write_trace(&t.prof, path, sizeof path);
        if (i >= 2) calls += calls_now() - c0;  // after two warm-up steps
        CHECK(st == CT_OK, "%s", ct_last_error());
    }
    CHECK(calls == 0, "%ld heap calls in 2 profiled steps (recording and writing the trace)", calls);
    trace tr;
    CHECK(check_trace(path, &tr), "%s: %s", path, tr.why);
    CHECK(strstr(path, "/iteration_4/rank0_trace.json") && count_named(&tr, "block.backward") == 2 &&
              count_named(&tr, "block.recompute") == 2 && count_named(&tr, "optimizer") == 1,
          "%s: %d block.backward", path, count_named(&tr, "block.backward"));
    check_kernel_spans(&tr, 2, true, 0);
    CHECK(ct_trace_dropped() == 0 && ct_trace_count() == tr.n_complete && ct_trace_count() < ct_trace_capacity(),
          "%d spans, %ld dropped, capacity %d", ct_trace_count(), ct_trace_dropped(), ct_trace_capacity());
    trace_free(&tr);
    ct_trainer_free(&t);
    rm_tree(dump);

    // Off: no span, no folder.
    CHECK(mkdtemp(strcpy(dump, "/tmp/ct_test_prof_XXXXXX")), "mkdtemp");
    tiny(&c, dump);
    if (ct_trainer_init(&t, &c, NULL)) {
        CHECK(0, "init: %s", ct_last_error());
        return;
    }
    for (int i = 0; i < 2; i++) {
        ct_profiler_step_begin(&t.prof, t.step);
        ct_trainer_step(&t);
        CHECK(!ct_trace_on(), "recording with profiling off");
        ct_profiler_step_end(&t.prof, t.step);
    }
    char folder[1100];
    snprintf(folder, sizeof folder, "%s/profile_traces", dump);
    struct stat sb;
    CHECK(stat(folder, &sb) != 0, "%s written with profiling off", folder);
    ct_trainer_free(&t);
    rm_tree(dump);
}

// ------------------------------------------------------------------ 4 ranks: FSDP 2 x TP 2

static void fsdp2_tp2_profile(void) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char dump[64] = "/tmp/ct_test_prof4_XXXXXX";
    int made = rank == 0 ? mkdtemp(dump) != NULL : 1;
    MPI_Bcast(&made, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(dump, sizeof dump, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK(made, "mkdtemp");
    if (!made) return;
    ct_config c;
    tiny(&c, dump);
    set(&c, "training.steps", "4");
    set(&c, "parallelism.data_shard_degree", "2");
    set(&c, "parallelism.compute_parallel_degree", "2");
    set(&c, "profiling.enable_profiling", "true");
    set(&c, "profiling.profile_freq", "2");
    set(&c, "profiling.enable_memory_snapshot", "true");
    set(&c, "checkpoint.enable", "true");  // a save at step 2, inside the profiled iteration
    set(&c, "checkpoint.interval", "2");
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) {
        CHECK(0, "init: %s", ct_last_error());
        return;
    }
    CHECK(ct_trainer_run(&t) == 0, "run failed");

    // Every 2nd step is profiled: iteration_2 and iteration_4, nothing for 1 and 3.
    char path[1200];
    struct stat sb;
    for (int s = 1; s <= 4; s++) {
        snprintf(path, sizeof path, "%s/profile_traces/iteration_%d/rank%d_trace.json", dump, s, rank);
        CHECK((stat(path, &sb) == 0) == (s % 2 == 0), "%s %s", path, s % 2 ? "written" : "missing");
    }
    snprintf(path, sizeof path, "%s/profile_traces/iteration_2/rank%d_trace.json", dump, rank);
    trace tr;
    CHECK(check_trace(path, &tr), "%s: %s", path, tr.why);
    static const char *const want[] = {"step",  "data", "forward", "backward", "block.forward", "block.backward",
                                       "embedding.forward", "head.forward_loss", "fsdp.all_gather",
                                       "fsdp.reduce_scatter", "all_gather fsdp", "reduce_scatter fsdp",
                                       "all_reduce tp", "all_reduce world", "grad_norm", "optimizer", "reduce_grads",
                                       "checkpoint.save"};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        CHECK(count_named(&tr, want[k]) > 0, "rank %d: no '%s' span", rank, want[k]);
    // One micro-batch, 2 blocks: each block once forward and once backward; one optimizer step.
    CHECK(count_named(&tr, "block.forward") == 2 && count_named(&tr, "block.backward") == 2 &&
              count_named(&tr, "forward") == 1 && count_named(&tr, "optimizer") == 1,
          "rank %d: block.forward %d, block.backward %d, forward %d", rank, count_named(&tr, "block.forward"),
          count_named(&tr, "block.backward"), count_named(&tr, "forward"));
    check_kernel_spans(&tr, 2, false, rank);
    const ct_json *ag = find_named(&tr, "all_gather fsdp"), *ar = find_named(&tr, "all_reduce tp");
    CHECK(ag && !strcmp(jstr(ag, "cat"), "comm") && !strcmp(jstr(ct_json_get(ag, "args"), "group"), "fsdp"),
          "all_gather's group");
    CHECK(ar && !strcmp(jstr(ct_json_get(ar, "args"), "group"), "tp"), "all_reduce's group");
    char *text = slurp(path);
    char want_pid[64];
    snprintf(want_pid, sizeof want_pid, "\"pid\": %d,", rank);
    CHECK(text && count_of(text, "\"pid\": ") == count_of(text, want_pid), "rank %d: events of another pid", rank);
    CHECK(text && !strstr(text, "dropped_spans"), "rank %d: spans dropped (the buffer was full)", rank);
    free(text);
    trace_free(&tr);

    // Rank 0's SVG: a lane per rank, one rect per main-thread span that lasted, of every rank.
    if (rank == 0) {
        int spans = 0;
        for (int r = 0; r < 4; r++) {
            snprintf(path, sizeof path, "%s/profile_traces/iteration_2/rank%d_trace.json", dump, r);
            trace o;
            CHECK(check_trace(path, &o), "%s: %s", path, o.why);
            for (int i = 0; o.events && i < o.events->n; i++) {
                double tid, dur;
                const ct_json *e = &o.events->items[i];
                if (!strcmp(jstr(e, "ph"), "X") && jnum(e, "tid", &tid) && tid == 0 && jnum(e, "dur", &dur) && dur > 0)
                    spans++;
            }
            trace_free(&o);
        }
        snprintf(path, sizeof path, "%s/profile_traces/iteration_2/timeline.svg", dump);
        char *svg = slurp(path);
        CHECK(svg && !strncmp(svg, "<svg ", 5) && strstr(svg, "</svg>\n"), "an SVG document at %s", path);
        CHECK(svg && strstr(svg, ">rank 0<") && strstr(svg, ">rank 3<") && !strstr(svg, ">rank 4<"), "4 lanes");
        CHECK(svg && count_of(svg, "<title>") == spans, "%d rects for %d spans", count_of(svg, "<title>"), spans);
        CHECK(svg && strstr(svg, "fill=\"#e15759\" stroke=\"white\" stroke-width=\"0.5\"><title>all_gather fsdp"), "comm waits in the comm colour");
        free(svg);
    }

    // The memory snapshot after step 1: every category's buffers add up to the accounting,
    // which has not moved since (the step allocates nothing).
    snprintf(path, sizeof path, "%s/memory_snapshot/rank%d.txt", dump, rank);
    snapshot s;
    char why[1100] = "";
    CHECK(read_snapshot(path, &s, why, sizeof why), "%s", why);
    check_snapshot_sums(&s, path);
    char head[64];
    snprintf(head, sizeof head, "rank %d of 4, end of step 1", rank);
    CHECK(strstr(s.header, head), "header: %s", s.header);
    ct_trainer_free(&t);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && !ct_test_case_failed) rm_tree(dump);
    if (rank == 0 && ct_test_case_failed) printf("  outputs kept in %s\n", dump);
}

// Any span whose name ends with " <group>" (a communication wait on that group).
static int count_on_group(const trace *tr, const char *group) {
    int n = 0;
    size_t g = strlen(group);
    for (int i = 0; tr->events && i < tr->events->n; i++) {
        const char *name = jstr(&tr->events->items[i], "name");
        size_t l = strlen(name);
        n += l > g && name[l - g - 1] == ' ' && !strcmp(name + l - g, group);
    }
    return n;
}

// A 4-rank pipeline 2 x context parallel 2 run, every step profiled: each rank's trace is valid
// and shows its pipeline actions (2 micro-batches through its one stage: two forwards and two
// backwards, the sends and receives of its side of the pipe) and waits on the pp and cp groups.
static void pp2_cp2_profile(void) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char dump[64] = "/tmp/ct_test_profpp_XXXXXX";
    int made = rank == 0 ? mkdtemp(dump) != NULL : 1;
    MPI_Bcast(&made, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(dump, sizeof dump, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK(made, "mkdtemp");
    if (!made) return;
    ct_config c;
    tiny(&c, dump);
    set(&c, "training.steps", "1");
    set(&c, "micro_batch_size", "1");
    set(&c, "gradient_accumulation_steps", "2");
    set(&c, "parallelism.pipeline_degree", "2");
    set(&c, "pipeline_schedule", "1f1b");
    set(&c, "parallelism.context_extension_degree", "2");
    set(&c, "parallelism.data_shard_degree", "1");
    set(&c, "profiling.enable_profiling", "true");
    set(&c, "profiling.profile_freq", "1");
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) {
        CHECK(0, "init: %s", ct_last_error());
        return;
    }
    CHECK(ct_trainer_run(&t) == 0, "run failed");
    int stage = t.mesh.dim[CT_MESH_PP].rank;
    char path[1200];
    snprintf(path, sizeof path, "%s/profile_traces/iteration_1/rank%d_trace.json", dump, rank);
    trace tr;
    CHECK(check_trace(path, &tr), "%s: %s", path, tr.why);
    CHECK(count_named(&tr, "forward") == 2 && count_named(&tr, "backward") == 2,
          "rank %d (stage %d): %d forward and %d backward actions, want 2 and 2", rank, stage,
          count_named(&tr, "forward"), count_named(&tr, "backward"));
    // Stage 0 sends activations and receives gradients; stage 1 the other way round.
    const char *sends = stage == 0 ? "send_f" : "send_b", *recvs = stage == 0 ? "recv_b" : "recv_f";
    CHECK(count_named(&tr, sends) == 2 && count_named(&tr, recvs) == 2, "rank %d (stage %d): %s %d, %s %d", rank,
          stage, sends, count_named(&tr, sends), recvs, count_named(&tr, recvs));
    CHECK(count_on_group(&tr, "pp") > 0, "rank %d: no wait on the pp group", rank);
    CHECK(count_on_group(&tr, "cp") > 0, "rank %d: no wait on the cp group", rank);
    trace_free(&tr);
    ct_trainer_free(&t);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && !ct_test_case_failed) rm_tree(dump);
    if (rank == 0 && ct_test_case_failed) printf("  outputs kept in %s\n", dump);
}

int main(int argc, char **argv) {
    heap_counting_start();
    if (ct_mpi_test_is_child(argc, argv)) {
        if (ct_comm_init(&argc, &argv)) return 1;
        CT_MPI_RUN(fsdp2_tp2_profile);
        CT_MPI_RUN(pp2_cp2_profile);
        ct_comm_finalize();
        CT_TEST_EXIT();
    }
    // The 4-rank run first: this process forks mpirun before it starts MPI itself.
    setenv("OMP_NUM_THREADS", "1", 1);
    int rc = ct_mpi_test_spawn(argv[0], 4, 300, NULL);
    if (rc) printf("FAIL fsdp2_tp2_profile_np4 (mpirun exit %d)\n", rc);
    CT_RUN(validator_rejects_broken_traces);
    CT_RUN(recorder_spans_nest_and_count);
    CT_RUN(device_sync_brackets_every_span);
    CT_RUN(snapshot_adds_up);
    CT_RUN(allocation_failure_writes_snapshot);  // forks: before MPI starts here
    if (ct_comm_init(&argc, &argv)) return 1;
    CT_RUN(profiled_step_makes_no_heap_call);
    ct_comm_finalize();
    if (rc) return 1;
    CT_TEST_EXIT();
}
