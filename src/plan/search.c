// The planner's search: every legal layout of the space plan.h describes, judged by the memory
// and time models, ranked.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/context_parallel.h"
#include "parallel/pipeline_schedules.h"
#include "plan/plan.h"

double ct_plan_budget(const ct_hw_profile *hw, int devices) {
    // What the run's buffers may fill: the memory less the headroom kept for the runtime (CUDA
    // context, NCCL, the allocator). A cpu profile's memory is the node's, shared by every rank
    // of the run (all on this node).
    double usable = hw->memory_bytes - hw->memory_headroom;
    return hw->cpu ? usable / (devices > 0 ? devices : 1) : usable;
}

ct_status ct_plan_evaluate(const ct_plan_request *r, const ct_config *c, ct_plan_candidate *out) {
    memset(out, 0, sizeof *out);
    out->cfg = *c;
    ct_plan_layout_name(c, out->layout, sizeof out->layout);
    ct_model_config m;
    if (ct_model_config_plan(&m, c)) return CT_ERR;
    if (ct_plan_memory_rank(&m, c, r->devices, &out->mem)) return CT_ERR;
    out->budget = ct_plan_budget(&r->hw, r->devices);
    out->fits = out->mem.total <= out->budget;
    out->comm = r->comm;
    return ct_plan_time_step_with(&m, c, r->devices, &r->hw, r->stack, &r->comm, &out->time);
}

// ------------------------------------------------------------------ names

int ct_plan_layout_name(const ct_config *c, char *buf, size_t n) {
    struct {
        const char *word;
        int degree;
    } dims[] = {{"pp", c->pipeline_degree},        {"dp", c->data_replicate_degree},
                {"fsdp", c->data_shard_degree},    {"cp", c->context_extension_degree},
                {"tp", c->compute_parallel_degree},  {"ep", c->expert_parallel_degree}};
    int len = 0;
    if (n) buf[0] = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].degree <= 1) continue;
        int w = snprintf(buf + len, n > (size_t)len ? n - (size_t)len : 0, "%s%s%d", len ? "," : "", dims[i].word,
                         dims[i].degree);
        len += w;
    }
    if (!len) len = snprintf(buf, n, "single");
    return len;
}

ct_status ct_plan_layout_parse(const char *text, int devices, ct_config *c) {
    int pp = 1, dp = 1, fsdp = 1, cp = 1, tp = 1, ep = 1;
    char copy[256];
    if (snprintf(copy, sizeof copy, "%s", text) >= (int)sizeof copy) return ct_set_error("--layout: too long");
    char *save = NULL;
    if (!strcmp(copy, "single")) copy[0] = 0;  // one rank: every degree 1
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        int *slot = NULL;
        size_t k = 0;
        if (!strncmp(w, "fsdp", 4)) slot = &fsdp, k = 4;
        else if (!strncmp(w, "ep", 2)) slot = &ep, k = 2;
        else if (!strncmp(w, "ddp", 3)) slot = &dp, k = 3;
        else if (!strncmp(w, "dp", 2)) slot = &dp, k = 2;
        else if (!strncmp(w, "pp", 2)) slot = &pp, k = 2;
        else if (!strncmp(w, "cp", 2)) slot = &cp, k = 2;
        else if (!strncmp(w, "tp", 2)) slot = &tp, k = 2;
        char *end;
        long v = slot ? strtol(w + k, &end, 10) : 0;
        if (!slot || end == w + k || *end || v < 1 || v > 1 << 20)
            return ct_set_error("--layout: '%s' is not a degree (expected pp<N>, dp<N>, fsdp<N>, cp<N>, tp<N> or ep<N>, "
                                "e.g. fsdp32,tp8)",
                                w);
        *slot = (int)v;
    }
    long world = (long)pp * dp * fsdp * cp * tp;
    if (world != devices)
        return ct_set_error("--layout %s uses %ld devices, --gpus is %d", text, world, devices);
    c->pipeline_degree = pp, c->data_replicate_degree = dp, c->data_shard_degree = fsdp;
    c->context_extension_degree = cp, c->compute_parallel_degree = tp;
    c->expert_parallel_degree = ep;  // borrowed from fsdp x cp: not a factor of the world
    c->sequence_parallel = tp > 1;
    return CT_OK;
}

void ct_plan_single_cp_balance(ct_config *c) {
    if (c->context_extension_degree == 1) c->cp_load_balancer = CT_CFG_CP_NONE;
}

