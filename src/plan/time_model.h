// The planner's time model: one training step of a configuration on a hardware profile.
//
//   compute      matmul FLOPs per layer at an efficiency that depends on the matmul's shape
//                (hardware.h), attention at its own efficiency, elementwise kernels at memory
//                bandwidth (fewer passes with compile.enable), recompute per checkpointing mode,
//                matmul rate by precision (fp32, bf16, float8 / MXFP8 where the device has it);
//   communication each collective's bytes -- the same analytic volumes the benches check
//                (bench_fsdp_comm, bench_tp, bench_cp) -- over the link the group spans (within a
//                node or across nodes: groups are laid out tp innermost, then cp, dp_shard,
//                dp_replicate, pp) with latency and bandwidth; hidden behind compute where the run
//                overlaps (enable_async_comm), exposed otherwise;
//   bubble       from the pipeline schedule simulator (ct_pp_simulate) fed with the per-stage
//                forward / backward times, not a formula.
#ifndef CT_PLAN_TIME_MODEL_H
#define CT_PLAN_TIME_MODEL_H
#include "core/config.h"
#include "model/llama_config.h"
#include "plan/hardware.h"

// Mesh dimensions whose communication the model reports separately.
typedef enum { CT_PLAN_DP_SHARD = 0, CT_PLAN_DP_REPLICATE, CT_PLAN_TP, CT_PLAN_CP, CT_PLAN_PP, CT_PLAN_NDIMS } ct_plan_dim;
const char *ct_plan_dim_name(ct_plan_dim d);  // "dp_shard", "dp_replicate", "tp", "cp", "pp"

typedef struct {
    double compute;                     // seconds per step on the busiest rank (incl. recompute)
    double comm[CT_PLAN_NDIMS];         // seconds of communication per step per dimension
    double exposed[CT_PLAN_NDIMS];      // of which not hidden behind compute
    double bubble;                      // seconds idle in the pipeline (0 without one)
    double step;                        // compute + sum(exposed) + bubble
    double tokens_per_s_per_device;     // global tokens per step / step / world
    double model_flops_per_s;           // per device: ct_llama_flops_per_token * tokens / step
    double mfu;                         // model_flops_per_s / the device's peak in the run's dtype
} ct_plan_time;

// Same preconditions as ct_plan_memory_rank. CT_ERR when the schedule cannot be built.
ct_status ct_plan_time_step(const ct_llama_config *m, const ct_config *c, int world, const ct_hw_profile *hw,
                            ct_plan_time *out);
#endif
