// The run's layout decisions from its configuration, and the building of its stages: one code
// path that the trainer runs to allocate (train/stages.c) and the planner's memory model runs to
// count (plan/memory_model.c, with a ct_mem_sizing), so that the two cannot drift apart.
//
//   policies        reshard_after_forward, activation checkpointing, stages per rank, precision
//                   (which block linears run in 8 bits)
//   stages          placement of stages on pp ranks and of blocks in stages, this rank's data
//                   sharding over its stages' groups, context parallel, the stages themselves,
//                   the executor, and the training / evaluation schedules it plans slots for
//   sizes           buffers the trainer and its optimizer / checkpointer allocate outside the
//                   stages (token buffers, AdamW state, async-checkpoint staging)
#ifndef CT_PLAN_LAYOUT_H
#define CT_PLAN_LAYOUT_H
#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/mem_sizing.h"
#include "model/stage.h"
#include "parallel/context_parallel.h"
#include "parallel/executor.h"
#include "parallel/fsdp.h"
#include "parallel/schedule.h"
#include "parallel/tensor_parallel.h"

ct_reshard_policy ct_layout_reshard_policy(const ct_config *cfg);
// activation_checkpoint.*: none; full (every block); selective with option "op" (every block
// keeps its matmul and attention outputs) or N (every N-th block full).
ct_ac_policy ct_layout_ac_policy(const ct_config *cfg);
// Stages per pp rank: as set, except that a looped schedule (interleaved 1F1B, looped BFS, ZBV)
// cannot run one stage per rank, so the default 1 means 2 there, as in TorchTitan.
int ct_layout_stages_per_rank(const ct_config *cfg, int pp);
// The precision (mixed_precision, quantization.*) for the whole model m under tp ranks: *f8
// (m->n_layers, allocated here, NULL when nothing runs in 8 bits) says which block linears are
// 8-bit, and p->f8_layers points at it. CT_ERR with one line on a filter that would put the
// output projection in 8 bits, or MXFP8 under a tp degree that leaves a rank's share of a split
// contraction dimension (heads x head_dim, kv heads x head_dim, FFN hidden) not a multiple of 32.
ct_status ct_layout_precision(const ct_config *c, const ct_model_config *m, int tp, ct_precision *p, uint8_t **f8);

// Sizing's generated pipeline lists, kept by the caller between calls: the planner sizes one
// layout once per pp rank, and many layouts share a schedule (every checkpointing mode,
// precision and replicate degree), while building all pp lists costs O(pp x micro-batches). A
// run builds its lists once and keeps none. Zeroed before first use; freed with
// ct_layout_schedule_cache_free.
typedef struct {
    char name[64];       // the schedule the lists are of ("" : none held)
    int pp, vpp, n_mb;
    ct_schedule *lists;  // (pp)
} ct_layout_schedule_cache;
void ct_layout_schedule_cache_free(ct_layout_schedule_cache *c);

// Everything the stages are built from: the run's groups (real, or for sizing plain structs
// holding only size and rank) and this rank's model dimensions.
typedef struct {
    const ct_config *cfg;
    const ct_kernels *k;
    const ct_model_config *model;        // the whole model
    const ct_model_config *local_model;  // this tp rank's dimensions
    const ct_param_table *table;         // this tp rank's slice of every tensor
    ct_group *fsdp, *replicate, *cp, *pp;
    ct_tp *tp;                           // tensor parallel (its group of size 1: none)
    ct_precision prec;
    ct_cp_balance cp_balance;
    const int32_t *cp_pos;               // (T / cp) this rank's positions, NULL without cp
    long seq_local;                      // T / cp
    int mb_seqs;                         // sequences per micro-batch the stages run
    ct_model_weights *weights, *grad_views;  // views FSDP points (NULL when sizing)
    ct_mem_sizing *sizing;               // NULL: allocate; else count (core/mem_sizing.h)
    ct_layout_schedule_cache *schedule_cache;  // sizing: generated lists kept between calls
                                               // (NULL: built each time)
} ct_layout_env;

// What is built, at the caller's addresses (the executor and stages keep pointers into them).
typedef struct {
    ct_fsdp *fsdp;
    ct_cp *cp;
    ct_executor *exec;
    ct_schedule *train_schedule, *eval_schedule;
    // set here (the caller frees them, also after a failure)
    int n_stages;        // pipeline_degree x stages per rank
    int *stage_rank;     // (n_stages) pp rank running each stage
    int *first_layer;    // (n_stages + 1) stage s computes blocks [first[s], first[s+1])
    ct_stage *stages;    // (n_stages) initialised only where stage_rank[s] is this rank
    int n_mb;            // micro-batches per step (accumulation x pipeline micro-batches)
} ct_layout_stages;

// Stage placement, data sharding, context parallel, stages, executor and schedules, planned for
// this pp rank (env->pp->rank). CT_ERR with one line (a schedule that cannot run, checkpointing
// with a split backward, ...). Does not add the executor's gradient reducers (the caller's).
ct_status ct_layout_build_stages(const ct_layout_env *env, ct_layout_stages *out);

// The step's scalars, doubles on the run's device (train/trainer.c): the loss sum, the
// gradients' sum of squares (both reduced there) and the clip factor (a float in the third),
// read back together once a step.
enum { CT_LAYOUT_STEP_SCALARS = 3 };

// Buffers outside the stages, in the units their owners allocate.
// The trainer's token buffers: (accum, B, T) inputs and targets as read, and with cp > 1 this
// rank's (accum, B, T / cp) of them: int32 elements per buffer.
long ct_layout_step_tokens(const ct_config *cfg);
// Async checkpoint staging for a rank that writes `owned` elements (train/checkpoint.c).
long ct_layout_ckpt_staging_floats(long owned);
#endif