int ct_plan_options_name(const ct_config *c, const ct_plan_comm *comm, char *buf, size_t n) {
    char ac[32] = "none";
    ct_cfg_ac policy = ct_config_ac(c);
    if (policy.kind == CT_CFG_KEEP_INPUT) snprintf(ac, sizeof ac, "full");
    else if (policy.kind != CT_CFG_KEEP_ALL)
        snprintf(ac, sizeof ac, policy.kind == CT_CFG_KEEP_EVERY_N ? "every %s" : "%s", c->ac_option);
    const char *prec = c->mxfp8 ? "mxfp8" : c->float8 ? "float8" : ct_cfg_precision_name(c->mixed_precision);
    char sched[48] = "";
    if (c->pipeline_degree > 1)
        snprintf(sched, sizeof sched, c->pipeline_stages_per_rank > 1 ? ", %s x%d" : ", %s", c->pipeline_schedule,
                 c->pipeline_stages_per_rank);
    const char *overlap = comm->fsdp_prefetch && comm->async_tp ? ", async"
                        : comm->async_tp                        ? ", async tp"
                        : comm->fsdp_prefetch                   ? ", fsdp prefetch"
                                                                : "";
    bool f8_gathers = comm->float8_all_gather && c->float8 && !c->mxfp8;
    return snprintf(buf, n, "mb %d x %d%s, ac %s, %s%s%s%s", c->micro_batch_size, c->gradient_accumulation_steps,
                    sched, ac, prec, c->compile ? ", compile" : "", overlap, f8_gathers ? ", fp8 gathers" : "");
}

ct_status ct_plan_trainer_runs(const ct_plan_candidate *c) {
    // The model as the trainer would build it for this layout (a family refuses what its blocks
    // do not run: shared experts or q/k norms under tp, ...).
    ct_model_config m, local;
    if (ct_model_config_from(&m, &c->cfg) || ct_model_config_local(&m, c->cfg.compute_parallel_degree, &local))
        return CT_ERR;
    if (c->comm.fsdp_prefetch != c->comm.async_tp)
        return ct_set_error("ctitan train overlaps FSDP's and tp's communication together (parallelism.enable_async_comm): "
                            "give --async_tp and --fsdp_prefetch the same value to write a config it runs");
    if (c->comm.float8_all_gather && c->cfg.float8 && !c->cfg.mxfp8)
        return ct_set_error("ctitan train gathers FSDP's parameters in the compute dtype, not in fp8: drop "
                            "--float8_all_gather to write a config it runs");
    return CT_OK;
}

// ------------------------------------------------------------------ the space

typedef struct {
    ct_plan_candidate *v;
    int n, cap;
} candidates;

static void keep(candidates *cs, const ct_plan_candidate *c) {
    if (cs->n == cs->cap) {
        cs->cap = cs->cap ? 2 * cs->cap : 256;
        cs->v = realloc(cs->v, (size_t)cs->cap * sizeof *cs->v);
        if (!cs->v) ct_fatal("plan", "out of memory for %d candidates", cs->cap);
    }
    cs->v[cs->n++] = *c;
}

// Evaluates c; keeps it when it can be built. Time only for a layout that fits (the others are
// listed with their memory, for the refusal and --explain).
// cache: the generated pipeline lists, kept over the whole search.
static void consider(const ct_plan_request *r, const ct_config *c, ct_parallelize_cache *cache, candidates *cs) {
    ct_plan_candidate cand;
    memset(&cand, 0, sizeof cand);
    cand.cfg = *c;
    ct_plan_layout_name(c, cand.layout, sizeof cand.layout);
    ct_model_config m;
    if (ct_model_config_plan(&m, c) || ct_plan_memory_rank_cached(&m, c, r->devices, cache, &cand.mem)) return;
    cand.budget = ct_plan_budget(&r->hw, r->devices);
    cand.fits = cand.mem.total <= cand.budget;
    cand.comm = r->comm;
    if (cand.fits && ct_plan_time_step_with(&m, c, r->devices, &r->hw, r->stack, &r->comm, &cand.time)) return;
    keep(cs, &cand);
}

// Pipeline schedules and the stages per rank each is tried with (interleaved: 2, 4, 8).
static const struct {
    const char *name;
    int vpp;
} schedules[] = {{"1f1b", 1}, {"interleaved_1f1b", 2}, {"interleaved_1f1b", 4}, {"interleaved_1f1b", 8}, {"zbv", 2}};
enum { N_SCHEDULES = sizeof schedules / sizeof schedules[0] };

// The pipeline schedule, checkpointing and precision choices for fixed degrees and micro-batches.
static void options(const ct_plan_request *r, ct_config c, ct_parallelize_cache *cache, candidates *cs) {
    int n_sched = c.pipeline_degree > 1 ? N_SCHEDULES : 1;
    bool fp8 = r->allow_float8 && r->hw.peak_fp8 > 0;
    for (int s = 0; s < n_sched; s++) {
        int vpp = 1;
        bool split_backward = false;
        if (c.pipeline_degree > 1) {
            ct_pp_kind kind;
            ct_pp_kind_parse(schedules[s].name, &kind);
            vpp = schedules[s].vpp;
            if (c.pipeline_degree * vpp > r->model.n_layers) continue;
            if (ct_pp_validate(kind, c.pipeline_degree, vpp, c.gradient_accumulation_steps)) continue;
            snprintf(c.pipeline_schedule, sizeof c.pipeline_schedule, "%s", schedules[s].name);
            split_backward = ct_pp_kind_splits_backward(kind);
        }
        c.pipeline_stages_per_rank = vpp;
        // Checkpointing recomputes inside a backward; a split backward (ZBV's I and W) cannot.
        static const struct {
            ct_cfg_ac_mode mode;
            const char *option;
        } acs[] = {{CT_CFG_AC_NONE, "op"}, {CT_CFG_AC_SELECTIVE, "op"}, {CT_CFG_AC_SELECTIVE, "elementwise"},
                   {CT_CFG_AC_FULL, "op"}};
        int n_ac = split_backward ? 1 : 4;
        for (int a = 0; a < n_ac; a++) {
            // The elementwise policy is ctitan's own: TorchTitan's stack does not have it.
            if (r->stack == CT_STACK_TORCHTITAN && !strcmp(acs[a].option, "elementwise")) continue;
            c.ac_mode = acs[a].mode;
            c.ac_selective = acs[a].mode == CT_CFG_AC_SELECTIVE;
            snprintf(c.ac_option, sizeof c.ac_option, "%s", acs[a].option);
            for (int p = 0; p < (fp8 ? 2 : 1); p++) {
                c.float8 = p == 1;
                consider(r, &c, cache, cs);
            }
        }
    }
}

