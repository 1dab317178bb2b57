// The backend-neutral half of comm.h: backend selection, the argument checks every transport
// shares, the byte statistics, blocking = start + wait, and the one timeout path. Every
// operation dispatches to the backend of the group it is given (g->ops), see comm/backend.h.
//
// Every call into a transport is bracketed by ct_mem_device_open / close (core/memory.h): the
// buffers may be on a device whose memory the host reaches only inside backend calls (the test
// device), and any MPI call may move any operation in flight, so not only the call that names
// a buffer touches it.
#include "comm/comm.h"

#include <sched.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/memory.h"
#include "core/trace.h"

#include "comm/backend.h"

// ---- backend selection ---------------------------------------------------------------------

// The backend ct_comm_init starts (NULL: the default, mpi) and whether it is running. Process-
// wide, not per run, because a transport is started once per process (MPI_Init may run once).
static const ct_comm_backend *selected;
static bool running;

#ifdef CT_HAVE_CUDA
extern const ct_comm_backend ct_comm_backend_nccl;  // comm_nccl.c, built with CUDA=1 only
#define CT_COMM_BACKENDS "mpi, nccl"
#else
#define CT_COMM_BACKENDS "mpi"
#endif

const ct_comm_backend *ct_comm_backend_get(const char *name) {
    static const ct_comm_backend *const all[] = {
        &ct_comm_backend_mpi,
#ifdef CT_HAVE_CUDA
        &ct_comm_backend_nccl,
#endif
    };
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}

static const ct_comm_backend *chosen(void) { return selected ? selected : &ct_comm_backend_mpi; }

ct_status ct_comm_select(const char *name) {
    const ct_comm_backend *b = ct_comm_backend_get(name);
    if (!b) return ct_set_error("comm: this build has no backend named '%s' (it has: " CT_COMM_BACKENDS ")", name ? name : "(null)");
    if (running && b != chosen())
        return ct_set_error("comm: cannot select backend %s: %s is already running", b->name, chosen()->name);
    selected = b;
    return CT_OK;
}

const char *ct_comm_backend_name(void) { return chosen()->name; }

ct_status ct_comm_init(int *argc, char ***argv) {
    const ct_comm_backend *b = chosen();
    if (b->init(argc, argv) != CT_OK) return CT_ERR;
    selected = b;
    running = true;
    ct_set_abort_hook(b->abort_hook);
    return CT_OK;
}

// Also ends a transport started outside ct_comm_init (the backend knows whether it runs).
void ct_comm_finalize(void) {
    // The hook goes first: once the transport is down it can neither name ranks nor abort them.
    ct_set_abort_hook(NULL);
    ct_mem_device_open();
    chosen()->finalize();
    ct_mem_device_close();
    running = false;
}

// ---- checks shared by every backend ------------------------------------------------------

static const char *const kind_names[CT_COMM_NKINDS] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv", "barrier", "all_to_all",
};

const char *ct_comm_kind_name(ct_comm_kind k) {
    return (unsigned)k < CT_COMM_NKINDS ? kind_names[k] : "unknown";
}

// A zeroed group (never made, or freed) has no backend to dispatch to.
static void check_group(const ct_group *g, ct_comm_kind k) {
    if (!g || !g->ops)
        ct_fatal("comm", "%s on group %s: the group was never made (or was freed)", kind_names[k],
                 g && g->name[0] ? g->name : "?");
}

static void check_dtype(const ct_group *g, ct_comm_kind k, ct_dtype dt) {
    if (ct_dtype_size(dt) == 0)
        ct_fatal("comm", "%s on group %s: unknown dtype %d", kind_names[k], g->name, (int)dt);
}

static void check_op(const ct_group *g, ct_comm_kind k, ct_comm_op op) {
    if (op != CT_COMM_SUM && op != CT_COMM_MAX)
        ct_fatal("comm", "%s on group %s: unknown reduction %d", kind_names[k], g->name, (int)op);
}

static void check_peer(const ct_group *g, ct_comm_kind k, int peer, const char *role) {
    if (peer < 0 || peer >= g->size)
        ct_fatal("comm", "%s on group %s: %s %d is not a rank of the group (size %d)",
                 kind_names[k], g->name, role, peer, g->size);
}

// ---- groups ---------------------------------------------------------------------------------

