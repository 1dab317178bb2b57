// Fully sharded data parallel (ZeRO-3), as TorchTitan groups it: the embedding, each transformer
// block, and the final norm with the output projection are the units. Each group's flat
// parameters (one contiguous slice of the registry's block) are padded to a multiple of N and
// cut into N equal shards over the `fsdp` group (dp_shard × cp); this rank keeps shard `rank`
// of every group, with its gradients and optimizer state, so those fall as 1/N.
// Under expert parallelism a block's routed experts (its last tensors, E/ep experts on this rank)
// are a second part of its group, cut over the expert shard group instead (the N/ep ranks holding
// the same experts); each part is gathered and reduce-scattered on its own group into one slot.
//
// Around each group the model calls the weight operations: before use the shards are all-gathered into a
// full buffer (one of two slots, so at most two groups are ever whole at once; three under async,
// below) and the model's weight views are pointed at it; after backward the group's full gradient is reduce-scattered
// (fp32, sum) into this rank's gradient shard; `reshard_after_forward` decides whether a group
// is freed after forward and gathered again for backward:
//   always   every group is gathered twice (3·Ψ·(N−1)/N elements moved per micro-batch)
//   default  like always, except the last block and the head, whose backward follows at once
//   never    groups stay whole from forward to backward (less traffic, no memory saving there)
// With N = 1 every view points at the local shard and the hooks move nothing.
// Mixed precision (ct_fsdp_set_precision): the shards stay fp32 (master weights, optimizer
// state); what is gathered is their bf16 compute copy, rounded from the shard at each gather,
// so all-gathers move half the bytes. The gathered bf16 group stays in its slot (slot16), and
// the linear layers read their matrices from it (the blocks' t16 views, model/block.h); only the
// tensors something reads in fp32 -- norms, the embedding, the output projection, and every
// tensor when 8-bit layers quantise from fp32 -- are widened (exactly) into a smaller fp32 slot.
// So a gathered matrix costs 2 bytes an element and no pass, and every kernel reads the same
// bf16 values. Under bf16 even N = 1 goes through the slots, so one process computes with the
// same bf16 weights as N. Gradients are reduce-scattered in fp32, or in bf16 when the reduce
// dtype says so.
// Replicated data parallel (DDP, and HSDP with sharding) all-reduces the gradient shards over
// the `dp_replicate` group once per step (ct_fsdp_reduce_replicas).
// Asynchronous communication (ct_fsdp_set_async, parallelism.enable_async_comm): acquire starts
// the all-gather of the group that comes next (forward: the next block of the stage; backward,
// recompute and the head's fused backward: the one below that is not whole) before it waits for
// its own, and UNSHARD starts its gathers without waiting; release starts the gradient's
// reduce-scatter and returns, the result added into the shard when its buffer is needed again,
// at REDUCE_GRADS or at the end of the step -- oldest first, so every shard sums the same
// numbers in the same order as the blocking path and the results are the same bits. Bounded
// memory: three gather slots instead of two, two full-gradient buffers and two reduce-scatters
// in flight; under bf16 each slot and reduce-scatter has its own bf16 buffers. A prefetch that
// guessed wrong (the schedule went elsewhere) is only bytes: its slot is taken back when needed.
// Every decision follows the sequence of calls, never the timing, so all ranks of the shard
// group issue the same collectives in the same order.
#ifndef CT_FSDP_H
#define CT_FSDP_H
#include <stdbool.h>

#include "comm/comm.h"
#include "core/mem_sizing.h"
#include "model/weights.h"
#include "model/stage_ops.h"
#include "parallel/param_store.h"

typedef enum { CT_RESHARD_DEFAULT, CT_RESHARD_ALWAYS, CT_RESHARD_NEVER } ct_reshard_policy;

// A gradient reduce-scatter, from the group's whole gradient (src) to this rank's part (out),
// added into the gradient shard when it completes.
typedef struct {
    int group;                   // -1: the lane is free
    const float *src;            // (N·shard) the whole gradient: a full-gradient or an unshard buffer
    float *out;                  // (max shard) fp32 result
    uint16_t *send16, *recv16;   // bf16 reduce: the narrowed gradient and the bf16 result
    bool own16;                  // send16 / recv16 are this lane's own (planned)
    ct_comm_handle h[2];         // one per part of the group (dense, routed experts)
} ct_fsdp_rs;

