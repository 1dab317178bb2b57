// A communication backend: the transport half of comm.h, as one table of function pointers
// chosen at run time ("mpi", comm_mpi.c; "nccl", comm_nccl.c in a
// CUDA=1 build). comm/comm.c holds the other half -- argument
// checks every backend shares, the byte statistics, blocking = start + wait, the timeout -- and
// calls through the table of the group it was given, so a backend contains only transport.
//
// Contract of every member:
// - Failures do not return: a transport error ends the job through ct_fatal with the line
//   "comm: <kind> on group <name> ...", as comm.h promises. The exceptions are init and the
//   group makers, which return a status and leave a message, as their comm.h callers do.
// - comm.c has already checked what does not depend on the transport (peers and roots inside
//   the group, known dtypes and reductions, reduce-scatter overlap). A backend checks what only
//   it knows: which dtypes it can move or reduce, its count limits.
// - A start stores whatever it needs to finish the operation in h->backend (an MPI_Request, a
//   cudaEvent_t); comm.c has filled the rest of *h and does the statistics.
#ifndef CT_COMM_BACKEND_H
#define CT_COMM_BACKEND_H
#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"
#include "core/error.h"

typedef struct ct_comm_backend {
    const char *name;  // "mpi"

    // ---- process
    // Starts the transport for this process (idempotent) / ends it.
    ct_status (*init)(int *argc, char ***argv);
    void (*finalize)(void);
    // What ct_fatal uses to name this rank and end every process of the job; comm.c registers
    // it when init succeeds and removes it before finalize.
    const ct_abort_hook *abort_hook;

    // ---- groups: fill out->rank, out->size and out->backend (comm.c fills the rest)
    ct_status (*group_world)(ct_group *out);
    ct_status (*group_split)(ct_group *parent, int color, int key, ct_group *out);
    // Releases g->backend; must be safe after finalize (comm.c clears the group).
    void (*group_free)(ct_group *g);

    // ---- non-blocking starts, with the semantics and buffer shapes of comm.h's *_start
    void (*all_reduce)(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt,
                       ct_comm_op op, ct_comm_handle *h);
    void (*all_gather)(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt,
                       ct_comm_handle *h);
    void (*reduce_scatter)(ct_group *g, const void *send, void *recv, size_t count, ct_dtype dt,
                           ct_comm_op op, ct_comm_handle *h);
    void (*broadcast)(ct_group *g, void *buf, size_t count, ct_dtype dt, int root,
                      ct_comm_handle *h);
    void (*send)(ct_group *g, const void *buf, size_t count, ct_dtype dt, int peer, int tag,
                 ct_comm_handle *h);
    void (*recv)(ct_group *g, void *buf, size_t count, ct_dtype dt, int peer, int tag,
                 ct_comm_handle *h);
    void (*barrier)(ct_group *g, ct_comm_handle *h);
    // The count and displacement arrays (host, g->size entries) stay valid until the handle is
    // complete; a backend that needs them in another form keeps that form itself until then.
    void (*all_to_all_v)(ct_group *g, const void *send, const size_t *send_counts, const size_t *send_displs,
                         void *recv, const size_t *recv_counts, const size_t *recv_displs, ct_dtype dt,
                         ct_comm_handle *h);

    // ---- completion
    // Makes progress on h without blocking; true once the operation is complete. Called
    // repeatedly by ct_comm_wait's polling loop (which owns the timeout) and by ct_comm_test.
    bool (*test)(ct_comm_handle *h);

    // ---- the timeout's diagnosis: which process of the job is not waiting with the others
    // Answers the questions other processes asked (watch_ask) with what this one waits on; the
    // wait loop calls it while a wait lasts. Cheap when there is no question.
    void (*watch_answer)(const char *waiting_on);
    // Asks every other process of the job what it waits on and collects answers for `seconds`
    // (answering questions meanwhile with waiting_on): what[r] is rank r's answer, "" when it did not answer.
    // Returns the job's size (at most cap entries filled). NULL in a backend that cannot.
    int (*watch_ask)(double seconds, const char *waiting_on, char (*what)[64], int cap);
} ct_comm_backend;

// Each backend's table, defined in its own file (comm_mpi.c).
extern const ct_comm_backend ct_comm_backend_mpi;

// The backend called `name` ("mpi"), or NULL when this build has none by that name.
const ct_comm_backend *ct_comm_backend_get(const char *name);
#endif