// A fresh group of backend b: name, timeout and backend set, counters zero. The backend fills
// rank, size and its handle.
static void group_begin(ct_group *out, const ct_comm_backend *b, const char *name, double timeout_s) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->timeout_s = timeout_s;
    out->ops = b;
}

ct_status ct_comm_group_world(ct_group *out, double timeout_s) {
    if (!running) return ct_set_error("comm: ct_comm_init must run before ct_comm_group_world");
    group_begin(out, chosen(), "world", timeout_s);
    ct_mem_device_open();
    ct_status made = out->ops->group_world(out);
    ct_mem_device_close();
    if (made != CT_OK) {
        memset(out, 0, sizeof *out);
        return CT_ERR;
    }
    return CT_OK;
}

ct_status ct_comm_group_split(ct_group *parent, int color, int key, const char *name,
                              ct_group *out) {
    if (color < 0) return ct_set_error("comm: group %s: split color must be >= 0, got %d", name, color);
    if (!parent || !parent->ops) return ct_set_error("comm: group %s: split of a group that was never made", name);
    // Built aside and copied at the end, so that out may be parent itself.
    ct_group g;
    group_begin(&g, parent->ops, name, parent->timeout_s);
    ct_mem_device_open();
    ct_status made = g.ops->group_split(parent, color, key, &g);
    ct_mem_device_close();
    if (made != CT_OK) return CT_ERR;
    *out = g;
    return CT_OK;
}

void ct_comm_group_free(ct_group *g) {
    if (!g || g->size == 0) return;
    if (g->ops) {
        ct_mem_device_open();
        g->ops->group_free(g);
        ct_mem_device_close();
    }
    memset(g, 0, sizeof *g);
}

// ---- byte accounting (the table in comm.h) ------------------------------------------------

static double ring_bytes(ct_comm_kind k, int n, size_t count, ct_dtype dt) {
    double b = (double)count * (double)ct_dtype_size(dt);
    switch (k) {
    case CT_COMM_ALL_REDUCE: return n > 1 ? 2.0 * (n - 1) / n * b : 0;
    case CT_COMM_ALL_GATHER:
    case CT_COMM_REDUCE_SCATTER: return (double)(n - 1) * b;
    case CT_COMM_BROADCAST: return n > 1 ? b : 0;
    case CT_COMM_SEND:
    case CT_COMM_RECV: return b;
    default: return 0;
    }
}

static ct_comm_handle handle_new(ct_group *g, ct_comm_kind k, double bytes) {
    ct_comm_handle h;
    memset(&h, 0, sizeof h);
    h.group = g;
    h.kind = k;
    h.bytes = bytes;
    return h;
}

static void handle_done(ct_comm_handle *h, double waited) {
    ct_comm_stat *s = &h->group->stats[h->kind];
    s->calls++;
    s->bytes += h->bytes;
    s->wait_s += waited;
    h->group = NULL;
}

// ---- non-blocking starts ------------------------------------------------------------------

ct_comm_handle ct_comm_all_reduce_start(ct_group *g, const void *send, void *recv, size_t count,
                                        ct_dtype dt, ct_comm_op op) {
    const ct_comm_kind k = CT_COMM_ALL_REDUCE;
    check_group(g, k);
    check_dtype(g, k, dt);
    check_op(g, k, op);
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    ct_mem_device_open();
    g->ops->all_reduce(g, send, recv, count, dt, op, &h);
    ct_mem_device_close();
    return h;
}

ct_comm_handle ct_comm_all_gather_start(ct_group *g, const void *send, void *recv, size_t count,
                                        ct_dtype dt) {
    const ct_comm_kind k = CT_COMM_ALL_GATHER;
    check_group(g, k);
    check_dtype(g, k, dt);
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    ct_mem_device_open();
    g->ops->all_gather(g, send, recv, count, dt, &h);
    ct_mem_device_close();
    return h;
}

