// The MPI backend of comm.h (CPU runs).
//
// Every collective is started as an MPI non-blocking operation and finished by polling
// MPI_Test against a deadline, so a blocking call can time out instead of hanging when a peer
// never arrives. MPI errors are returned (MPI_ERRORS_RETURN on every communicator) and turned
// into ct_fatal lines naming the rank, the collective, the group and MPI's own explanation.
#include "comm/comm.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(MPI_Comm) <= sizeof(ct_comm_opaque), "MPI_Comm must fit ct_comm_opaque");
_Static_assert(sizeof(MPI_Request) <= sizeof(ct_comm_opaque), "MPI_Request must fit ct_comm_opaque");

static MPI_Comm comm_of(const ct_group *g) {
    MPI_Comm c;
    memcpy(&c, g->backend.raw, sizeof c);
    return c;
}

static void set_comm(ct_group *g, MPI_Comm c) {
    memset(&g->backend, 0, sizeof g->backend);
    memcpy(g->backend.raw, &c, sizeof c);
}

static MPI_Request *request_of(ct_comm_handle *h) { return (MPI_Request *)(void *)h->backend.raw; }

static const char *const kind_names[CT_COMM_NKINDS] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv", "barrier",
};

const char *ct_comm_kind_name(ct_comm_kind k) {
    return (unsigned)k < CT_COMM_NKINDS ? kind_names[k] : "unknown";
}

// Ends the job if an MPI call failed, with MPI's own words for the cause.
static void check_mpi(int rc, const char *what, const ct_group *g) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error %d", rc);
    ct_fatal("comm", "%s on group %s failed: %s", what, g ? g->name : "?", text);
}

static MPI_Datatype mpi_type(const ct_group *g, ct_comm_kind k, ct_dtype dt) {
    switch (dt) {
    case CT_F32: return MPI_FLOAT;
    case CT_BF16: return MPI_UINT16_T;
    case CT_I32: return MPI_INT32_T;
    case CT_F64: return MPI_DOUBLE;
    case CT_I64: return MPI_INT64_T;
    case CT_U8: return MPI_UINT8_T;
    default: ct_fatal("comm", "%s on group %s: unknown dtype %d", kind_names[k], g->name, (int)dt);
    }
}

// bf16 and raw bytes can be moved but not reduced: MPI has no bf16 arithmetic, and summing
// bytes is never what a caller means.
static MPI_Op mpi_op(const ct_group *g, ct_comm_kind k, ct_dtype dt, ct_comm_op op) {
    if (dt == CT_BF16 || dt == CT_U8)
        ct_fatal("comm", "%s on group %s: cannot reduce %s data with the MPI backend",
                 kind_names[k], g->name, ct_dtype_name(dt));
    if (op == CT_COMM_SUM) return MPI_SUM;
    if (op == CT_COMM_MAX) return MPI_MAX;
    ct_fatal("comm", "%s on group %s: unknown reduction %d", kind_names[k], g->name, (int)op);
}

// MPI counts are int; larger buffers would need chunking, which no caller needs yet.
static int mpi_count(const ct_group *g, ct_comm_kind k, size_t count) {
    if (count > (size_t)INT_MAX)
        ct_fatal("comm", "%s on group %s: count %zu exceeds the MPI backend's limit %d",
                 kind_names[k], g->name, count, INT_MAX);
    return (int)count;
}

static void check_peer(const ct_group *g, ct_comm_kind k, int peer, const char *role) {
    if (peer < 0 || peer >= g->size)
        ct_fatal("comm", "%s on group %s: %s %d is not a rank of the group (size %d)",
                 kind_names[k], g->name, role, peer, g->size);
}

// ---- process and groups -------------------------------------------------------------------

ct_status ct_comm_init(int *argc, char ***argv) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up) {
        MPI_Finalized(&down);
        if (down) return ct_set_error("comm: MPI was already finalized");
    } else {
        int provided = 0;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return ct_set_error("comm: MPI_Init_thread failed");
        if (provided < MPI_THREAD_FUNNELED)
            return ct_set_error("comm: MPI provides thread level %d, ctitan needs FUNNELED", provided);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return CT_OK;
}

