// The layout planner: which combination of strategies to run a model with on a cluster.
//
// A candidate is a whole runnable configuration (ct_config: degrees, schedule, micro-batches,
// checkpointing, precision, compile, async comm) -- the same struct `ctitan train` runs, so the
// memory model (memory_model.h) and the time model (time_model.h) judge exactly what the
// emitted TOML will do. The search enumerates legal combinations, keeps those whose memory fits
// the device, and ranks them by predicted tokens/s per device.
//
// Conventions of the search space (documented in docs/parallelism.md, "Choosing a layout"):
//   tp within a node (at most devices_per_node), sequence parallel on whenever tp > 1;
//   cp, pp and dp_replicate are powers of two; dp_shard is what the others leave; for a
//   mixture-of-experts model, expert parallel degrees (powers of two) borrowed from dp_shard x cp;
//   the global batch (tokens) is fixed: sequences per data-parallel rank = global sequences /
//   (dp_replicate x dp_shard), cut into micro-batches of 1, 2 or 4 sequences;
//   pipeline schedules 1f1b, interleaved_1f1b (2 stages per rank) and zbv;
//   activation checkpointing none, selective per op, full; bf16 mixed precision, and float8
//   (tensorwise) where the device multiplies fp8 and the request allows it. Overlap and fp8
//   gathers are the request's (ct_plan_comm), not searched.
#ifndef CT_PLAN_PLAN_H
#define CT_PLAN_PLAN_H
#include <stdbool.h>
#include <stddef.h>

#include "core/config.h"
#include "model/model.h"
#include "plan/hardware.h"
#include "plan/memory_model.h"
#include "plan/time_model.h"

typedef struct {
    ct_config base;            // model dims, seq_len, run settings every candidate starts from
    ct_model_config model;     // ct_model_config_from(base)
    ct_hw_profile hw;
    int devices;               // ranks (GPUs, or processes on a cpu profile)
    long global_batch_tokens;  // tokens per optimizer step over the whole job
    bool allow_float8;         // float8 candidates where the device has an fp8 peak
    bool compile;              // compile.enable in every candidate
    ct_plan_comm comm;         // overlap per dimension and fp8 gathers in every candidate; a
                               // candidate's parallelism.enable_async_comm is comm.fsdp_prefetch
    ct_plan_stack stack;       // the software stack the times are for (--stack)
} ct_plan_request;

typedef struct {
    ct_config cfg;             // runnable: `ctitan train --config` of ct_config_write_toml(cfg)
    ct_plan_memory mem;
    ct_plan_time time;
    ct_plan_comm comm;         // how it communicates (the request's)
    double budget;             // bytes a rank may use: the device's memory less its headroom (a cpu node's / ranks)
    bool fits;                 // mem.total <= budget
    char layout[96];           // "pp8,fsdp4,cp2,tp4" (ct_plan_layout_name)
} ct_plan_candidate;

// Bytes a rank may use on this profile with `devices` ranks.
double ct_plan_budget(const ct_hw_profile *hw, int devices);

// Memory and time of one configuration. CT_ERR (one line) when the layout cannot be built.
ct_status ct_plan_evaluate(const ct_plan_request *r, const ct_config *c, ct_plan_candidate *out);

// Every legal candidate of the search space, fitting ones first, each group by predicted
// tokens/s per device (fastest first). *out is malloc'd (free()); *n its count (fitting or not;
// candidates that cannot be built are not listed). CT_ERR only when not even one layout is
// legal (the message says why: e.g. the global batch does not split over the devices).
ct_status ct_plan_search(const ct_plan_request *r, ct_plan_candidate **out, int *n);

// "fsdp32,tp8": the non-1 degrees outermost first (pp, dp (replicate), fsdp (shard), cp, tp),
// then ep (expert parallel: ranks of fsdp x cp, not a factor of the world);
// "single" for one rank. Returns the length, like snprintf.
int ct_plan_layout_name(const ct_config *c, char *buf, size_t n);
// Sets the degrees of c from a layout name ("fsdp32,tp8", "pp8,dp2,fsdp4,cp2,tp4"; any order;
// "ddp" = "dp" = dp_replicate, "hsdp" not accepted: spell dp and fsdp; "single": one rank; ep<N>
// sets parallelism.expert_parallel_degree and does not count in the product).
// Degrees not named are 1.
// CT_ERR when a word is unknown or the product is not `devices`.
ct_status ct_plan_layout_parse(const char *text, int devices, ct_config *c);

// Without context parallel the sequence is not split, so its balancing has nothing to balance:
// sets parallelism.context_parallel_load_balancer = "none" when cp is 1, so that any seq_len
// (an odd one too) is legal, as it is for the model (head-tail needs 2 x cp chunks).
void ct_plan_single_cp_balance(ct_config *c);

// One line for a candidate's options: "mb 2 x 8, 1f1b, ac op, bf16, compile, async" (async: both
// overlaps; "async tp" or "fsdp prefetch" when only one; "fp8 gathers" under float8 with them).
int ct_plan_options_name(const ct_config *c, const ct_plan_comm *comm, char *buf, size_t n);

// When ctitan train cannot run the candidate as it was judged: the overlaps set apart (ctitan
// has one switch for both) or FSDP's fp8 gathers. CT_ERR naming the setting to change.
ct_status ct_plan_trainer_runs(const ct_plan_candidate *c);
#endif
