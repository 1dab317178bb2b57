// Saving and resuming the whole training state, collectively, in the distributed checkpoint
// format of checkpoint/dcp.h: every rank writes the pieces it owns, in parallel; rank 0 writes
// the manifest last, after every rank has reported its file synced, and renames the step folder
// into place. Loading reads the newest complete checkpoint (or checkpoint.load_step), whatever
// layout wrote it: each rank takes just the global ranges its shard descriptors name.
//
// The state: parameters and both AdamW moments (fp32 masters), the optimizer's step count, the
// step (which is also the learning-rate schedule's position), the data loader's (epoch,
// windows consumed by all data-parallel ranks together) -- a global sample position, so it
// reshards -- the seed and the effective configuration. That is all a step depends on, so a
// resumed run continues bit for bit as the uninterrupted one.
//
// Async (checkpoint.async_mode async): the pieces are copied into a staging buffer (allocated
// at start-up, CT_MEM_OTHER: one more copy of this rank's owned state) and a background thread writes and syncs the file while
// training goes on; the commit (manifest, rename) follows at the first step end where every
// rank's thread is done, or at the next save, which waits for the previous one.
//
// Signals: SIGINT / SIGTERM / SIGUSR1 on any rank set a flag; at the next step end every rank learns of it
// (one small all-reduce per step), saves when checkpointing is on, and stops -- within
// checkpoint.signal_grace_seconds, or the process ends anyway. A second signal ends the process
// at once.
//
// Every outcome is agreed over the world (ct_comm_agree): a rank that cannot write stops every
// rank with its message, and the .tmp folder of the failed save is left for the next start to
// remove; the previous checkpoint is untouched.
#ifndef CT_TRAIN_CHECKPOINT_H
#define CT_TRAIN_CHECKPOINT_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "checkpoint/dcp.h"
#include "core/config.h"
#include "train/train_state.h"

typedef struct {
    const ct_config *cfg;        // the run's settings: checkpoint.*, and config.toml in every save
    ct_train_state state;        // what is saved and loaded
    bool enabled, async;
    char folder[CT_DCP_PATH];    // <job.dump_folder>/<checkpoint.folder> (or the absolute folder)
    // This rank's pieces: every tensor shard it owns a copy of. Their data points at the live
    // parameters and moments (sync) or into staging (async).
    ct_dcp_piece *pieces;        // (n_pieces)
    int n_pieces;
    long owned_numel;            // Σ flat_count of the pieces
    float *staging;              // (3 · owned_numel) async copies; NULL unless async

    // A save written (or being written) but not committed yet.
    int pending_step;            // -1: none
    char pending_dir[CT_DCP_PATH + 8];  // its .tmp folder
    ct_dcp_manifest pending;     // the state at that step (files filled in at the commit)
    ct_dcp_file my_file;         // this rank's file, once written
    bool have_file;              // this rank owns pieces (a pure replica owns none)
    pthread_t thread;            // async writer
    bool thread_live;
    atomic_int thread_done;
    ct_status thread_status;
    char thread_error[1024];
    double save_start;           // when the save began (throughput: bytes over write time)
    double write_seconds;        // this rank's file write + sync
    double pause_seconds;        // what the save took from training on this rank
    int stop_signal;             // the signal that stopped the job (on any rank), once polled
    double last_save_seconds;    // the last save's write (slowest rank) and commit; 0: none yet
    bool nothing_left;           // resumed from a checkpoint at (or past) training.steps
    int last_saved_step;         // the newest complete checkpoint this run saved or resumed from; -1
} ct_checkpointer;

// Sets up from the run's settings and its state; c keeps cfg and the state's pointers, which must
// outlive it. Nothing is written yet.
void ct_checkpoint_init(ct_checkpointer *c, const ct_config *cfg, const ct_train_state *state);
void ct_checkpoint_free(ct_checkpointer *c);

// At start-up (collective): removes the leftovers of saves that died, then loads the newest
// complete checkpoint (or checkpoint.load_step) into the state. *resumed = false when there is
// none (and checkpointing off): a fresh start, said loudly when incomplete ones were removed.
// CT_ERR, with the same message on every rank, on a checkpoint that fails verification or does
// not fit the run.
ct_status ct_checkpoint_resume(ct_checkpointer *c, bool *resumed);

// checkpoint.initial_load_path naming a checkpoint's step folder: its parameters, under this
// run's layout, to start a new run from (step 0, fresh optimizer). Collective.
ct_status ct_checkpoint_load_weights(ct_checkpointer *c, const char *dir);

// Saves the state at its step (collective). Sync: written and committed on return. Async:
// staged and handed to the writer thread (after waiting for and committing the previous save).
// model_only: the parameters alone (the last save, checkpoint.last_save_model_only).
ct_status ct_checkpoint_save(ct_checkpointer *c, bool model_only);

// Once per step end (collective, cheap): commits an async save every rank has finished, and
// returns in *stop whether a stop signal reached any rank (which one: c->stop_signal).
ct_status ct_checkpoint_poll(ct_checkpointer *c, bool *stop);

// Waits for an async save in flight and commits it (collective). A no-op when none.
ct_status ct_checkpoint_finish(ct_checkpointer *c);

// SIGINT / SIGTERM / SIGUSR1 handlers (SIGUSR1: the stop mpirun passes on untouched, which
// scripts/run_train.sh sends it for a Ctrl-C), and the flag: the signal number caught, or 0. The
// first signal sets the flag and starts the grace (SIGALRM): the step in flight and its save must
// end within it, or the process ends with a line that says so, leaving the last complete
// checkpoint. A second signal ends the process at once -- except the launcher (mpirun, orted:
// this process's parent) passing on a SIGINT or SIGTERM it got itself (as SIGTERM), which is the
// same stop.
// `rank` is named in the lines the handlers write (-1: none).
void ct_checkpoint_catch_signals(int rank);
int ct_checkpoint_signal(void);

// The grace, in whole seconds (at least 1): checkpoint.signal_grace_seconds, or with 0 there
// ct_checkpoint_auto_grace of the last save, which every save updates.
#define CT_SIGNAL_GRACE_MIN 30
void ct_checkpoint_set_grace(double seconds);
int ct_checkpoint_grace(void);
double ct_checkpoint_auto_grace(double save_seconds);
#endif
