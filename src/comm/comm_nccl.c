// The NCCL backend of comm/backend.h (GPU runs, built with CUDA=1 only): every collective and
// point-to-point transfer through NCCL on device buffers. MPI still starts the job: the MPI
// backend's init brings MPI up (and its abort hook and timeout watchdog serve this backend too),
// each group is an MPI communicator (for splits and to broadcast the NCCL unique id from its
// rank 0) paired with an NCCL communicator made over it.
//
// Streams. Kernels run on the compute stream, the legacy default stream 0 (kernels/cuda/
// cuda_kernels.h); NCCL runs on one communication stream per process. A start records an event
// on the compute stream and makes the communication stream wait for it (the operands are
// ready), queues the NCCL call there and records a `done` event after it. `test` makes the
// compute stream wait for that event (cudaStreamWaitEvent, as PyTorch's work.wait()), so kernels
// queued afterwards see the result, and the handle is finished for the host at once: the host
// keeps queueing work while the transfer runs. Compute queued between start and wait overlaps
// the transfer on the device as well.
//
// Never hang. A collective a peer never joins would leave the compute stream waiting forever,
// and the host with it at its next read (copy_to_host synchronises). So an operation that has
// not finished when its wait is asked for goes on a list that a watchdog thread polls (the
// thread PyTorch's ProcessGroupNCCL keeps for the same reason): each entry carries the group's
// timeout from the moment of its wait, comm.c's deadline; past it, or when NCCL reports an
// asynchronous error, the watchdog aborts the NCCL communicator and ends the job through
// ct_fatal with the operation, the group and the timeout -- the guarantee comm.c's polling loop
// gives, kept while the host is free or blocked anywhere else. When the list is full, `test`
// falls back to answering "not yet" and comm.c's loop polls with its own timeout.
//
// The control plane. The step also reduces a few host scalars over its groups (the loss, the
// gradient norm, token counts, the flags errors are agreed with). NCCL moves device memory only,
// so an operation whose buffers are host memory goes through the group's MPI communicator
// instead, blocking, and its handle is finished at once; one buffer on each side is refused.
//
// Differences from the MPI backend: tags are not passed on (NCCL matches sends and receives
// between a pair of ranks in the order they are issued, which is how ctitan's schedules issue
// them); bf16 reductions are NCCL's (its own accumulation order and rounding, not comm.h's
// pairwise round-to-bf16 contract, to be checked against it on a GPU); events are created per
// operation (cudaEventCreate is cheap, but it is an allocation in the step: a pool is the fix).
#include "comm/backend.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/error.h"

typedef struct {
    ncclComm_t nccl;
    MPI_Comm mpi;
} nccl_group;
_Static_assert(sizeof(nccl_group) <= sizeof(ct_comm_opaque), "an NCCL group must fit ct_comm_opaque");
_Static_assert(sizeof(cudaEvent_t) <= sizeof(ct_comm_opaque), "a cudaEvent_t must fit ct_comm_opaque");

static nccl_group group_of(const ct_group *g) {
    nccl_group n;
    memcpy(&n, g->backend.raw, sizeof n);
    return n;
}

static cudaStream_t comm_stream;
static float *barrier_buf;  // one device float, all-reduced by barrier

static void check_cuda(cudaError_t e, const char *what, const ct_group *g) {
    if (e != cudaSuccess) ct_fatal("comm", "%s on group %s failed: %s", what, g ? g->name : "?", cudaGetErrorString(e));
}

static void check_nccl(ncclResult_t r, const char *what, const ct_group *g) {
    if (r != ncclSuccess)
        ct_fatal("comm", "%s on group %s failed: %s", what, g ? g->name : "?", ncclGetErrorString(r));
}