void ct_comm_finalize(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up) MPI_Finalized(&down);
    if (up && !down) MPI_Finalize();
}

static void group_fill(ct_group *out, MPI_Comm c, const char *name, double timeout_s) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c, &out->rank);
    MPI_Comm_size(c, &out->size);
    out->timeout_s = timeout_s;
    set_comm(out, c);
}

ct_status ct_comm_group_world(ct_group *out, double timeout_s) {
    int up = 0;
    MPI_Initialized(&up);
    if (!up) return ct_set_error("comm: ct_comm_init must run before ct_comm_group_world");
    // A duplicate, so that ctitan's traffic never matches messages of a library sharing WORLD.
    MPI_Comm c;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c);
    if (rc != MPI_SUCCESS) return ct_set_error("comm: MPI_Comm_dup of the world failed (%d)", rc);
    group_fill(out, c, "world", timeout_s);
    return CT_OK;
}

ct_status ct_comm_group_split(ct_group *parent, int color, int key, const char *name,
                              ct_group *out) {
    if (color < 0) return ct_set_error("comm: group %s: split color must be >= 0, got %d", name, color);
    MPI_Comm c;
    int rc = MPI_Comm_split(comm_of(parent), color, key, &c);
    if (rc != MPI_SUCCESS)
        return ct_set_error("comm: splitting group %s into %s failed (%d)", parent->name, name, rc);
    group_fill(out, c, name, parent->timeout_s);
    return CT_OK;
}

void ct_comm_group_free(ct_group *g) {
    if (!g || g->size == 0) return;
    MPI_Comm c = comm_of(g);
    int down = 0;
    MPI_Finalized(&down);
    if (!down && c != MPI_COMM_NULL && c != MPI_COMM_WORLD) MPI_Comm_free(&c);
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
    *request_of(&h) = MPI_REQUEST_NULL;
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
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    const void *sb = send == recv ? MPI_IN_PLACE : send;
    check_mpi(MPI_Iallreduce(sb, recv, mpi_count(g, k, count), mpi_type(g, k, dt),
                             mpi_op(g, k, dt, op), comm_of(g), request_of(&h)),
              kind_names[k], g);
    return h;
}

ct_comm_handle ct_comm_all_gather_start(ct_group *g, const void *send, void *recv, size_t count,
                                        ct_dtype dt) {
    const ct_comm_kind k = CT_COMM_ALL_GATHER;
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    int n = mpi_count(g, k, count);
    mpi_count(g, k, count * (size_t)g->size);  // the gathered buffer must be addressable too
    const char *mine = (const char *)recv + (size_t)g->rank * count * ct_dtype_size(dt);
    const void *sb = (const char *)send == mine ? MPI_IN_PLACE : send;
    MPI_Datatype t = mpi_type(g, k, dt);
    check_mpi(MPI_Iallgather(sb, n, t, recv, n, t, comm_of(g), request_of(&h)), kind_names[k], g);
    return h;
}

ct_comm_handle ct_comm_reduce_scatter_start(ct_group *g, const void *send, void *recv,
                                            size_t count, ct_dtype dt, ct_comm_op op) {
    const ct_comm_kind k = CT_COMM_REDUCE_SCATTER;
    // MPI forbids aliased buffers here, and may not notice: refuse an overlap ourselves.
    const char *s0 = send, *r0 = recv;
    size_t es = ct_dtype_size(dt);
    if (count && s0 < r0 + count * es && r0 < s0 + count * (size_t)g->size * es)
        ct_fatal("comm", "%s on group %s: send and recv buffers overlap", kind_names[k], g->name);
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    mpi_count(g, k, count * (size_t)g->size);
    check_mpi(MPI_Ireduce_scatter_block(send, recv, mpi_count(g, k, count), mpi_type(g, k, dt),
                                        mpi_op(g, k, dt, op), comm_of(g), request_of(&h)),
              kind_names[k], g);
    return h;
}

