// Process groups and their collectives: the one interface every parallel strategy talks to.
// The transport is a backend chosen at run time (comm/backend.h): "mpi" (comm_mpi.c) for CPU
// runs, "nccl" (comm_nccl.c, a CUDA=1 build) for GPU runs. comm.c implements these declarations once, for every backend, and
// each group remembers the backend that made it, so nothing above comm/ names MPI.
//
// Rules every function here follows:
// - Collectives cannot fail softly. An MPI error, or a collective that does not complete within
//   its group's timeout, ends the whole job through ct_fatal with one line
//   "[rank R] comm: <collective> on group <name> ..." -- never a hang, never a crash.
//   Bad arguments (a peer outside the group, overlapping reduce-scatter buffers, a reduction
//   on u8 bytes) end it the same way.
// - Blocking calls are the non-blocking call followed by ct_comm_wait, so both share one
//   timeout path and one set of statistics.
// - Buffers hold `count` elements of `dtype`; counts are per call, never in bytes.
// - Reductions (all_reduce, reduce_scatter; SUM and MAX) take f32, f64, i32, i64 and bf16.
//   bf16 is reduced pairwise: each combine widens both values to fp32, adds (or takes the max)
//   and rounds back to bf16 to nearest, ties to even, so a SUM over N ranks rounds N-1 times in
//   an order the transport picks (exact when every partial sum is representable in bf16). NaN
//   stays NaN; a bf16 MAX with a NaN anywhere is NaN. u8 can be moved but not reduced.
//
// Statistics. Every group counts, per kind of collective, the calls, the bytes this rank moves,
// and the seconds it spends waiting (inside ct_comm_wait, i.e. communication not hidden behind
// compute). "Bytes moved" is the ring-algorithm volume SENT by this rank, with N = group size
// and E = element size (4 for f32, 2 for bf16: a bf16 reduction moves half the bytes):
//   all_reduce(count)          2 (N-1)/N * count * E   (reduce-scatter then all-gather rings)
//   all_gather(count per rank)   (N-1)   * count * E   (= (N-1)/N of the gathered N*count)
//   reduce_scatter(count/rank)   (N-1)   * count * E   (= (N-1)/N of the N*count input)
//   broadcast(count)             count * E             (pipelined chain: each rank forwards once)
//   send(count) / recv(count)    count * E             (recv counts bytes received)
//   all_to_all_v(send_counts)    Σ over other ranks p of send_counts[p] * E
//   barrier                      0
// A group of one moves 0 bytes in every collective. FSDP's step (all-gather forward, all-gather
// backward, reduce-scatter of gradients) thus shows 3 * Psi * (N-1)/N elements.
//
// Progress of non-blocking operations. MPI advances a non-blocking collective, and the rendezvous
// of any message above the shared-memory eager limit (4 KiB), only while the process is inside an
// MPI call; OpenMPI 4.1 as installed here has no asynchronous progress of its own (ompi_info:
// "OMPI progress: no"), and over shared memory the receiver copies the data itself (CMA) inside
// such a call. ctitan runs no progress thread: a caller that keeps operations in flight across
// compute calls ct_comm_test on them at its natural points -- FSDP at every acquire and release
// of a layer group -- and ct_comm_wait where it needs the result. Measured with
// bench/bench_async (4 ranks, FSDP 4 and FSDP 2 x tp 2, on a 2-core machine): a progress thread
// (MPI_THREAD_MULTIPLE, MPI_Iprobe every 20 or 100 us) left FSDP waiting 0.46-0.96 (once 2.4) of
// the blocking time, testing at layer boundaries 0.15-0.45, and not testing at all 0.17-0.52;
// the thread also takes cores from the compute threads and puts every MPI call on the
// thread-safe path. What prefetching buys here is that by the time a rank needs a group, its
// peers have posted their parts. (NCCL progresses on its own stream and needs neither.)
#ifndef CT_COMM_H
#define CT_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/error.h"

typedef enum { CT_COMM_SUM = 0, CT_COMM_MAX } ct_comm_op;

