// The MPI backend of comm/backend.h (CPU runs): transport only -- the checks, statistics and
// the wait loop every backend shares are in comm.c.
//
// Every collective is started as an MPI non-blocking operation; comm.c finishes it by polling
// `test` (MPI_Test) against a deadline, so a blocking call can time out instead of hanging when
// a peer never arrives. MPI errors are returned (MPI_ERRORS_RETURN on every communicator) and
// turned into ct_fatal lines naming the rank, the collective, the group and MPI's own
// explanation.
//
// Threads: MPI_THREAD_FUNNELED (OpenMP threads never call comm) and no progress thread; why
// testing at the caller's natural points was chosen instead is in comm.h (Progress).
//
// bf16 reductions: MPI has no bf16 type, so bf16 travels as MPI_UINT16_T and is reduced by
// user-defined ops (bf16_sum, bf16_max), created once at init and freed at finalize.
#include "comm/backend.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/float_formats.h"
#include "core/memory.h"

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
    default:
        ct_fatal("comm", "%s on group %s: the MPI backend cannot move %s data", ct_comm_kind_name(k),
                 g->name, ct_dtype_name(dt));
    }
}

// ---- bf16 reductions -------------------------------------------------------------------------
// MPI calls these on pairs of buffers (inout[i] = in[i] op inout[i]) in an order of its choice:
// each combine widens both bf16 values to fp32 (exact), adds or takes the max in fp32 and rounds
// the result back to bf16, to nearest, ties to even (core/float_formats.h). A sum over N ranks
// is thus N-1 roundings whose order MPI picks; it is exact whenever every partial sum is
// representable in bf16. NaN stays NaN in both ops (max too: a NaN anywhere gives a NaN, in
// whichever order MPI combines). Both ops are commutative, as fp32 addition and max are.
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0, n = *len; i < n; i++)
        b[i] = ct_f32_to_bf16(ct_bf16_to_f32(a[i]) + ct_bf16_to_f32(b[i]));
}

static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *type) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0, n = *len; i < n; i++) {
        float x = ct_bf16_to_f32(a[i]), y = ct_bf16_to_f32(b[i]);
        // Either NaN wins; otherwise the larger (exact: converting back does not round).
        b[i] = ct_f32_to_bf16(isnan(x) ? x : isnan(y) ? y : x > y ? x : y);
    }
}

// Indexed by ct_comm_op; made by mpi_init (once), freed by mpi_finalize.
static MPI_Op bf16_ops[2] = {MPI_OP_NULL, MPI_OP_NULL};

static ct_status bf16_ops_create(void) {
    MPI_User_function *const fns[2] = {[CT_COMM_SUM] = bf16_sum, [CT_COMM_MAX] = bf16_max};
    for (int i = 0; i < 2; i++)
        if (bf16_ops[i] == MPI_OP_NULL && MPI_Op_create(fns[i], 1, &bf16_ops[i]) != MPI_SUCCESS)
            return ct_set_error("comm: MPI_Op_create of the bf16 %s failed",
                                i == CT_COMM_SUM ? "sum" : "max");
    return CT_OK;
}

static void bf16_ops_free(void) {
    for (int i = 0; i < 2; i++)
        if (bf16_ops[i] != MPI_OP_NULL) MPI_Op_free(&bf16_ops[i]);  // sets MPI_OP_NULL
}

// Raw bytes can be moved but not reduced: summing bytes is never what a caller means. (comm.c
// has refused unknown reductions already.)
static MPI_Op mpi_op(const ct_group *g, ct_comm_kind k, ct_dtype dt, ct_comm_op op) {
    if (dt == CT_BF16) {
        if (bf16_ops[op] == MPI_OP_NULL)  // groups exist only after mpi_init: MPI went down since
            ct_fatal("comm", "%s on group %s: the bf16 reductions are not set up (MPI was finalized)",
                     ct_comm_kind_name(k), g->name);
        return bf16_ops[op];
    }
    if (dt == CT_U8)
        ct_fatal("comm", "%s on group %s: cannot reduce %s data with the MPI backend",
                 ct_comm_kind_name(k), g->name, ct_dtype_name(dt));
    return op == CT_COMM_MAX ? MPI_MAX : MPI_SUM;
}

