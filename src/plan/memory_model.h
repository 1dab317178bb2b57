// The planner's memory model: bytes per rank, by the tracker's categories (core/memory.h), that a
// run of this configuration allocates -- computed from the same sizing functions the trainer
// allocates with (stage activation slots, FSDP gather and reduce buffers, AdamW state, loader
// buffers), without allocating. ctitan allocates every long-lived buffer at start-up and the step
// allocates nothing, so the peak per category is what start-up allocated, and the prediction can
// be held to the trainer's own accounting (tests/test_plan_memory.c).
//
// How: plan/layout.c holds the trainer's set-up (stage placement, data sharding, context
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
#include "model/params.h"
#include "plan/layout.h"

typedef struct {
    double bytes[CT_MEM_NCATEGORIES];  // per category, on the rank that needs the most in total
    double total;
    int worst_pp_rank;                 // which pipeline rank that is
} ct_plan_memory;

// m: the model (ct_model_config_from(c)); c: a validated configuration (data_shard_degree -1 is
// resolved against world, as the mesh resolves it); world: ranks. CT_ERR with one line when
// the layout cannot be built (a degree that does not divide), as the trainer would refuse it.
ct_status ct_plan_memory_rank(const ct_model_config *m, const ct_config *c, int world, ct_plan_memory *out);
// The same for the ranks of one pipeline rank (coordinate 0 in the other dimensions: they all
// allocate the same but for an async checkpoint's staging, which coordinate 0 needs most).
ct_status ct_plan_memory_pp_rank(const ct_model_config *m, const ct_config *c, int world, int pp_rank,
                                 ct_plan_memory *out);
// What sizing many layouts of one model reuses, kept by the caller (the planner's search) between
// calls: the last parameter table (naming every tensor costs a snprintf each, and only the shapes
// and tp decide it) and the last generated pipeline lists. Zeroed before first use; freed with
// ct_plan_memory_cache_free.
typedef struct {
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_hidden, vocab_size, tp;  // the table's
    bool built;
    ct_param_table table;
    ct_layout_schedule_cache lists;
} ct_plan_memory_cache;
void ct_plan_memory_cache_free(ct_plan_memory_cache *cache);
// ct_plan_memory_rank, reusing what cache holds and keeping what it builds.
ct_status ct_plan_memory_rank_cached(ct_plan_memory_cache *cache, const ct_model_config *m, const ct_config *c,
                                     int world, ct_plan_memory *out);

// Bytes this node can still give (MemAvailable from /proc/meminfo), 0 when unknown.
double ct_plan_memory_available(void);
#endif