static ncclDataType_t nccl_type(const ct_group *g, ct_comm_kind k, ct_dtype dt) {
    switch (dt) {
    case CT_F32: return ncclFloat32;
    case CT_BF16: return ncclBfloat16;
    case CT_I32: return ncclInt32;
    case CT_F64: return ncclFloat64;
    case CT_I64: return ncclInt64;
    case CT_U8: return ncclUint8;
    default:
        ct_fatal("comm", "%s on group %s: the NCCL backend cannot move %s data", ct_comm_kind_name(k), g->name,
                 ct_dtype_name(dt));
    }
}

static ncclRedOp_t nccl_op(const ct_group *g, ct_comm_kind k, ct_dtype dt, ct_comm_op op) {
    if (dt == CT_U8)
        ct_fatal("comm", "%s on group %s: cannot reduce %s data with the NCCL backend", ct_comm_kind_name(k),
                 g->name, ct_dtype_name(dt));
    return op == CT_COMM_MAX ? ncclMax : ncclSum;
}

// ---- the watchdog: operations the compute stream waits on that may not have finished
enum { PENDING_CAP = 1024, WATCH_PERIOD_US = 10000 };
typedef struct {
    cudaEvent_t done;
    ncclComm_t nccl;
    double deadline;  // seconds on CLOCK_MONOTONIC; 0: no timeout
    double timeout_s;
    ct_comm_kind kind;
    char group[48];
} pending_op;

static pending_op pending[PENDING_CAP];  // fixed: no allocation in the step
static int n_pending;
static pthread_mutex_t pending_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t watchdog;
static bool watchdog_running;
static atomic_bool watchdog_stop;
static int watch_device;  // the device the operations run on (a new thread starts on device 0)

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Entry i has failed or run out of time: abort its communicator (its kernels return, so nothing
// on the device waits for it any more) and end the job with what it was.
static _Noreturn void pending_fatal(const pending_op *p, const char *why) {
    char what[160];
    snprintf(what, sizeof what, "%s on group %s", ct_comm_kind_name(p->kind), p->group);
    ncclCommAbort(p->nccl);
    ct_fatal("comm", "%s %s (the compute stream was waiting on it; the NCCL watchdog ended the job)", what, why);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    cudaSetDevice(watch_device);
    while (!atomic_load(&watchdog_stop)) {
        pthread_mutex_lock(&pending_mu);
        double now = mono_now();
        for (int i = 0; i < n_pending;) {
            pending_op *p = &pending[i];
            cudaError_t e = cudaEventQuery(p->done);
            if (e == cudaSuccess) {
                cudaEventDestroy(p->done);
                pending[i] = pending[--n_pending];
                continue;
            }
            if (e != cudaErrorNotReady) {
                char why[96];
                snprintf(why, sizeof why, "failed: %s", cudaGetErrorString(e));
                pending_fatal(p, why);
            }
            ncclResult_t async = ncclSuccess;  // a peer that failed shows here, not as a hang
            if (ncclCommGetAsyncError(p->nccl, &async) == ncclSuccess && async != ncclSuccess &&
                async != ncclInProgress) {
                char why[96];
                snprintf(why, sizeof why, "failed: %s", ncclGetErrorString(async));
                pending_fatal(p, why);
            }
            if (p->deadline > 0 && now > p->deadline) {
                char why[64];
                snprintf(why, sizeof why, "timed out after %g s", p->timeout_s);
                pending_fatal(p, why);
            }
            i++;
        }
        pthread_mutex_unlock(&pending_mu);
        struct timespec ts = {0, WATCH_PERIOD_US * 1000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

// Hands `done` of h to the watchdog; false when its list is full (the caller polls instead).
static bool watch(const ct_comm_handle *h, cudaEvent_t done) {
    const ct_group *g = h->group;
    pthread_mutex_lock(&pending_mu);
    bool room = n_pending < PENDING_CAP;
    if (room) {
        pending_op *p = &pending[n_pending++];
        p->done = done;
        p->nccl = group_of(g).nccl;
        p->timeout_s = g->timeout_s;
        p->deadline = g->timeout_s > 0 ? mono_now() + g->timeout_s : 0;
        p->kind = h->kind;
        snprintf(p->group, sizeof p->group, "%s", g->name);
    }
    pthread_mutex_unlock(&pending_mu);
    return room;
}

// ---- process

static ct_status nccl_init(int *argc, char ***argv) {
    if (ct_comm_backend_mpi.init(argc, argv) != CT_OK) return CT_ERR;
    if (comm_stream) return CT_OK;
    // One GPU per process: the local rank (ranks sharing this node) picks the device.
    MPI_Comm local;
    int lrank = 0, ndev = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) != MPI_SUCCESS)
        return ct_set_error("comm: MPI_Comm_split_type (node-local ranks) failed");
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_free(&local);
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1)
        return ct_set_error("comm: the nccl backend needs a CUDA device, and this process sees none");
    if (cudaSetDevice(lrank % ndev) != cudaSuccess)
        return ct_set_error("comm: cudaSetDevice(%d) failed", lrank % ndev);
    if (cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking) != cudaSuccess)
        return ct_set_error("comm: cudaStreamCreate for the communication stream failed");
    if (cudaMalloc((void **)&barrier_buf, sizeof(float)) != cudaSuccess ||
        cudaMemset(barrier_buf, 0, sizeof(float)) != cudaSuccess)
        return ct_set_error("comm: cudaMalloc of the barrier's float failed");
    watch_device = lrank % ndev;
    atomic_store(&watchdog_stop, false);
    // Without the thread every wait polls on the host (comm.c's loop and timeout), as before.
    watchdog_running = pthread_create(&watchdog, NULL, watchdog_main, NULL) == 0;
    return CT_OK;
}