// MPI counts are int; larger buffers would need chunking, which no caller needs yet.
static int mpi_count(const ct_group *g, ct_comm_kind k, size_t count) {
    if (count > (size_t)INT_MAX)
        ct_fatal("comm", "%s on group %s: count %zu exceeds the MPI backend's limit %d",
                 ct_comm_kind_name(k), g->name, count, INT_MAX);
    return (int)count;
}

// ---- process ------------------------------------------------------------------------------

// The watchdog's own copy of the world (made by mpi_init), so its messages never match ctitan's.
static MPI_Comm watch_comm = MPI_COMM_NULL;
enum { WATCH_PING = 1, WATCH_PONG = 2, WATCH_TEXT = 64 };

static bool mpi_running(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up) MPI_Finalized(&down);
    return up && !down;
}

static ct_status mpi_init(int *argc, char ***argv) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up) {
        MPI_Finalized(&down);
        if (down) return ct_set_error("comm: MPI was already finalized");
    } else {
        // Open MPI's shared-memory transport copies a large message by reading the sender's
        // memory from the receiving process (CMA), at a moment the sender may be outside any
        // call -- with a guarded device's memory closed. Copy through the shared segment instead.
        if (ct_mem_device_guarded()) setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
        int provided = 0;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return ct_set_error("comm: MPI_Init_thread failed");
        if (provided < MPI_THREAD_FUNNELED)
            return ct_set_error("comm: MPI provides thread level %d, ctitan needs FUNNELED", provided);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (watch_comm == MPI_COMM_NULL && MPI_Comm_dup(MPI_COMM_WORLD, &watch_comm) != MPI_SUCCESS)
        return ct_set_error("comm: MPI_Comm_dup for the watchdog failed");
    return bf16_ops_create();
}

static void mpi_finalize(void) {
    if (mpi_running()) {
        if (watch_comm != MPI_COMM_NULL) MPI_Comm_free(&watch_comm);
        bf16_ops_free();
        MPI_Finalize();
    } else {
        bf16_ops[0] = bf16_ops[1] = MPI_OP_NULL;  // gone with the MPI that made them
        watch_comm = MPI_COMM_NULL;
    }
}

// ct_fatal's view of the job. Each re-checks that MPI runs: ct_fatal may come at any moment,
// including from code that finalized MPI behind comm's back.
static int hook_rank(void *ctx) {
    int r = 0;
    if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

static int hook_size(void *ctx) {
    int n = 1;
    if (mpi_running()) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

// MPI_Abort ends every rank, so none is left waiting in a collective for this one.
static void hook_abort(void *ctx, int code) {
    if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
}

static const ct_abort_hook mpi_abort_hook = {NULL, hook_rank, hook_size, hook_abort};

// ---- groups -------------------------------------------------------------------------------

static void group_fill(ct_group *out, MPI_Comm c) {
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c, &out->rank);
    MPI_Comm_size(c, &out->size);
    set_comm(out, c);
}

static ct_status mpi_group_world(ct_group *out) {
    if (!mpi_running()) return ct_set_error("comm: ct_comm_init must run before ct_comm_group_world");
    // A duplicate, so that ctitan's traffic never matches messages of a library sharing WORLD.
    MPI_Comm c;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c);
    if (rc != MPI_SUCCESS) return ct_set_error("comm: MPI_Comm_dup of the world failed (%d)", rc);
    group_fill(out, c);
    return CT_OK;
}

static ct_status mpi_group_split(ct_group *parent, int color, int key, ct_group *out) {
    MPI_Comm c;
    int rc = MPI_Comm_split(comm_of(parent), color, key, &c);
    if (rc != MPI_SUCCESS)
        return ct_set_error("comm: splitting group %s into %s failed (%d)", parent->name, out->name, rc);
    group_fill(out, c);
    return CT_OK;
}

static void mpi_group_free(ct_group *g) {
    MPI_Comm c = comm_of(g);
    int down = 0;
    MPI_Finalized(&down);
    if (!down && c != MPI_COMM_NULL && c != MPI_COMM_WORLD) MPI_Comm_free(&c);
}

// ---- non-blocking starts ------------------------------------------------------------------

