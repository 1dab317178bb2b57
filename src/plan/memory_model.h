// The planner's memory model: bytes per rank, by the tracker's categories (core/memory.h), that a
// run of this configuration allocates -- computed from the same sizing functions the trainer
// allocates with (stage activation slots, FSDP gather and reduce buffers, AdamW state, loader
// buffers), without allocating. ctitan allocates every long-lived buffer at start-up and the step
// allocates nothing, so the peak per category is what start-up allocated, and the prediction can
// be held to the trainer's own accounting (tests/test_plan_memory.c).
//
// Pipeline micro-batches in flight come from the schedule generator (parallel/pipeline_schedules.h)
// and ct_schedule_max_in_flight, as the executor sizes its slots -- not from a formula.
#ifndef CT_PLAN_MEMORY_MODEL_H
#define CT_PLAN_MEMORY_MODEL_H
#include "core/config.h"
#include "core/memory.h"
#include "model/llama_config.h"

typedef struct {
    double bytes[CT_MEM_NCATEGORIES];  // per category, on the rank that needs the most in total
    double total;
    int worst_pp_rank;                 // which pipeline rank that is
} ct_plan_memory;

// m: the model (ct_llama_config_from(c)); c: a validated configuration whose parallelism
// degrees are all resolved (data_shard_degree not -1); world: ranks. CT_ERR with one line when
// the layout cannot be built (a degree that does not divide), as the trainer would refuse it.
ct_status ct_plan_memory_rank(const ct_llama_config *m, const ct_config *c, int world, ct_plan_memory *out);
#endif