static void nccl_finalize(void) {
    if (watchdog_running) {
        atomic_store(&watchdog_stop, true);
        pthread_join(watchdog, NULL);
        watchdog_running = false;
    }
    if (comm_stream) cudaStreamSynchronize(comm_stream);  // every watched operation has finished
    for (int i = 0; i < n_pending; i++) cudaEventDestroy(pending[i].done);
    n_pending = 0;
    if (barrier_buf) cudaFree(barrier_buf);
    if (comm_stream) cudaStreamDestroy(comm_stream);
    barrier_buf = NULL;
    comm_stream = NULL;
    ct_comm_backend_mpi.finalize();
}

// ---- groups: an MPI communicator and the NCCL one made over it

static ct_status make_group(ct_group *out, MPI_Comm mc) {
    MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(mc, &out->rank);
    MPI_Comm_size(mc, &out->size);
    ncclUniqueId id;
    if (out->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
        return ct_set_error("comm: ncclGetUniqueId for group %s failed", out->name);
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mc) != MPI_SUCCESS)
        return ct_set_error("comm: broadcasting the NCCL id of group %s failed", out->name);
    nccl_group n = {NULL, mc};
    ncclResult_t r = ncclCommInitRank(&n.nccl, out->size, id, out->rank);
    if (r != ncclSuccess)
        return ct_set_error("comm: ncclCommInitRank for group %s failed: %s", out->name, ncclGetErrorString(r));
    memset(&out->backend, 0, sizeof out->backend);
    memcpy(out->backend.raw, &n, sizeof n);
    return CT_OK;
}

static ct_status nccl_group_world(ct_group *out) {
    MPI_Comm mc;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &mc) != MPI_SUCCESS) return ct_set_error("comm: MPI_Comm_dup failed");
    return make_group(out, mc);
}

static ct_status nccl_group_split(ct_group *parent, int color, int key, ct_group *out) {
    MPI_Comm mc;
    if (MPI_Comm_split(group_of(parent).mpi, color, key, &mc) != MPI_SUCCESS)
        return ct_set_error("comm: MPI_Comm_split of group %s failed", parent->name);
    return make_group(out, mc);
}

static void nccl_group_free(ct_group *g) {
    nccl_group n = group_of(g);
    if (n.nccl) ncclCommDestroy(n.nccl);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up) MPI_Finalized(&down);
    if (up && !down && n.mpi != MPI_COMM_NULL && n.mpi != NULL) MPI_Comm_free(&n.mpi);
    memset(&g->backend, 0, sizeof g->backend);
}