static void mpi_all_reduce(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt,
                           ct_comm_op op, ct_comm_handle *h) {
    const ct_comm_kind k = CT_COMM_ALL_REDUCE;
    const void *sb = send == recv ? MPI_IN_PLACE : send;
    check_mpi(MPI_Iallreduce(sb, recv, mpi_count(g, k, count), mpi_type(g, k, dt),
                             mpi_op(g, k, dt, op), comm_of(g), request_of(h)),
              ct_comm_kind_name(k), g);
}

// send: (count), recv: (size, count); send at this rank's chunk of recv is in place.
static void mpi_all_gather(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt,
                           ct_comm_handle *h) {
    const ct_comm_kind k = CT_COMM_ALL_GATHER;
    int n = mpi_count(g, k, count);
    mpi_count(g, k, count * (size_t)g->size);  // the gathered buffer must be addressable too
    const char *mine = (const char *)recv + (size_t)g->rank * count * ct_dtype_size(dt);
    const void *sb = (const char *)send == mine ? MPI_IN_PLACE : send;
    MPI_Datatype t = mpi_type(g, k, dt);
    check_mpi(MPI_Iallgather(sb, n, t, recv, n, t, comm_of(g), request_of(h)), ct_comm_kind_name(k), g);
}

// send: (size, count) -> recv: (count); comm.c has refused overlapping buffers.
static void mpi_reduce_scatter(ct_group *g, const void *send, void *recv, size_t count,
                               ct_dtype dt, ct_comm_op op, ct_comm_handle *h) {
    const ct_comm_kind k = CT_COMM_REDUCE_SCATTER;
    mpi_count(g, k, count * (size_t)g->size);
    check_mpi(MPI_Ireduce_scatter_block(send, recv, mpi_count(g, k, count), mpi_type(g, k, dt),
                                        mpi_op(g, k, dt, op), comm_of(g), request_of(h)),
              ct_comm_kind_name(k), g);
}

static void mpi_broadcast(ct_group *g, void *buf, size_t count, ct_dtype dt, int root,
                          ct_comm_handle *h) {
    const ct_comm_kind k = CT_COMM_BROADCAST;
    check_mpi(MPI_Ibcast(buf, mpi_count(g, k, count), mpi_type(g, k, dt), root, comm_of(g),
                         request_of(h)),
              ct_comm_kind_name(k), g);
}

static void mpi_send(ct_group *g, const void *buf, size_t count, ct_dtype dt, int peer, int tag,
                     ct_comm_handle *h) {
    const ct_comm_kind k = CT_COMM_SEND;
    check_mpi(MPI_Isend(buf, mpi_count(g, k, count), mpi_type(g, k, dt), peer, tag, comm_of(g),
                        request_of(h)),
              ct_comm_kind_name(k), g);
}

static void mpi_recv(ct_group *g, void *buf, size_t count, ct_dtype dt, int peer, int tag,
                     ct_comm_handle *h) {
    const ct_comm_kind k = CT_COMM_RECV;
    check_mpi(MPI_Irecv(buf, mpi_count(g, k, count), mpi_type(g, k, dt), peer, tag, comm_of(g),
                        request_of(h)),
              ct_comm_kind_name(k), g);
}

// MPI takes int counts and displacements and reads them until the operation completes: they live
// in one block kept beside the request in the handle (the second half of ct_comm_opaque) and
// freed by mpi_test when it sees the operation done.
_Static_assert(sizeof(MPI_Request) + sizeof(int *) <= sizeof(ct_comm_opaque),
               "an MPI_Request and a pointer must fit ct_comm_opaque");
static int **alltoall_ints_of(ct_comm_handle *h) { return (int **)(void *)(h->backend.raw + sizeof(MPI_Request)); }