typedef struct {
    const ct_kernels *k;         // the kernel backend the buffers belong to
    ct_device dev;               // and its device, where every buffer below lives
    const ct_param_table *table;
    ct_group *shard_group;       // fsdp: dp_shard × cp (size N)
    ct_group *expert_group;      // expert parallelism: the fsdp ranks holding the same experts
                                 // (N / ep), which shard the routed experts; NULL: none
    ct_group *replicate_group;   // dp_replicate (size R), gradients all-reduced over it
    ct_reshard_policy policy;
    int n_groups;

    // Per group g: padded size N·shard_numel[g], and where its shard sits in the local block.
    long *shard_numel;           // (n_groups)
    long *shard_offset;          // (n_groups) offset in params/grads
    // A group is two parts: its dense tensors, sharded over shard_group, and its routed experts'
    // (the group's last tensors), sharded over expert_group -- each part padded to a multiple of
    // its group's size, this rank's shard of part 0 then of part 1. Without an expert group part
    // 1 is empty.
    long *part_at;               // (n_groups) where part 1 starts in the group (its elements)
    long *shard0;                // (n_groups) this rank's shard of part 0; of part 1: shard_numel - shard0
    long *whole_at;              // (table->count) each tensor's place in its gathered group
    long local_numel;            // Σ shard_numel

    float *params;               // (local_numel) this rank's parameter shards
    float *grads;                // (local_numel) this rank's gradient shards
    ct_param_store store;        // the same buffers with a shard descriptor per tensor: what
                                 // other strategies, loading and export read
    ct_model_weights *weights;   // views the model reads (re-pointed by the hooks)
    ct_model_weights *grad_views;

    // Gather slots (params) and one full-gradient buffer, each of the largest padded group.
    // Two slots (at most two groups whole at once; three under async), or one per group under
    // `never`; more when a schedule's UNSHARD actions hold groups whole (reserve).
    long max_group_numel;
    int n_slots;
    long slot_numel;             // floats of each fp32 slot: max_group_numel, or under bf16 the
                                 // largest group's tensors read in fp32 (f32_at)
    float **slot;                // (n_slots) × (slot_numel) the gathered group (fp32 views)
    uint16_t **slot16;           // (n_slots) × (max_group_numel) bf16: the gathered compute copy
    long *f32_at;                // (table->count) bf16: each tensor's place in its fp32 slot, -1:
                                 // none (a linear tensor, read through its bf16 view)
    int *slot_group;             // (n_slots) which group is whole in each slot (-1: none)
    float *full_grad;            // (max_group_numel)
    float *rs_out;               // (max shard) reduce-scatter result before accumulation
    int *group_slot;             // (n_groups) slot holding the group, or -1
    bool *pinned;                // (n_groups) held whole by a schedule's UNSHARD until RESHARD
    bool *owned;                 // (n_groups) this rank's stages' groups (all without a pipeline)
    float **pin_grads;           // (n_pin_grads) whole-gradient buffers for unsharded groups
    int *pin_grad_user;          // (n_pin_grads) group using each, or -1
    int n_pin_grads;
    float **pin_grad_of;         // (n_groups) the buffer an unsharded group accumulates into, or NULL
    int *group_stage;            // (n_groups) pipeline stage of each group
    long max_shard_numel;
    ct_dtype param_dtype;        // the compute copy: CT_F32 (views on the shards when N = 1) or CT_BF16
    ct_dtype reduce_dtype;       // gradient reduce-scatter / all-reduce: CT_F32 or CT_BF16
    bool via_slots;              // weights are gathered into slots (N > 1, or a bf16 compute copy)
    uint16_t *shard16;           // (max_shard_numel) bf16: this rank's shard, narrowed
    uint16_t *comm16;            // (max_group_numel) bf16: the gathered group, or a group's gradient
    uint16_t *replica16;         // (local_numel) bf16 gradient shards for the replica all-reduce
    bool has16, has_replica16;   // shard16 / comm16, replica16 planned (their pointers stay NULL
                                 // when sizing)
    size_t buffer_bytes;         // every buffer here but the shards: what sharding adds per rank

    // Communication in flight. Blocking (the default) completes each operation at once, through
    // the same code: one lane aliasing rs_out / comm16 / shard16, one full-gradient buffer.
    bool async;
    ct_comm_handle *gather_h;    // (n_slots × 2) all-gathers into each slot, one per part
    bool *gather_open;           // (n_slots) started and not finished (waited, widened)
    bool *prefetched;            // (n_slots) gathered ahead of its acquire: may be taken back
    uint16_t **send16;           // (n_slots) bf16 narrowed shard to gather (async: each slot its own)
    int n_own16;                 // slots [0, n_own16) own their send16
    float **full;                // (n_full) whole-gradient buffers; full[0] == full_grad
    int n_full;
    float *grad_cur;             // the buffer the acquired group's gradient goes to
    ct_fsdp_rs *lanes;           // (n_lanes) reduce-scatters: a FIFO from rs_first, rs_count long
    int n_lanes, rs_first, rs_count;
    ct_mem_sizing *sizing;       // non-NULL: a sizing plan (ct_fsdp_init_sizing), never run
} ct_fsdp;

