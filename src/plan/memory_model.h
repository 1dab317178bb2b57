// The planner's memory model: bytes per rank, by the tracker's categories (core/memory.h), that a
// run of this configuration allocates -- computed from the same sizing functions the trainer
// allocates with (stage activation slots, FSDP gather and reduce buffers, AdamW state, loader
// buffers), without allocating. ctitan allocates every long-lived buffer at start-up and the step
// allocates nothing, so the peak per category is what start-up allocated, and the prediction can
// be held to the trainer's own accounting (tests/test_plan_memory.c).
//
// How: parallel/parallelize.c holds the trainer's set-up (stage placement, data sharding, context
// parallel, stages, executor, schedules); the trainer runs it to allocate and this model runs it
// with a ct_mem_sizing (core/mem_sizing.h), which counts every buffer by category instead. So
// pipeline micro-batches in flight are the executor's own slot count over the generated schedule
// (ct_executor_plan, ct_schedule_peak_held), and the gather slots and gradient buffers are data
// sharding's own, reserved for the schedule's UNSHARD actions -- not a formula. Sizes that depend
// on run-time state come from the cpu backend's own functions (attention and loss scratch follow
// omp_get_max_threads()). Not counted: a shuffled file dataset's epoch order (4 bytes per window
// of the files), the profiler's span buffer, and scratch the bf16 GEMM library asks for at its
// first call (CT_MEM_OTHER).
#ifndef CT_PLAN_MEMORY_MODEL_H
#define CT_PLAN_MEMORY_MODEL_H
#include "core/config.h"
#include "core/memory.h"
#include "model/model.h"
#include "parallel/parallelize.h"

typedef struct {
    double bytes[CT_MEM_NCATEGORIES];  // per category, on the rank that needs the most in total
    double total;
    int worst_pp_rank;                 // which pipeline rank that is
} ct_plan_memory;

// m: the model (ct_model_config_from(c)); c: a validated configuration (data_shard_degree -1 is
// resolved against world, as the mesh resolves it); world: ranks. CT_ERR with one line when
// the layout cannot be built (a degree that does not divide), as the trainer would refuse it.
ct_status ct_plan_memory_rank(const ct_model_config *m, const ct_config *c, int world, ct_plan_memory *out);
// The same, keeping generated pipeline lists in the caller's *cache between calls
// (parallel/parallelize.h): the planner's search sizes thousands of layouts that share a few
// schedules (every checkpointing mode, precision and replicate degree runs the same lists).
ct_status ct_plan_memory_rank_cached(const ct_model_config *m, const ct_config *c, int world,
                                    ct_parallelize_cache *cache, ct_plan_memory *out);
// The same for the ranks of one pipeline rank (coordinate 0 in the other dimensions: they all
// allocate the same but for an async checkpoint's staging, which coordinate 0 needs most).
ct_status ct_plan_memory_pp_rank(const ct_model_config *m, const ct_config *c, int world, int pp_rank,
                                 ct_plan_memory *out);
// Buffers the trainer allocates outside the stages, in the units their owners allocate, so that
// the trainer and this model count them alike.
// The step's scalars, doubles on the run's device (train/trainer.c): the loss sum, the
// gradients' sum of squares (both reduced there) and the clip factor (a float in the third),
// read back together once a step.
enum { CT_PLAN_STEP_SCALARS = 4 };
// The trainer's token buffers: (accum, B, T) inputs and targets as read, and with cp > 1 this
// rank's (accum, B, T / cp) of them: int32 elements per buffer.
long ct_plan_step_tokens(const ct_config *cfg);
// Async checkpoint staging for a rank that writes `owned` elements (train/checkpoint.c).
long ct_plan_ckpt_staging_floats(long owned);

// Bytes this node can still give (MemAvailable from /proc/meminfo), 0 when unknown.
double ct_plan_memory_available(void);
#endif