// ---- the control plane: host buffers through MPI

// Whether p is ordinary host memory (not a device or managed allocation NCCL can use).
static bool host_memory(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();  // an unregistered host pointer on older runtimes
        return true;
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

// True when the operation's buffers are on the host (then done here, h finished); false when
// both are on the device. One of each is fatal.
static bool control_plane(ct_group *g, ct_comm_kind k, const void *send, const void *recv, ct_comm_handle *h) {
    bool hs = host_memory(send), hr = host_memory(recv);
    if (hs != hr)
        ct_fatal("comm", "%s on group %s: one buffer is in host memory and the other on the GPU", ct_comm_kind_name(k),
                 g->name);
    if (hs) memset(&h->backend, 0, sizeof h->backend);  // no event: finished
    return hs;
}

static MPI_Datatype mpi_type(const ct_group *g, ct_comm_kind k, ct_dtype dt) {
    switch (dt) {
    case CT_F32: return MPI_FLOAT;
    case CT_F64: return MPI_DOUBLE;
    case CT_I32: return MPI_INT32_T;
    case CT_I64: return MPI_INT64_T;
    case CT_U8: return MPI_UINT8_T;
    default:
        ct_fatal("comm", "%s on group %s: %s data in host memory (the control plane moves f32, f64, i32, i64, u8)",
                 ct_comm_kind_name(k), g->name, ct_dtype_name(dt));
    }
}

static void check_mpi(int rc, const char *what, const ct_group *g) {
    if (rc != MPI_SUCCESS) ct_fatal("comm", "%s on group %s (host memory, through MPI) failed", what, g->name);
}

// ---- starts: order after the compute stream, run on the comm stream, remember `done`

static ncclComm_t begin(ct_group *g, const char *what) {
    cudaEvent_t ready;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), what, g);
    check_cuda(cudaEventRecord(ready, 0), what, g);  // the compute stream's work so far
    check_cuda(cudaStreamWaitEvent(comm_stream, ready, 0), what, g);
    cudaEventDestroy(ready);  // destroying a recorded event is allowed; the wait still holds
    return group_of(g).nccl;
}

static void end(ct_group *g, ct_comm_handle *h, const char *what) {
    cudaEvent_t done;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), what, g);
    check_cuda(cudaEventRecord(done, comm_stream), what, g);
    memset(&h->backend, 0, sizeof h->backend);
    memcpy(h->backend.raw, &done, sizeof done);
}

static void nccl_all_reduce(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt, ct_comm_op op,
                            ct_comm_handle *h) {
    if (control_plane(g, CT_COMM_ALL_REDUCE, send, recv, h)) {
        if (count > (size_t)INT_MAX) ct_fatal("comm", "all_reduce on group %s: %zu host values", g->name, count);
        check_mpi(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count,
                                mpi_type(g, CT_COMM_ALL_REDUCE, dt), op == CT_COMM_MAX ? MPI_MAX : MPI_SUM,
                                group_of(g).mpi),
                  "all_reduce", g);
        return;
    }
    ncclComm_t c = begin(g, "all_reduce");
    check_nccl(ncclAllReduce(send, recv, count, nccl_type(g, CT_COMM_ALL_REDUCE, dt),
                             nccl_op(g, CT_COMM_ALL_REDUCE, dt, op), c, comm_stream),
               "all_reduce", g);
    end(g, h, "all_reduce");
}