ct_comm_handle ct_comm_broadcast_start(ct_group *g, void *buf, size_t count, ct_dtype dt,
                                       int root) {
    const ct_comm_kind k = CT_COMM_BROADCAST;
    check_peer(g, k, root, "root");
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    check_mpi(MPI_Ibcast(buf, mpi_count(g, k, count), mpi_type(g, k, dt), root, comm_of(g),
                         request_of(&h)),
              kind_names[k], g);
    return h;
}

// Tags are passed to MPI unchecked: MPI itself refuses a bad one, through the error path.
ct_comm_handle ct_comm_send_start(ct_group *g, const void *buf, size_t count, ct_dtype dt,
                                  int peer, int tag) {
    const ct_comm_kind k = CT_COMM_SEND;
    check_peer(g, k, peer, "peer");
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    check_mpi(MPI_Isend(buf, mpi_count(g, k, count), mpi_type(g, k, dt), peer, tag, comm_of(g),
                        request_of(&h)),
              kind_names[k], g);
    return h;
}

ct_comm_handle ct_comm_recv_start(ct_group *g, void *buf, size_t count, ct_dtype dt,
                                  int peer, int tag) {
    const ct_comm_kind k = CT_COMM_RECV;
    check_peer(g, k, peer, "peer");
    ct_comm_handle h = handle_new(g, k, ring_bytes(k, g->size, count, dt));
    check_mpi(MPI_Irecv(buf, mpi_count(g, k, count), mpi_type(g, k, dt), peer, tag, comm_of(g),
                        request_of(&h)),
              kind_names[k], g);
    return h;
}

// ---- completion ---------------------------------------------------------------------------

bool ct_comm_test(ct_comm_handle *h) {
    if (!h->group) return true;
    int done = 0;
    MPI_Status st;
    check_mpi(MPI_Test(request_of(h), &done, &st), kind_names[h->kind], h->group);
    if (done) handle_done(h, 0);
    return done != 0;
}

// Polls MPI_Test until done or the deadline (measured from the start of the wait, so compute
// overlapped with an async collective does not count against it). Non-blocking collectives
// progress only inside MPI calls, so the loop keeps calling MPI_Test; after a short spin it
// yields, then sleeps briefly, so that oversubscribed ranks (more ranks than cores) let the
// rank they wait for run.
void ct_comm_wait(ct_comm_handle *h) {
    if (!h->group) return;
    ct_group *g = h->group;
    const double t0 = MPI_Wtime();
    const double deadline = t0 + g->timeout_s;
    MPI_Status st;
    for (long spins = 0;; spins++) {
        int done = 0;
        check_mpi(MPI_Test(request_of(h), &done, &st), kind_names[h->kind], g);
        if (done) break;
        double now = MPI_Wtime();
        if (g->timeout_s > 0 && now > deadline)
            ct_fatal("comm", "%s on group %s timed out after %g s", kind_names[h->kind], g->name,
                     g->timeout_s);
        if (spins < 200) continue;
        if (now - t0 < 0.005) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50 * 1000};  // 50 us
            nanosleep(&ts, NULL);
        }
    }
    handle_done(h, MPI_Wtime() - t0);
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

void ct_comm_barrier(ct_group *g) {
    ct_comm_handle h = handle_new(g, CT_COMM_BARRIER, 0);
    check_mpi(MPI_Ibarrier(comm_of(g), request_of(&h)), kind_names[CT_COMM_BARRIER], g);
    ct_comm_wait(&h);
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

void ct_comm_stats_print(const ct_group *g, FILE *f) {
    char line[1024];
    int len = ct_comm_stats_format(g, line, sizeof line);
    fputs(line, f);
    if ((size_t)len >= sizeof line) fputs("\n(comm stats truncated)\n", f);
}
