// The planner's time model: one training step of a configuration on a hardware profile.
//
//   compute      matmul FLOPs per layer at an efficiency that depends on the matmul's shape
//                (hardware.h: eff * s / (s + half), s the smallest of M, N, K), attention at its
//                own efficiency (causal: half the score matrix; backward 2.5x forward, as flash
//                attention recomputes the scores), elementwise kernels (norms, RoPE, SwiGLU,
//                residual adds, casts, cross-entropy, AdamW) at memory bandwidth (fewer passes
//                with compile.enable), recompute per checkpointing mode, matmul rate by precision
//                (fp32, bf16, float8 / MXFP8 at the fp8 peak where the device has one);
//   communication each collective's bytes -- the same analytic volumes the benches check
//                (bench_fsdp_comm, bench_tp, bench_cp, bench_pipeline) -- over the link the group
//                spans (within a node or across: groups are laid out tp innermost, then cp,
//                dp_shard, dp_replicate, pp) with a latency per ring step and the link's
//                bandwidth per direction; hidden behind compute where the run overlaps
//                (ct_plan_comm: FSDP gathers / reduce-scatters behind the neighbouring
//                layer, tp's backward input-gradient reductions behind the weight-gradient matmul,
//                as the code does; cp's ring behind the attention of the block in hand; pipeline
//                sends never block the sender), exposed otherwise;
//   bubble       from the pipeline schedule simulator (ct_pp_simulate) fed with the per-stage
//                forward / backward / input / weight times and the receive times, not a formula.
//
// On a cpu profile the ranks of the run share the node: each gets cores / ranks threads (at
// least 1) and its share of the node's matmul rate and memory bandwidth; MPI between them runs
// over shared memory at the profile's intra-node figures.
#ifndef CT_PLAN_TIME_MODEL_H
#define CT_PLAN_TIME_MODEL_H
#include "core/config.h"
#include "model/model.h"
#include "parallel/pipeline_schedules.h"
#include "plan/hardware.h"

// Mesh dimensions whose communication the model reports separately (ep: a mixture-of-experts
// model's dispatch and combine all-to-alls, over ranks borrowed from dp_shard x cp).
typedef enum { CT_PLAN_DP_SHARD = 0, CT_PLAN_DP_REPLICATE, CT_PLAN_TP, CT_PLAN_CP, CT_PLAN_PP, CT_PLAN_EP, CT_PLAN_NDIMS } ct_plan_dim;
const char *ct_plan_dim_name(ct_plan_dim d);  // "dp_shard", "dp_replicate", "tp", "cp", "pp", "ep"

typedef struct {
    double compute;                     // seconds per step on the busiest rank (incl. recompute)
    double comm[CT_PLAN_NDIMS];         // seconds of communication per step per dimension
    double exposed[CT_PLAN_NDIMS];      // of which not hidden behind compute
    double bubble;                      // seconds idle in the pipeline (0 without one)
    double step;                        // compute + sum(exposed) + bubble
    double tokens_per_s_per_device;     // global tokens per step / step / world
    double model_flops_per_s;           // per device: ct_model_flops_per_token * tokens / step
    double mfu;                         // model_flops_per_s / the device's peak in the run's dtype
    // What the seconds come from (for tests and --explain):
    double bytes[CT_PLAN_NDIMS];        // bytes per step on the busiest rank of each dimension, counted
                                        // as the comm layer counts them (the benches' analytic volumes)
    double model_flops;                 // whole job, one step: ct_model_flops_per_token · tokens
                                        // (the 6·N + attention convention)
    double rank_flops;                  // executed on the busiest rank: causal attention, recompute
    double attention, elementwise;      // of compute: the busiest rank's seconds in attention kernels
                                        // and in the blocks' elementwise passes (recompute included)
    int n_microbatches;                 // per step and data-parallel rank
} ct_plan_time;

// The software stack the run uses, beside the hardware profile: what the same layout does
// differently. CTITAN: this trainer's kernels and collectives. TORCHTITAN: PyTorch with
// FlashAttention and FSDP2 / tensor parallel as TorchTitan runs them. The terms that differ:
// attention's rate by pass and length, the elementwise kernels (plan/stack.c), the tensor-parallel
// activations at the compute dtype's width (TorchTitan's residual stream is bf16 under bf16 mixed
// precision; ctitan's is fp32), and async tp's forward collectives behind their matmuls.
typedef enum { CT_STACK_CTITAN = 0, CT_STACK_TORCHTITAN } ct_plan_stack;
// "ctitan" | "torchtitan" -> *out; CT_ERR naming --stack otherwise.
ct_status ct_plan_stack_parse(const char *name, ct_plan_stack *out);

// How the run communicates, dimension by dimension, where one switch of ctitan train does not
// say it all. ctitan overlaps FSDP's and tp's collectives together or not at all
// (parallelism.enable_async_comm); TorchTitan sets them apart (FSDP2 prefetches the next block's
// gather by default; async tensor parallel is its own setting), and can gather float8 matmuls'
// weights in fp8 (enable_fsdp_float8_all_gather), which ctitan does not: it gathers in the
// compute dtype.
typedef struct {
    bool fsdp_prefetch;      // FSDP's gathers and reduce-scatters behind the neighbouring blocks' compute
    bool async_tp;           // tp's collectives behind their matmuls
    bool float8_all_gather;  // under float8 (tensorwise), the blocks' matmul weights gathered in fp8
} ct_plan_comm;
// What ctitan train does with c: both overlaps from parallelism.enable_async_comm, gathers in
// the compute dtype.
ct_plan_comm ct_plan_comm_of(const ct_config *c);

// Same preconditions as ct_plan_memory_rank. CT_ERR when the schedule cannot be built.
ct_status ct_plan_time_step(const ct_model_config *m, const ct_config *c, int world, const ct_hw_profile *hw,
                            ct_plan_time *out);  // on ctitan's stack
ct_status ct_plan_time_step_on(const ct_model_config *m, const ct_config *c, int world, const ct_hw_profile *hw,
                               ct_plan_stack stack, ct_plan_time *out);  // communicating as ct_plan_comm_of(c)
ct_status ct_plan_time_step_with(const ct_model_config *m, const ct_config *c, int world, const ct_hw_profile *hw,
                                 ct_plan_stack stack, const ct_plan_comm *comm, ct_plan_time *out);

// Seconds of one pipeline micro-batch's actions on one stage.
typedef struct {
    double f, b, i, w;   // forward, backward (= i + w, with recompute), backward-input, backward-weight
    double recv;         // receiving this stage's input (forward) or output gradient (backward)
} ct_plan_stage_cost;

// The pipeline part of a step: generates every rank's list (ct_pp_generate), simulates them with
// these per-stage costs (stage: pp * vpp entries, in global stage order) and returns the makespan,
// the busiest rank, its compute and receive seconds. CT_ERR when the schedule cannot be built.
typedef struct {
    double makespan;
    int busiest;           // the rank with the most compute + receive time
    double busy, recv;     // that rank's seconds in F/B/I/W and in receives
    double bubble_frac;    // the simulator's mean idle fraction over ranks
} ct_plan_pipeline;
ct_status ct_plan_pipeline_run(ct_pp_kind kind, int pp, int vpp, int n_mb, const ct_plan_stage_cost *stage,
                               ct_plan_pipeline *out);
#endif