static void nccl_all_gather(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt,
                            ct_comm_handle *h) {
    if (control_plane(g, CT_COMM_ALL_GATHER, send, recv, h)) {
        if (count > (size_t)INT_MAX) ct_fatal("comm", "all_gather on group %s: %zu host values", g->name, count);
        MPI_Datatype t = mpi_type(g, CT_COMM_ALL_GATHER, dt);
        bool in_place = (const char *)send == (const char *)recv + (size_t)g->rank * count * ct_dtype_size(dt);
        check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)count, t, recv, (int)count, t, group_of(g).mpi),
                  "all_gather", g);
        return;
    }
    ncclComm_t c = begin(g, "all_gather");
    check_nccl(ncclAllGather(send, recv, count, nccl_type(g, CT_COMM_ALL_GATHER, dt), c, comm_stream), "all_gather",
               g);
    end(g, h, "all_gather");
}

static void nccl_reduce_scatter(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt,
                                ct_comm_op op, ct_comm_handle *h) {
    ncclComm_t c = begin(g, "reduce_scatter");
    check_nccl(ncclReduceScatter(send, recv, count, nccl_type(g, CT_COMM_REDUCE_SCATTER, dt),
                                 nccl_op(g, CT_COMM_REDUCE_SCATTER, dt, op), c, comm_stream),
               "reduce_scatter", g);
    end(g, h, "reduce_scatter");
}

static void nccl_broadcast(ct_group *g, void *buf, size_t count, ct_dtype dt, int root, ct_comm_handle *h) {
    if (control_plane(g, CT_COMM_BROADCAST, buf, buf, h)) {
        if (count > (size_t)INT_MAX) ct_fatal("comm", "broadcast on group %s: %zu host values", g->name, count);
        check_mpi(MPI_Bcast(buf, (int)count, mpi_type(g, CT_COMM_BROADCAST, dt), root, group_of(g).mpi), "broadcast",
                  g);
        return;
    }
    ncclComm_t c = begin(g, "broadcast");
    check_nccl(ncclBroadcast(buf, buf, count, nccl_type(g, CT_COMM_BROADCAST, dt), root, c, comm_stream),
               "broadcast", g);
    end(g, h, "broadcast");
}

static void nccl_send(ct_group *g, const void *buf, size_t count, ct_dtype dt, int peer, int tag,
                      ct_comm_handle *h) {
    ncclComm_t c = begin(g, "send");
    check_nccl(ncclSend(buf, count, nccl_type(g, CT_COMM_SEND, dt), peer, c, comm_stream), "send", g);
    end(g, h, "send");
}

static void nccl_recv(ct_group *g, void *buf, size_t count, ct_dtype dt, int peer, int tag, ct_comm_handle *h) {
    ncclComm_t c = begin(g, "recv");
    check_nccl(ncclRecv(buf, count, nccl_type(g, CT_COMM_RECV, dt), peer, c, comm_stream), "recv", g);
    end(g, h, "recv");
}

// Device buffers: one send and one receive per peer with something to move, in one NCCL group.
// Host buffers (the counts exchange): MPI's own all-to-all-v, blocking.
static void nccl_all_to_all_v(ct_group *g, const void *send, const size_t *send_counts, const size_t *send_displs,
                              void *recv, const size_t *recv_counts, const size_t *recv_displs, ct_dtype dt,
                              ct_comm_handle *h) {
    const ct_comm_kind k = CT_COMM_ALL_TO_ALL;
    if (control_plane(g, k, send, recv, h)) {
        int n = g->size, ints[4 * 1024];
        if (n > 1024) ct_fatal("comm", "all_to_all on group %s: %d ranks on the host path (at most 1024)", g->name, n);
        for (int p = 0; p < n; p++) {
            size_t v[4] = {send_counts[p], send_displs[p], recv_counts[p], recv_displs[p]};
            for (int i = 0; i < 4; i++) {
                if (v[i] > (size_t)INT_MAX) ct_fatal("comm", "all_to_all on group %s: %zu host values", g->name, v[i]);
                ints[i * n + p] = (int)v[i];
            }
        }
        MPI_Datatype t = mpi_type(g, k, dt);
        check_mpi(MPI_Alltoallv(send, ints, ints + n, t, recv, ints + 2 * n, ints + 3 * n, t, group_of(g).mpi),
                  "all_to_all", g);
        return;
    }
    size_t es = ct_dtype_size(dt);
    ncclDataType_t t = nccl_type(g, k, dt);
    ncclComm_t c = begin(g, "all_to_all");
    check_nccl(ncclGroupStart(), "all_to_all", g);
    for (int p = 0; p < g->size; p++) {
        if (send_counts[p])
            check_nccl(ncclSend((const char *)send + send_displs[p] * es, send_counts[p], t, p, c, comm_stream),
                       "all_to_all", g);
        if (recv_counts[p])
            check_nccl(ncclRecv((char *)recv + recv_displs[p] * es, recv_counts[p], t, p, c, comm_stream),
                       "all_to_all", g);
    }
    check_nccl(ncclGroupEnd(), "all_to_all", g);
    end(g, h, "all_to_all");
}