static int by_rank(const void *pa, const void *pb) {
    const ct_plan_candidate *a = pa, *b = pb;
    if (a->fits != b->fits) return a->fits ? -1 : 1;
    double x = a->fits ? a->time.tokens_per_s_per_device : -a->mem.total;
    double y = b->fits ? b->time.tokens_per_s_per_device : -b->mem.total;
    if (x != y) return x > y ? -1 : 1;
    // Equally fast: the one with room to spare first.
    if (a->mem.total != b->mem.total) return a->mem.total < b->mem.total ? -1 : 1;
    return strcmp(a->layout, b->layout);
}

ct_status ct_plan_search(const ct_plan_request *r, ct_plan_candidate **out, int *n) {
    *out = NULL, *n = 0;
    const ct_config *b = &r->base;
    long T = b->seq_len;
    if (r->global_batch_tokens % T)
        return ct_set_error("the global batch of %ld tokens is not a whole number of %ld-token sequences",
                            r->global_batch_tokens, T);
    long seqs = r->global_batch_tokens / T;
    int node = r->hw.cpu ? r->devices : r->hw.devices_per_node;
    candidates cs = {0};
    ct_parallelize_cache cache = {0};
    for (int tp = 1; tp <= node && tp <= r->devices; tp *= 2) {
        ct_model_config local;
        if (ct_model_config_local(&r->model, tp, &local)) continue;
        for (int cp = 1; tp * cp <= r->devices && cp <= 64; cp *= 2) {
            if (cp > 1 && ct_cp_check_seq_len(CT_CP_HEADTAIL, cp, T)) continue;
            for (int pp = 1; tp * cp * pp <= r->devices && pp <= r->model.n_layers; pp *= 2) {
                if (r->devices % (tp * cp * pp)) continue;
                int dp = r->devices / (tp * cp * pp);
                if (seqs % dp) continue;
                long local_seqs = seqs / dp;  // sequences per data-parallel rank per step
                for (int rep = 1; rep <= dp; rep *= 2) {
                    if (dp % rep) continue;
                    // Micro-batches of 1, 2, 4, ... sequences up to the local batch: the largest
                    // that fit are found by the memory model, not by a cap here.
                    for (int mb = 1; mb <= local_seqs; mb *= 2) {
                        if (local_seqs % mb) continue;
                        long n_micro = local_seqs / mb;
                        if (pp > 1 && n_micro < pp) continue;
                        if (tp > 1 && ((long)mb * (T / cp)) % tp) continue;  // sequence parallel splits the tokens
                        ct_config c = *b;
                        c.compute_parallel_degree = tp, c.context_extension_degree = cp, c.pipeline_degree = pp;
                        c.data_replicate_degree = rep, c.data_shard_degree = dp / rep;
                        c.sequence_parallel = tp > 1;
                        c.micro_batch_size = mb, c.gradient_accumulation_steps = (int)n_micro;
                        c.pipeline_microbatch_size = 0;
                        ct_plan_single_cp_balance(&c);
                        c.compile = r->compile, c.enable_async_comm = r->comm.fsdp_prefetch;
                        // Expert parallel degrees: powers of two dividing the experts and the
                        // dp_shard x cp ranks they borrow (1 alone for a dense model).
                        int shard = dp / rep * cp;
                        for (int ep = 1; ep <= shard && (ep == 1 || ep <= r->model.n_experts); ep *= 2) {
                            if (shard % ep || (ep > 1 && r->model.n_experts % ep)) continue;
                            c.expert_parallel_degree = ep;
                            options(r, c, &cache, &cs);
                        }
                    }
                }
            }
        }
    }
    ct_parallelize_cache_free(&cache);
    if (!cs.n) {
        free(cs.v);
        return ct_set_error("no layout of %d devices can run this model with a global batch of %ld sequences of %ld "
                            "tokens: the data-parallel degree must divide the batch, tp the heads",
                            r->devices, seqs, T);
    }
    qsort(cs.v, (size_t)cs.n, sizeof *cs.v, by_rank);
    *out = cs.v, *n = cs.n;
    return CT_OK;
}