ct_comm_handle ct_comm_reduce_scatter_start(ct_group *g, const void *send, void *recv,
                                            size_t count, ct_dtype dt, ct_comm_op op) {
    const ct_comm_kind k = CT_COMM_REDUCE_SCATTER;
    check_group(g, k);
    check_dtype(g, k, dt);
    // Transports forbid aliased buffers here and may not notice: refuse an overlap ourselves.
    // send: (size, count), recv: (count).
    const char *s0 = send, *r0 = recv;
    size_t es = ct_dtype_size(dt);
    if (count && s0 < r0 + count * es && r0 < s0 + count * (size_t)g->size * es)
        ct_fatal("comm", "%s on group %s: send and recv buffers overlap", kind_names[k], g->name);
    check_op(g, k, op);
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    ct_mem_device_open();
    g->ops->reduce_scatter(g, send, recv, count, dt, op, &h);
    ct_mem_device_close();
    return h;
}

ct_comm_handle ct_comm_broadcast_start(ct_group *g, void *buf, size_t count, ct_dtype dt,
                                       int root) {
    const ct_comm_kind k = CT_COMM_BROADCAST;
    check_group(g, k);
    check_peer(g, k, root, "root");
    check_dtype(g, k, dt);
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    ct_mem_device_open();
    g->ops->broadcast(g, buf, count, dt, root, &h);
    ct_mem_device_close();
    return h;
}

// Tags go to the backend unchecked: the transport itself refuses a bad one, through its error
// path (tests/test_comm.sh's mpierror drill relies on exactly that).
ct_comm_handle ct_comm_send_start(ct_group *g, const void *buf, size_t count, ct_dtype dt,
                                  int peer, int tag) {
    const ct_comm_kind k = CT_COMM_SEND;
    check_group(g, k);
    check_peer(g, k, peer, "peer");
    check_dtype(g, k, dt);
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    ct_mem_device_open();
    g->ops->send(g, buf, count, dt, peer, tag, &h);
    ct_mem_device_close();
    return h;
}

ct_comm_handle ct_comm_recv_start(ct_group *g, void *buf, size_t count, ct_dtype dt,
                                  int peer, int tag) {
    const ct_comm_kind k = CT_COMM_RECV;
    check_group(g, k);
    check_peer(g, k, peer, "peer");
    check_dtype(g, k, dt);
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    ct_mem_device_open();
    g->ops->recv(g, buf, count, dt, peer, tag, &h);
    ct_mem_device_close();
    return h;
}

ct_comm_handle ct_comm_all_to_all_v_start(ct_group *g, const void *send, const size_t *send_counts,
                                          const size_t *send_displs, void *recv, const size_t *recv_counts,
                                          const size_t *recv_displs, ct_dtype dt) {
    const ct_comm_kind k = CT_COMM_ALL_TO_ALL;
    check_group(g, k);
    check_dtype(g, k, dt);
    if (!send_counts || !send_displs || !recv_counts || !recv_displs)
        ct_fatal("comm", "%s on group %s: a count or displacement array is missing", kind_names[k], g->name);
    // What this rank sends itself must be what it expects from itself.
    if (send_counts[g->rank] != recv_counts[g->rank])
        ct_fatal("comm", "%s on group %s: rank %d sends itself %zu elements but expects %zu", kind_names[k], g->name,
                 g->rank, send_counts[g->rank], recv_counts[g->rank]);
    double bytes = 0;
    for (int p = 0; p < g->size; p++)
        if (p != g->rank) bytes += (double)send_counts[p] * (double)ct_dtype_size(dt);
    ct_comm_handle h = handle_new(g, k, bytes);
    ct_mem_device_open();
    g->ops->all_to_all_v(g, send, send_counts, send_displs, recv, recv_counts, recv_displs, dt, &h);
    ct_mem_device_close();
    return h;
}

// ---- completion ---------------------------------------------------------------------------

bool ct_comm_test(ct_comm_handle *h) {
    if (!h->group) return true;
    ct_mem_device_open();
    bool done = h->group->ops->test(h);
    ct_mem_device_close();
    if (done) handle_done(h, 0);
    return done;
}