// Plans the shards and allocates params/grads (zeroed) and buffers. Views are set up to point
// at the local block when N = 1, else at nothing until gathered.
void ct_fsdp_init(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                  ct_group *replicate_group, ct_reshard_policy policy, ct_model_weights *weights,
                  ct_model_weights *grad_views);
// Under pipeline parallelism a rank holds only its stages' groups: owned[g] (n_groups) says
// which (the others get no shard, buffers or views), group_stage[g] the stage each belongs to
// (recorded in the shard descriptors). NULL: every group, stage 0.
// Under expert parallelism (t->ep_size > 1) the routed experts' tensors are sharded over
// expert_group (NULL without).
void ct_fsdp_init_placed(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                         ct_group *expert_group, ct_group *replicate_group, ct_reshard_policy policy,
                         ct_model_weights *weights, ct_model_weights *grad_views, const bool *owned,
                         const int *group_stage);
// The same planning without buffers: every buffer init, ct_fsdp_set_precision, ct_fsdp_set_async
// and a schedule's reserve would allocate is added to `sizing` instead (core/mem_sizing.h). The
// groups need only their size and rank (no communicator); the views are left alone. For the
// planner's memory model; such an fsdp can be planned and freed, never run.
void ct_fsdp_init_sizing(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                         ct_group *expert_group, ct_group *replicate_group, ct_reshard_policy policy,
                         const bool *owned, const int *group_stage, ct_mem_sizing *sizing);
void ct_fsdp_free(ct_fsdp *f);
// Mixed precision, once after init and before the first use: param (CT_F32 | CT_BF16) is the
// dtype weights are gathered and computed in, reduce (CT_F32 | CT_BF16) that of gradient
// reductions.
// widen_linears: under bf16, give the linear layers' tensors an fp32 copy as well (8-bit layers
// quantise from fp32).
void ct_fsdp_set_precision(ct_fsdp *f, ct_dtype param, ct_dtype reduce, bool widen_linears);
// Asynchronous communication (see above), once after init and before the first use.
void ct_fsdp_set_async(ct_fsdp *f, bool on);

// Initialises this rank's shards from (seed, name, global index): the same numbers as one process.
void ct_fsdp_init_params(ct_fsdp *f, uint64_t seed);

// The stage's weight operations (model/stage_ops.h): gather on acquire, reduce-scatter the
// gradient and free on release, everything freed on finish.
ct_weight_ops ct_fsdp_weight_ops(ct_fsdp *f);

// After the step's micro-batches: all-reduce gradient shards over the replicas (HSDP / DDP).
// A gradient reducer for the executor (ctx: the ct_fsdp).
void ct_fsdp_reduce_replicas(void *ctx);
// Gathers the whole flat parameter block (registry order) into full (table->total floats) on
// every rank: for checks, export and checkpoints; not for the step.
void ct_fsdp_gather_full(ct_fsdp *f, float *full);
// Element counts an ideal run of one micro-batch moves on the shard group (all-gathers and
// reduce-scatters as this policy schedules them), from the unpadded group sizes: the analytic
// figure the communication bench compares against.
double ct_fsdp_expected_elements(const ct_fsdp *f);
#endif