// Every rank's barrier is an all-reduce of one float: none completes before all have started.
static void nccl_barrier(ct_group *g, ct_comm_handle *h) {
    ncclComm_t c = begin(g, "barrier");
    check_nccl(ncclAllReduce(barrier_buf, barrier_buf, 1, ncclFloat32, ncclSum, c, comm_stream), "barrier", g);
    end(g, h, "barrier");
}

static bool nccl_test(ct_comm_handle *h) {
    cudaEvent_t done;
    memcpy(&done, h->backend.raw, sizeof done);
    if (!done) return true;  // the control plane finished it at its start
    cudaError_t e = cudaEventQuery(done);
    if (e == cudaErrorNotReady) {
        ncclResult_t async = ncclSuccess;  // a peer that failed shows here, not as a hang
        if (h->group && ncclCommGetAsyncError(group_of(h->group).nccl, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress)
            check_nccl(async, ct_comm_kind_name(h->kind), h->group);
        // Still running: order the compute stream after it and let the watchdog own the event.
        if (!watchdog_running || !h->group) return false;
        check_cuda(cudaStreamWaitEvent(0, done, 0), ct_comm_kind_name(h->kind), h->group);  // compute after comm
        if (!watch(h, done)) return false;  // list full: comm.c polls (the stream wait is harmless twice)
        memset(&h->backend, 0, sizeof h->backend);
        return true;
    }
    check_cuda(e, ct_comm_kind_name(h->kind), h->group);
    check_cuda(cudaStreamWaitEvent(0, done, 0), ct_comm_kind_name(h->kind), h->group);  // compute after comm
    cudaEventDestroy(done);
    memset(&h->backend, 0, sizeof h->backend);
    return true;
}

// ---- the job's view for ct_fatal, and the timeout's diagnosis: MPI's, as in comm_mpi.c
static bool mpi_up(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    if (up) MPI_Finalized(&down);
    return up && !down;
}
static int hook_rank(void *ctx) {
    int r = 0;
    if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
static int hook_size(void *ctx) {
    int n = 1;
    if (mpi_up()) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}
static void hook_abort(void *ctx, int code) {
    if (mpi_up()) MPI_Abort(MPI_COMM_WORLD, code);
}
static const ct_abort_hook nccl_abort_hook = {NULL, hook_rank, hook_size, hook_abort};

static void watch_answer(const char *waiting_on) { ct_comm_backend_mpi.watch_answer(waiting_on); }
static int watch_ask(double seconds, const char *waiting_on, char (*what)[64], int cap) {
    return ct_comm_backend_mpi.watch_ask ? ct_comm_backend_mpi.watch_ask(seconds, waiting_on, what, cap) : 0;
}

const ct_comm_backend ct_comm_backend_nccl = {
    .name = "nccl",
    .init = nccl_init,
    .finalize = nccl_finalize,
    .abort_hook = &nccl_abort_hook,
    .group_world = nccl_group_world,
    .group_split = nccl_group_split,
    .group_free = nccl_group_free,
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .all_to_all_v = nccl_all_to_all_v,
    .test = nccl_test,
    .watch_answer = watch_answer,
    .watch_ask = watch_ask,
};