// Polls the backend's test until done or the deadline (measured from the start of the wait, so
// compute overlapped with an async collective does not count against it). MPI's non-blocking
// collectives progress only inside MPI calls, so the loop keeps testing; after a short spin it
// yields, then sleeps briefly, so that oversubscribed ranks (more ranks than cores) let the
// rank they wait for run.
// The timeout's message: which ranks of the job did not answer the watchdog (not waiting in any
// collective: stopped, stuck in computation, dead), and what the others wait on.
static _Noreturn void timed_out(const ct_comm_handle *h) {
    const ct_group *g = h->group;
    enum { CAP = 4096 };
    static char what[CAP][64];
    char mine[64];
    snprintf(mine, sizeof mine, "%s on %s, timed out", kind_names[h->kind], g->name);
    ct_mem_device_open();
    int n = g->ops->watch_ask ? g->ops->watch_ask(3.0, mine, what, CAP) : 0;
    ct_mem_device_close();
    const ct_abort_hook *hook = g->ops->abort_hook;
    int me = hook ? hook->rank(hook->ctx) : -1;  // the job rank the watchdog numbers by
    char silent[512] = "", waiting[512] = "";
    size_t ls = 0, lw = 0;
    for (int r = 0; r < n && r < CAP; r++) {
        if (r == me) continue;
        if (!what[r][0] && ls < sizeof silent - 16)
            ls += (size_t)snprintf(silent + ls, sizeof silent - ls, "%s%d", ls ? ", " : "", r);
        else if (what[r][0] && lw < sizeof waiting - 96)
            lw += (size_t)snprintf(waiting + lw, sizeof waiting - lw, "%s%d (%s)", lw ? "; " : "", r, what[r]);
    }
    if (n > 1 && ls)
        ct_fatal("comm", "%s on group %s timed out after %g s: rank%s %s did not answer (stopped, stuck outside "
                 "communication, or dead)%s%s",
                 kind_names[h->kind], g->name, g->timeout_s, strchr(silent, ',') ? "s" : "", silent,
                 lw ? "; waiting: " : "", waiting);
    ct_fatal("comm", "%s on group %s timed out after %g s%s%s", kind_names[h->kind], g->name, g->timeout_s,
             lw ? "; every rank is waiting: " : "", waiting);
}

void ct_comm_wait(ct_comm_handle *h) {
    if (!h->group) return;
    ct_group *g = h->group;
    int span = ct_trace_begin_on(CT_TRACE_COMM, kind_names[h->kind], g->name);  // profiling: this wait
    const double t0 = ct_now_seconds();
    const double deadline = t0 + g->timeout_s;
    char waiting_on[64] = "";
    for (long spins = 0;; spins++) {
        ct_mem_device_open();
        bool done = g->ops->test(h);
        ct_mem_device_close();
        if (done) break;
        double now = ct_now_seconds();
        if (g->timeout_s > 0 && now > deadline) timed_out(h);
        // A wait longer than a moment may be one a timed-out rank asks about.
        if (g->ops->watch_answer && now - t0 > 0.05 && (spins & 63) == 0) {
            if (!waiting_on[0]) snprintf(waiting_on, sizeof waiting_on, "%s on %s", kind_names[h->kind], g->name);
            ct_mem_device_open();
            g->ops->watch_answer(waiting_on);
            ct_mem_device_close();
        }
        if (spins < 200) continue;
        if (now - t0 < 0.005) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50 * 1000};  // 50 us
            nanosleep(&ts, NULL);
        }
    }
    handle_done(h, ct_now_seconds() - t0);
    ct_trace_end(span);
}

// ---- blocking = start + wait --------------------------------------------------------------

void ct_comm_all_reduce(ct_group *g, const void *send, void *recv, size_t count,
                        ct_dtype dt, ct_comm_op op) {
    ct_comm_handle h = ct_comm_all_reduce_start(g, send, recv, count, dt, op);
    ct_comm_wait(&h);
}

void ct_comm_all_gather(ct_group *g, const void *send, void *recv, size_t count,
                        ct_dtype dt) {
    ct_comm_handle h = ct_comm_all_gather_start(g, send, recv, count, dt);
    ct_comm_wait(&h);
}

void ct_comm_reduce_scatter(ct_group *g, const void *send, void *recv, size_t count,
                            ct_dtype dt, ct_comm_op op) {
    ct_comm_handle h = ct_comm_reduce_scatter_start(g, send, recv, count, dt, op);
    ct_comm_wait(&h);
}

void ct_comm_broadcast(ct_group *g, void *buf, size_t count, ct_dtype dt, int root) {
    ct_comm_handle h = ct_comm_broadcast_start(g, buf, count, dt, root);
    ct_comm_wait(&h);
}

