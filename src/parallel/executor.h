// The executor runs one rank's list of actions (parallel/schedule.h) over the stages this rank
// holds: forwards and backwards on activation slots, sends and receives of activations and
// gradients between stages, and the step-level gradient reduction. A training step of any
// layout is one schedule run by this one code path.
//
// Slots: each stage gets as many activation slots as the schedules it will run need at once
// (counted at plan time from each micro-batch's first action on the stage to its last use, plus
// one for a receive posted ahead); a micro-batch takes a free slot at its first action on a stage
// and gives it back after its last use. Sends are non-blocking and complete before their slot is
// reused (or at the end of the step). The next receive in the list is posted before each
// compute action runs, so its data arrives while this rank computes; it completes at its own
// action, before anything reads it.
// Consecutive stages that are both on this rank pass their tensors by copy instead.
#ifndef CT_EXECUTOR_H
#define CT_EXECUTOR_H
#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/stage.h"
#include "parallel/schedule.h"

typedef struct {
    const int32_t *inputs;   // (B, T) tokens
    const int32_t *targets;  // (B, T) next tokens, -1 ignored
    const int32_t *docs;     // (B, T) document ids (model.attn_mask_type block_causal), or NULL
    const int32_t *rope_pos; // (B, T) RoPE positions from 0 at each document (model.rope_positions document), or NULL
} ct_microbatch;

// Step-level gradient reduction, run by REDUCE_GRADS in the order added (e.g. the replicas'
// all-reduce, then the sum of replicated tensors' gradients over tp).
typedef struct {
    void *ctx;
    void (*fn)(void *ctx);
} ct_grad_reducer;

enum { CT_EXECUTOR_MAX_REDUCERS = 4 };

typedef struct {
    int n_stages;                 // stages of the whole model (global numbering)
    ct_stage **stage;             // (n_stages) this rank's stages; NULL where another rank runs it
    ct_group *pp;                 // pipeline group for sends and receives (NULL: no pipeline)
    const int *stage_rank;        // (n_stages) pp rank that runs each stage (NULL: no pipeline)
    ct_grad_reducer reducers[CT_EXECUTOR_MAX_REDUCERS];
    int n_reducers;
    bool trace;                   // print every action as it starts; off after init (the trainer
                                  // sets it from profiling.trace_actions)

    int max_mb;                   // micro-batches the planned schedules use
    int *slot_of;                 // (n_stages, max_mb) slot a micro-batch holds, or -1
    int *last_use;                // (n_stages, max_mb) index of its last action in the running list
    ct_comm_handle *pending;      // (n_stages, max slots) a send still reading the slot
    int max_slots;

    // The last run's measured timeline: when each action of the list started and ended (seconds
    // on ct_now_seconds' clock), for bubble figures and trace files. Receives include their wait.
    double *t_start, *t_end;      // (timeline_cap)
    ct_comm_handle *early;        // (timeline_cap) receives posted ahead of their action
    int timeline_count, timeline_cap;

    double *loss_sum;             // (1) on the device: where the running list's head stages add their losses
    double *own_loss;             // (1) on the device: ct_executor_run's loss_sum
} ct_executor;

void ct_executor_init(ct_executor *e, int n_stages, ct_stage **stages, ct_group *pp, const int *stage_rank);
void ct_executor_free(ct_executor *e);
void ct_executor_add_reducer(ct_executor *e, void (*fn)(void *ctx), void *ctx);
// Sizes every local stage's slots for all the schedules given (each checked first: a schedule
// that cannot run is refused with ct_last_error before anything is allocated), n_mb[i] being
// schedule i's micro-batch count and training[i] whether it runs backward.
ct_status ct_executor_plan(ct_executor *e, const ct_schedule *const *schedules, const int *n_mb,
                           const bool *training, int n);
// Runs one planned schedule over micro-batches mbs (n_mb of them). grad_scale: 1 / valid
// tokens of the whole step. ct_executor_run_into adds the sum of token losses computed by this
// rank's head stage (nothing elsewhere) to *loss_sum, one double on the stages' device, and reads
// nothing back; ct_executor_run returns that sum, read back once at the end of the run.
double ct_executor_run(ct_executor *e, const ct_schedule *s, const ct_microbatch *mbs, int n_mb, bool training,
                       float grad_scale);
void ct_executor_run_into(ct_executor *e, const ct_schedule *s, const ct_microbatch *mbs, int n_mb, bool training,
                          float grad_scale, double *loss_sum);
#endif