static void mpi_all_to_all_v(ct_group *g, const void *send, const size_t *send_counts, const size_t *send_displs,
                             void *recv, const size_t *recv_counts, const size_t *recv_displs, ct_dtype dt,
                             ct_comm_handle *h) {
    const ct_comm_kind k = CT_COMM_ALL_TO_ALL;
    int n = g->size;
    int *ints = malloc(4 * (size_t)n * sizeof(int));
    if (!ints) ct_fatal("comm", "%s on group %s: out of memory for %d counts", ct_comm_kind_name(k), g->name, n);
    for (int p = 0; p < n; p++) {
        ints[p] = mpi_count(g, k, send_counts[p]);
        ints[n + p] = mpi_count(g, k, send_displs[p]);
        ints[2 * n + p] = mpi_count(g, k, recv_counts[p]);
        ints[3 * n + p] = mpi_count(g, k, recv_displs[p]);
    }
    *alltoall_ints_of(h) = ints;
    MPI_Datatype t = mpi_type(g, k, dt);
    check_mpi(MPI_Ialltoallv(send, ints, ints + n, t, recv, ints + 2 * n, ints + 3 * n, t, comm_of(g), request_of(h)),
              ct_comm_kind_name(k), g);
}

static void mpi_barrier(ct_group *g, ct_comm_handle *h) {
    check_mpi(MPI_Ibarrier(comm_of(g), request_of(h)), ct_comm_kind_name(CT_COMM_BARRIER), g);
}

// ---- completion ---------------------------------------------------------------------------

static bool mpi_test(ct_comm_handle *h) {
    int done = 0;
    MPI_Status st;
    check_mpi(MPI_Test(request_of(h), &done, &st), ct_comm_kind_name(h->kind), h->group);
    if (done && h->kind == CT_COMM_ALL_TO_ALL) {
        free(*alltoall_ints_of(h));
        *alltoall_ints_of(h) = NULL;
    }
    return done != 0;
}

// ---- the watchdog ----------------------------------------------------------------------------
// A rank whose collective timed out asks every process, over watch_comm, what it waits on; a
// process answers from inside its own wait loop. One that does not answer is not waiting in
// ctitan's communication at all: stopped, stuck in computation, or gone. The messages are a few
// bytes, below every MPI eager limit, so the sends complete without the receiver's help.

static void mpi_watch_answer(const char *waiting_on) {
    if (watch_comm == MPI_COMM_NULL) return;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, WATCH_PING, watch_comm, &flag, &st) != MPI_SUCCESS || !flag) return;
        int ping;
        MPI_Recv(&ping, 1, MPI_INT, st.MPI_SOURCE, WATCH_PING, watch_comm, MPI_STATUS_IGNORE);
        char text[WATCH_TEXT] = {0};
        snprintf(text, sizeof text, "%s", waiting_on);
        MPI_Send(text, WATCH_TEXT, MPI_CHAR, st.MPI_SOURCE, WATCH_PONG, watch_comm);
    }
}

static int mpi_watch_ask(double seconds, const char *waiting_on, char (*what)[64], int cap) {
    if (watch_comm == MPI_COMM_NULL) return 0;
    int me = 0, n = 0;
    MPI_Comm_rank(watch_comm, &me);
    MPI_Comm_size(watch_comm, &n);
    for (int r = 0; r < n && r < cap; r++) what[r][0] = 0;
    int ping = me;
    for (int r = 0; r < n; r++)
        if (r != me) MPI_Send(&ping, 1, MPI_INT, r, WATCH_PING, watch_comm);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        mpi_watch_answer(waiting_on);
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, WATCH_PONG, watch_comm, &flag, &st) == MPI_SUCCESS && flag) {
            char text[WATCH_TEXT];
            MPI_Recv(text, WATCH_TEXT, MPI_CHAR, st.MPI_SOURCE, WATCH_PONG, watch_comm, MPI_STATUS_IGNORE);
            text[WATCH_TEXT - 1] = 0;
            if (st.MPI_SOURCE < cap) snprintf(what[st.MPI_SOURCE], 64, "%s", text[0] ? text : "?");
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > seconds) break;
        struct timespec nap = {0, 1000 * 1000};  // 1 ms
        nanosleep(&nap, NULL);
    }
    return n;
}

const ct_comm_backend ct_comm_backend_mpi = {
    .name = "mpi",
    .init = mpi_init,
    .finalize = mpi_finalize,
    .abort_hook = &mpi_abort_hook,
    .group_world = mpi_group_world,
    .group_split = mpi_group_split,
    .group_free = mpi_group_free,
    .all_reduce = mpi_all_reduce,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .all_to_all_v = mpi_all_to_all_v,
    .test = mpi_test,
    .watch_answer = mpi_watch_answer,
    .watch_ask = mpi_watch_ask,
};