typedef enum {
    CT_COMM_ALL_REDUCE = 0,
    CT_COMM_ALL_GATHER,
    CT_COMM_REDUCE_SCATTER,
    CT_COMM_BROADCAST,
    CT_COMM_SEND,
    CT_COMM_RECV,
    CT_COMM_BARRIER,
    CT_COMM_ALL_TO_ALL,
    CT_COMM_NKINDS
} ct_comm_kind;

typedef struct {
    long long calls;
    double bytes;      // per the table above
    double wait_s;     // seconds inside ct_comm_wait (blocking calls: their whole duration)
} ct_comm_stat;

// Backend storage (an MPI_Comm / MPI_Request, a ncclComm_t / cudaEvent_t), kept by value so
// that a handle needs no allocation in the training step.
typedef union {
    void *ptr;
    long long i;
    unsigned char raw[16];
} ct_comm_opaque;

typedef struct ct_group {
    char name[32];                    // "world", "tp", "fsdp", ... (appears in error messages)
    int rank, size;                   // this process's rank in the group; the group's size
    double timeout_s;                 // a wait longer than this ends the job; <= 0: never
    ct_comm_opaque backend;           // MPI: the communicator
    const struct ct_comm_backend *ops;  // the backend that made the group; NULL: not made
    ct_comm_stat stats[CT_COMM_NKINDS];
} ct_group;

// One collective or send/recv in flight. Zero-initialised = nothing in flight (waiting on it is
// a no-op). Wait exactly once on every handle a *_start call returned.
typedef struct {
    ct_group *group;                  // NULL once waited on
    ct_comm_kind kind;
    double bytes;                     // added to the stats when the wait completes
    ct_comm_opaque backend;           // MPI: the request
} ct_comm_handle;

enum { CT_COMM_DEFAULT_TIMEOUT_S = 300 };

// Process start/end. ct_comm_init starts the selected backend ("mpi" unless ct_comm_select
// chose another) and lets ct_fatal name this rank and end every process of the job. Idempotent.
// The MPI backend starts MPI (funneled threads: OpenMP threads never call comm) unless it is
// already running, and makes MPI errors return instead of aborting so that they reach ct_fatal
// with the rank and cause.
ct_status ct_comm_init(int *argc, char ***argv);
void ct_comm_finalize(void);
// Chooses the backend by name ("mpi"); before ct_comm_init (or naming the one running).
// Fails, with a message, for a name this build does not have.
ct_status ct_comm_select(const char *name);
// The backend selected or running: "mpi" by default.
const char *ct_comm_backend_name(void);

// Group over every process (name "world"). timeout_s: see ct_group.timeout_s.
ct_status ct_comm_group_world(ct_group *out, double timeout_s);
// Splits `parent` (collective over parent): processes passing the same color form one group,
// ranked by key (ties by parent rank). The new group inherits the parent's timeout.
ct_status ct_comm_group_split(ct_group *parent, int color, int key, const char *name,
                              ct_group *out);
void ct_comm_group_free(ct_group *g);

const char *ct_comm_kind_name(ct_comm_kind k);  // "all_reduce", "all_gather", ...

// ---- blocking collectives --------------------------------------------------------------
// all_reduce: recv[i] = op over ranks of send[i]; send == recv is in place.   // (count)
void ct_comm_all_reduce(ct_group *g, const void *send, void *recv, size_t count,
                        ct_dtype dt, ct_comm_op op);
// all_gather: recv = concat over ranks r of send_r.  send: (count)  recv: (size, count).
// send == recv + rank*count (this rank's chunk of recv) is in place.
void ct_comm_all_gather(ct_group *g, const void *send, void *recv, size_t count,
                        ct_dtype dt);
// reduce_scatter, equal chunks (the caller pads): send: (size, count) -> recv: (count) =
// op over ranks of chunk `rank` of their send. send and recv must not overlap.
void ct_comm_reduce_scatter(ct_group *g, const void *send, void *recv, size_t count,
                            ct_dtype dt, ct_comm_op op);