void ct_comm_send(ct_group *g, const void *buf, size_t count, ct_dtype dt, int peer,
                  int tag) {
    ct_comm_handle h = ct_comm_send_start(g, buf, count, dt, peer, tag);
    ct_comm_wait(&h);
}

void ct_comm_recv(ct_group *g, void *buf, size_t count, ct_dtype dt, int peer, int tag) {
    ct_comm_handle h = ct_comm_recv_start(g, buf, count, dt, peer, tag);
    ct_comm_wait(&h);
}

void ct_comm_all_to_all_v(ct_group *g, const void *send, const size_t *send_counts, const size_t *send_displs,
                          void *recv, const size_t *recv_counts, const size_t *recv_displs, ct_dtype dt) {
    ct_comm_handle h =
        ct_comm_all_to_all_v_start(g, send, send_counts, send_displs, recv, recv_counts, recv_displs, dt);
    ct_comm_wait(&h);
}

// Through all_to_all_v with equal counts (a device backend's control plane carries host buffers).
void ct_comm_all_to_all(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt) {
    check_group(g, CT_COMM_ALL_TO_ALL);
    size_t n = (size_t)g->size, *shape = calloc(2 * n, sizeof(size_t));  // counts | displacements
    if (!shape) ct_fatal("comm", "all_to_all on group %s: out of memory for %zu counts", g->name, n);
    for (size_t p = 0; p < n; p++) shape[p] = count, shape[n + p] = p * count;
    ct_comm_all_to_all_v(g, send, shape, shape + n, recv, shape, shape + n, dt);
    free(shape);
}

void ct_comm_barrier(ct_group *g) {
    const ct_comm_kind k = CT_COMM_BARRIER;
    check_group(g, k);
    ct_comm_handle h = handle_new(g, k, 0);
    ct_mem_device_open();
    g->ops->barrier(g, &h);
    ct_mem_device_close();
    ct_comm_wait(&h);
}

// core/error.h keeps the mark, so that it follows the message through every caller that wraps it.
bool ct_comm_error_is_agreed(void) { return ct_error_is_shared(); }

void ct_comm_mark_agreed(void) { ct_error_mark_shared(); }

// Every rank learns the lowest failing rank (a MAX over -rank) and that rank's message.
ct_status ct_comm_agree(ct_group *g, ct_status local) {
    // {-(lowest failing rank), failing ranks}: a MAX of the first, a SUM of the second.
    int32_t neg_first = local == CT_OK ? -INT32_MAX : -g->rank, failed = local != CT_OK;
    ct_comm_all_reduce(g, &neg_first, &neg_first, 1, CT_I32, CT_COMM_MAX);
    ct_comm_all_reduce(g, &failed, &failed, 1, CT_I32, CT_COMM_SUM);
    int first = -neg_first;
    if (first == INT32_MAX) return CT_OK;
    char msg[1024] = {0};
    if (g->rank == first) snprintf(msg, sizeof msg, "%s", ct_last_error());
    ct_comm_broadcast(g, msg, sizeof msg, CT_U8, first);
    msg[sizeof msg - 1] = 0;
    if (g->size == 1 || failed == g->size)  // every rank met it: no rank to name
        ct_set_error("%s", msg);
    else
        ct_set_error("rank %d: %s", first, msg);
    ct_error_mark_shared();
    return CT_ERR;
}

// ---- statistics ---------------------------------------------------------------------------

void ct_comm_stats_reset(ct_group *g) { memset(g->stats, 0, sizeof g->stats); }

double ct_comm_stats_total_bytes(const ct_group *g) {
    double b = 0;
    for (int k = 0; k < CT_COMM_NKINDS; k++) b += g->stats[k].bytes;
    return b;
}

int ct_comm_stats_format(const ct_group *g, char *buf, size_t n) {
    int len = 0;
    if (n) buf[0] = '\0';
    for (int k = 0; k < CT_COMM_NKINDS; k++) {
        const ct_comm_stat *s = &g->stats[k];
        if (s->calls == 0) continue;
        size_t off = (size_t)len < n ? (size_t)len : n;
        len += snprintf(buf + off, n - off, "comm %s %s: calls %lld, bytes %.0f, wait %.6f s\n",
                        g->name, kind_names[k], s->calls, s->bytes, s->wait_s);
    }
    return len;
}
