// The one place that takes a model and a device mesh and applies the parallel strategies to one
// rank's share of it, in the order TorchTitan's parallelize_llama and pipeline_llama apply them:
// the pipeline split first decides which stages this rank holds, then on those stages tensor
// parallel, context parallel, activation checkpointing, compile (fused kernels) and data
// sharding, and last the executor with the pipeline schedules it runs the stages by.
//
// The trainer runs it to allocate (train/stages.c); the planner's memory model runs it with a
// ct_mem_sizing (core/mem_sizing.h) to count what a run would allocate, so that the two cannot
// drift apart.
#ifndef CT_PARALLELIZE_H
#define CT_PARALLELIZE_H
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

// ------------------------------------------------------------------ policies from the settings

ct_reshard_policy ct_parallelize_reshard_policy(const ct_config *cfg);
// activation_checkpoint.*: none; full (every block); selective with option "op" (every block
// keeps its matmul and attention outputs) or N (every N-th block full).
ct_ac_policy ct_parallelize_ac_policy(const ct_config *cfg);
// Stages per pp rank: as set, except that a looped schedule (interleaved 1F1B, looped BFS, ZBV)
// cannot run one stage per rank, so the default 1 means 2 there, as in TorchTitan.
int ct_parallelize_stages_per_rank(const ct_config *cfg, int pp);

// Tensor parallel over `group` from the settings (sequence parallel when the group has more than
// one rank, loss parallel unless disabled, async reductions), reading the parameters in `store`
// (data sharding builds it, later).
ct_tp ct_parallelize_tp(const ct_config *cfg, const ct_kernels *k, ct_group *group, ct_param_store *store);

// The token dimensions every rank of a layout computes with, from the settings and the tp and cp
// degrees.
typedef struct {
    ct_cp_balance cp_balance;  // context_parallel.load_balancer
    long seq_local;            // T / cp tokens of each sequence on this rank
    int mb_seqs;               // sequences per micro-batch the stages run (pipeline micro-batch size)
} ct_parallel_dims;
// CT_ERR with one line when cp does not split the sequence as its balancer needs, or sequence
// parallel cannot split a micro-batch's tokens over tp.
ct_status ct_parallelize_dims(const ct_config *cfg, int tp, int cp, ct_parallel_dims *d);

// ------------------------------------------------------------------ set-up

// Generated pipeline lists of every pp rank, kept between calls that share them: the planner
// sizes one layout once per pp rank, and building all pp lists costs O(pp x micro-batches).
// The caller owns it: zero-initialise it, pass it to any number of ct_parallelize calls, then
// free it with ct_parallelize_cache_free.
typedef struct {
    char name[64];       // pipeline_schedule the lists were built for ("": none held)
    int pp, vpp, n_mb;
    ct_schedule *lists;  // (pp)
    // The parameter table sizing last used, and the (model, tp) it was built for: only the shapes
    // decide it, and building one names every tensor.
    bool table_built;
    ct_model_config table_model;
    int table_tp;
    ct_param_table table;
} ct_parallelize_cache;
void ct_parallelize_cache_free(ct_parallelize_cache *c);

// Everything the set-up is built from: the run's groups (real, or for sizing plain structs holding
// only size and rank) and this rank's model dimensions.
typedef struct {
    const ct_config *cfg;
    const ct_kernels *k;
    const ct_model_config *model;        // the whole model
    const ct_model_config *local_model;  // this tp rank's dimensions
    const ct_param_table *table;         // this tp (and ep) rank's slice of every tensor
    ct_group *fsdp, *replicate, *cp, *pp;
    // Expert parallelism (NULL, or groups of one rank: none): the ep group the routed experts are
    // split over, and the expert shard group FSDP shards them over (comm/mesh.h).
    ct_group *ep, *expert_shard;
    ct_tp *tp;                           // tensor parallel (its group of size 1: none)
    ct_precision prec;                   // parallel/precision_policy.h
    ct_cp_balance cp_balance;
    const int32_t *cp_pos;               // (T / cp) this rank's positions, NULL without cp
    long seq_local;                      // T / cp
    int mb_seqs;                         // sequences per micro-batch the stages run
    ct_model_weights *weights, *grad_views;  // views FSDP points (NULL when sizing)
    ct_mem_sizing *sizing;               // NULL: allocate; else count (core/mem_sizing.h)
    // NULL: generate this run's pipeline lists and check them by simulating every rank's (a run).
    // Else generated lists come from and go to this cache unchecked (the planner: the generators
    // are checked by their own tests, and a run checks its lists again at start-up). A
    // pipeline_schedule_file is always read and checked.
    ct_parallelize_cache *cache;
} ct_parallelize_env;

// One rank's parallelized model.
typedef struct {
    // Set by the caller before ct_parallelize: where the pieces the rest of the run points into
    // are built. ct_parallelize initialises them and ct_parallelized_free frees them.
    ct_fsdp *fsdp;
    ct_cp *cp;
    ct_executor *exec;  // with its gradient reducers (FSDP replicas, tp-replicated tensors)
    ct_schedule *train_schedule, *eval_schedule;
    // Made by ct_parallelize, freed by ct_parallelized_free.
    int pp_rank;         // this rank's place in the pipeline
    int n_stages;        // pipeline_degree x stages per rank
    int *stage_rank;     // (n_stages) pp rank running each stage
    int *first_layer;    // (n_stages + 1) stage s computes blocks [first[s], first[s+1])
    ct_stage *stages;    // (n_stages) initialised only where stage_rank[s] is this rank
    int n_mb;            // micro-batches per step (accumulation x pipeline micro-batches)
} ct_parallelized;

// Stage placement, tensor and context parallel, checkpointing, data sharding, stages, executor and
// schedules for this pp rank (env->pp->rank). CT_ERR with one line (a schedule that cannot run,
// checkpointing with a split backward, ...); what was built by then is still freed by
// ct_parallelized_free.
ct_status ct_parallelize(const ct_parallelize_env *env, ct_parallelized *out);
// Frees everything ct_parallelize built, also after it failed, and zeroes what it made (the
// caller's addresses stay; NULL ones are skipped); freeing twice is harmless, and so is freeing a
// zeroed ct_parallelized that ct_parallelize never saw.
void ct_parallelized_free(ct_parallelized *p);
#endif