// broadcast: every rank's buf = root's buf.                                   // (count)
void ct_comm_broadcast(ct_group *g, void *buf, size_t count, ct_dtype dt, int root);
// Point to point; peer is a rank in g; tag >= 0 tells concurrent messages apart.
void ct_comm_send(ct_group *g, const void *buf, size_t count, ct_dtype dt, int peer, int tag);
void ct_comm_recv(ct_group *g, void *buf, size_t count, ct_dtype dt, int peer, int tag);
void ct_comm_barrier(ct_group *g);
// all_to_all_v: to each rank p of g, send[send_displs[p], + send_counts[p]); from each rank p,
// recv_counts[p] elements into recv[recv_displs[p], ...). Counts and displacements are in
// elements, host arrays of g->size entries that must stay untouched until the wait. What p sends
// here must be what this rank expects from p: ct_comm_all_to_all sends the counts first.
// Expert parallelism's dispatch of tokens to their experts' ranks, and the combine back.
void ct_comm_all_to_all_v(ct_group *g, const void *send, const size_t *send_counts, const size_t *send_displs,
                          void *recv, const size_t *recv_counts, const size_t *recv_displs, ct_dtype dt);
// all_to_all with equal blocks: recv[p·count, + count) = what rank p sent as send[rank·count, +
// count). send, recv: (size, count). How the counts of an all_to_all_v go round first.
void ct_comm_all_to_all(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt);
// For a step that may fail on some ranks only (a file write, a check): every rank passes its own
// outcome and all return the same one. CT_OK when every rank succeeded; else CT_ERR on every
// rank with the lowest failing rank's message, "rank R: <its message>" (just the message when
// every rank failed, or in a group of one). Collective over g.
ct_status ct_comm_agree(ct_group *g, ct_status local);
// Whether ct_last_error() is a message ct_comm_agree gave every rank of its group, or one that
// wraps it with more context (so each rank may end on its own, without aborting the others, and
// one of them print it).
bool ct_comm_error_is_agreed(void);
// Marks ct_last_error() as agreed again (after a caller re-set the same message).
void ct_comm_mark_agreed(void);

// ---- non-blocking: same semantics; buffers must stay untouched until ct_comm_wait -------
ct_comm_handle ct_comm_all_reduce_start(ct_group *g, const void *send, void *recv, size_t count,
                                        ct_dtype dt, ct_comm_op op);
ct_comm_handle ct_comm_all_gather_start(ct_group *g, const void *send, void *recv, size_t count,
                                        ct_dtype dt);
ct_comm_handle ct_comm_reduce_scatter_start(ct_group *g, const void *send, void *recv,
                                            size_t count, ct_dtype dt, ct_comm_op op);
ct_comm_handle ct_comm_all_to_all_v_start(ct_group *g, const void *send, const size_t *send_counts,
                                          const size_t *send_displs, void *recv, const size_t *recv_counts,
                                          const size_t *recv_displs, ct_dtype dt);
ct_comm_handle ct_comm_broadcast_start(ct_group *g, void *buf, size_t count, ct_dtype dt,
                                       int root);
ct_comm_handle ct_comm_send_start(ct_group *g, const void *buf, size_t count, ct_dtype dt,
                                  int peer, int tag);
ct_comm_handle ct_comm_recv_start(ct_group *g, void *buf, size_t count, ct_dtype dt,
                                  int peer, int tag);

// Blocks until done (or the group's timeout passes: the job ends). Counts the wait time.
void ct_comm_wait(ct_comm_handle *h);
// Makes progress (MPI: on every operation in flight, not only h); true when done (then the handle
// is finished as by ct_comm_wait, with no wait time counted). Never blocks.
bool ct_comm_test(ct_comm_handle *h);

// ---- statistics ---------------------------------------------------------------------------
void ct_comm_stats_reset(ct_group *g);
// Sum of the bytes of every kind (what a step moved on this group).
double ct_comm_stats_total_bytes(const ct_group *g);
// One line per kind that was used: "comm <group> <kind>: calls C, bytes B, wait S s".
// Writes at most n bytes (NUL-terminated); returns the length it wanted, like snprintf.
int ct_comm_stats_format(const ct_group *g, char *buf, size_t n);
#endif
