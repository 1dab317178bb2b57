// The planner's memory model (plan/memory_model.h): this configuration's start-up, run for one
// pipeline rank in sizing mode. parallel/parallelize.c builds the stages, data sharding, context
// parallel and executor exactly as the trainer does, but every buffer it would allocate is counted by
// category instead (core/mem_sizing.h); the executor plans its slots from the generated
// schedules as it does at start-up, and data sharding reserves the gather slots and gradient
// buffers those schedules' UNSHARD actions hold. What remains here is the short list of buffers
// the trainer allocates outside the stages, each named with the code that allocates it.
#include "plan/memory_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mesh.h"
#include "model/params.h"
#include "parallel/parallelize.h"
#include "parallel/precision_policy.h"
#include "plan/moe.h"

long ct_plan_step_tokens(const ct_config *cfg) {
    return (long)cfg->gradient_accumulation_steps * cfg->micro_batch_size * cfg->seq_len;
}

// Async saves copy the owned parameters and both AdamW moments (3 x owned), plus the step.
long ct_plan_ckpt_staging_floats(long owned) { return 3 * owned + 1; }

// Everything but the stages, for one rank, added to sz: what the run's device holds (on the cpu,
// where the device is the host, its staging too). owned: elements of the parameter shards this
// rank writes to a checkpoint (train/checkpoint.c).
static void outside_stages(const ct_config *c, int cp, long local_numel, long owned, ct_mem_sizing *sz) {
    // train/trainer.c build(): the step's tokens as read and, with cp > 1, this rank's part of
    // them and its positions -- on the host; on another device only this rank's part, copied.
    long tokens = ct_plan_step_tokens(c);
    const ct_kernels *k = ct_kernels_get(ct_cfg_device_name(c->train_device));
    bool on_host = !k || ct_device_host_visible(k->device);
    // Inputs and targets, and under block_causal the tokens' document ids beside them (and their
    // positions in their documents with model.rope_positions document).
    bool block_causal = c->attn_mask_type == CT_CFG_MASK_BLOCK_CAUSAL;
    size_t streams = 2 + (block_causal ? 1 : 0) + (block_causal && c->rope_positions == CT_CFG_ROPE_DOCUMENT ? 1 : 0);
    if (on_host) ct_mem_sizing_add(sz, CT_MEM_OTHER, streams * (size_t)tokens * sizeof(int32_t));
    if (cp > 1 || !on_host) ct_mem_sizing_add(sz, CT_MEM_OTHER, streams * (size_t)(tokens / cp) * sizeof(int32_t));
    if (cp > 1) ct_mem_sizing_add(sz, CT_MEM_OTHER, (size_t)(c->seq_len / cp) * sizeof(int32_t));
    ct_mem_sizing_add(sz, CT_MEM_OTHER, CT_PLAN_STEP_SCALARS * sizeof(double));  // the step's scalars
    // train/adamw.c ct_adamw_init: m and v, one float per element of the local shards each.
    ct_mem_sizing_add(sz, CT_MEM_OPTIM, 2 * (size_t)local_numel * sizeof(float));
    // data/loader.c ct_loader_open: one window of seq_len + 1 tokens per open split (train, and
    // val when validation is on). A shuffled file source also keeps its epoch's order, 4 bytes per
    // window of the dataset, which depends on the files and is not counted here.
    int loaders = 1 + (c->val_enable ? 1 : 0);
    if (!on_host) return;  // the rest is host staging
    ct_mem_sizing_add(sz, CT_MEM_OTHER, (size_t)loaders * ((size_t)c->seq_len + 1) * sizeof(int32_t));
    // train/checkpoint.c: async saves copy into staging planned at start-up.
    if (c->ckpt_enable && c->ckpt_async_mode == CT_CFG_CKPT_ASYNC)
        ct_mem_sizing_add(sz, CT_MEM_OTHER, (size_t)ct_plan_ckpt_staging_floats(owned) * sizeof(float));
}

// Elements this rank writes to a checkpoint: each shard it holds whose copy it owns (coordinate
// 0 in every dimension the tensor is replicated over), as train/checkpoint.c counts them.
static long owned_numel(const ct_param_store *st, const int coord[CT_DIM_COUNT]) {
    long n = 0;
    for (int i = 0; i < st->count; i++) {
        const ct_param_shard *sh = &st->shards[i];
        if (sh->desc.flat_count && ct_shard_desc_owns_copy(&sh->desc, coord)) n += sh->desc.flat_count;
    }
    return n;
}

// The layout from the configuration and the world, or CT_ERR with ct_mesh_resolve's line.
static ct_status resolve(const ct_config *c, int world, ct_mesh_layout *l) {
    ct_mesh_layout want = ct_mesh_layout_from_config(c);
    char err[CT_MESH_ERR_LEN];
    return ct_mesh_resolve(&want, world, l, err, sizeof err);
}

// The parameter table of (m, tp): the cache's when it was built for the same shapes, else built
// into it (the planner sizes thousands of layouts of one model, one pp rank at a time).
static const ct_param_table *param_table(ct_parallelize_cache *cache, const ct_model_config *m, int tp) {
    const ct_model_config *k = &cache->table_model;
    bool same = cache->table_built && cache->table_tp == tp && k->family == m->family && k->dim == m->dim &&
                k->n_layers == m->n_layers && k->n_heads == m->n_heads && k->n_kv_heads == m->n_kv_heads &&
                k->head_dim == m->head_dim && k->ffn_hidden == m->ffn_hidden && k->vocab_size == m->vocab_size &&
                k->n_experts == m->n_experts && k->moe_top_k == m->moe_top_k;
    if (!same) {
        if (cache->table_built) ct_param_table_free(&cache->table);
        ct_param_table_build_tp(&cache->table, m, 0, tp);
        cache->table_model = *m;
        cache->table_tp = tp;
        cache->table_built = true;
    }
    return &cache->table;
}

// One pp rank's bytes; cache: the pipeline lists every pp rank of the layout shares.
static ct_status size_pp_rank(const ct_model_config *m, const ct_config *c, int world, int pp_rank,
                              ct_parallelize_cache *cache, ct_plan_memory *out) {
    memset(out, 0, sizeof *out);
    ct_mesh_layout l;
    if (resolve(c, world, &l)) return CT_ERR;
    int pp = l.degree[CT_MESH_PP], tp = l.degree[CT_MESH_TP], cp = l.degree[CT_MESH_CP];
    if (pp_rank < 0 || pp_rank >= pp) return ct_set_error("memory model: pp rank %d of %d", pp_rank, pp);
    // The run's backend sizes its scratch (a build without it plans with the cpu's sizes).
    const ct_kernels *k = ct_kernels_get(ct_cfg_device_name(c->train_device));
    if (!k) k = ct_kernels_get("cpu");

    // The same checks and dimensions as the trainer's plan_layout (train/trainer.c).
    ct_model_config local;
    if (ct_model_config_local(m, tp, &local)) return CT_ERR;
    ct_parallel_dims dims;
    if (ct_parallelize_dims(c, tp, cp, &dims)) return CT_ERR;

    // Groups as plain structs: sizing needs their size and this rank's place, never a message.
    // Rank 0 in every dimension but pp: the ranks of a pp rank allocate the same, except that
    // coordinate 0 owns the copies an async checkpoint stages.
    ct_group g_fsdp = {.name = "fsdp", .rank = 0, .size = l.degree[CT_MESH_DP_SHARD] * cp};
    ct_group g_rep = {.name = "dp_replicate", .rank = 0, .size = l.degree[CT_MESH_DP_REPLICATE]};
    ct_group g_cp = {.name = "cp", .rank = 0, .size = cp};
    ct_group g_pp = {.name = "pp", .rank = pp_rank, .size = pp};
    ct_group g_tp = {.name = "tp", .rank = 0, .size = tp};

    ct_mem_sizing sz = {0};
    const ct_param_table *table = param_table(cache, m, tp);
    ct_precision prec;
    uint8_t *f8 = NULL;
    ct_fsdp fsdp = {0};
    ct_cp cpa = {0};
    ct_executor exec = {0};
    ct_schedule train, eval;
    ct_tp tpa = ct_parallelize_tp(c, k, &g_tp, &fsdp.store);
    ct_parallelized par = {.fsdp = &fsdp, .cp = &cpa, .exec = &exec, .train_schedule = &train, .eval_schedule = &eval};
    ct_schedule_init(&train);
    ct_schedule_init(&eval);
    ct_status status = ct_precision_policy(c, m, tp, &prec, &f8);
    if (status == CT_OK) {
        // cp_pos: the stages only keep the pointer (RoPE at run time), so sizing needs none.
        ct_parallelize_env env = {
            .cfg = c, .k = k, .model = m, .local_model = &local, .table = table, .fsdp = &g_fsdp,
            .replicate = &g_rep, .cp = &g_cp, .pp = &g_pp, .tp = &tpa, .prec = prec, .cp_balance = dims.cp_balance,
            .cp_pos = NULL, .seq_local = dims.seq_local, .mb_seqs = dims.mb_seqs, .sizing = &sz, .cache = cache,
        };
        status = ct_parallelize(&env, &par);
    }
    if (status == CT_OK) {
        int coord[CT_DIM_COUNT] = {0};
        outside_stages(c, cp, fsdp.local_numel, owned_numel(&fsdp.store, coord), &sz);
        for (int i = 0; i < CT_MEM_NCATEGORIES; i++) {
            out->bytes[i] = sz.bytes[i];
            out->total += sz.bytes[i];
        }
        out->worst_pp_rank = pp_rank;
    }
    ct_parallelized_free(&par);
    free(f8);
    return status;
}

// A mixture-of-experts model's pp rank (plan/moe.h): its blocks do not run bf16, tp or
// checkpointing yet, so the trainer's set-up is run on two dense stand-ins and combined. The
// gathered groups (gather slots, whole-gradient and communication buffers: params, grads, comm)
// are those of `weights`, whose blocks are as large as what a rank gathers of a routed block under
// expert parallelism; the activations are those of `acts`, whose FFN keeps per token what the
// routed layer keeps; the shards (fp32 parameters and gradients, AdamW's two moments: 4 + 4 + 8
// bytes an element) are the real model's, each block's dense tensors over dp_shard x cp and its
// experts over ep x the dp_shard x cp / ep ranks outside the EP group -- the same count, so a
// rank holds 1 / (dp_shard x cp) of every block of its stages.
static ct_status size_moe_pp_rank(const ct_model_config *m, const ct_config *c, int world, int pp_rank,
                                  ct_parallelize_cache *cache, ct_plan_memory *out) {
    int ep, tp = c->compute_parallel_degree > 1 ? c->compute_parallel_degree : 1;
    if (ct_plan_moe_ep(m, c, world, &ep)) return CT_ERR;
    ct_model_config w, a, lm, lw;
    if (ct_plan_moe_standins(m, ep, tp, &w, &a)) return CT_ERR;
    // The dense block does not checkpoint with a per-head QK-norm (Qwen3's), so under
    // checkpointing the stand-ins leave it out: its 2 HS weights a block still count in the
    // shards below (`extra`), what it would keep for backward does not.
    if (ct_config_ac(c).kind != CT_CFG_KEEP_ALL) w.qk_norm = a.qk_norm = 0;
    if (ct_model_config_local(m, tp, &lm) || ct_model_config_local(&w, tp, &lw)) return CT_ERR;
    ct_plan_memory mw, ma;
    if (size_pp_rank(&w, c, world, pp_rank, cache, &mw) || size_pp_rank(&a, c, world, pp_rank, cache, &ma))
        return CT_ERR;
    bool *mine = ct_xcalloc((size_t)m->n_layers, sizeof *mine);
    ct_status st = ct_plan_layers_on_pp_rank(c, m->n_layers, pp_rank, mine);
    double extra = 0;  // shard elements the real blocks hold beyond the stand-in's
    for (int l = 0; st == CT_OK && l < m->n_layers; l++) {
        if (!mine[l]) continue;
        double dense, experts;
        ct_plan_moe_block_numel(&lm, l, 1, &dense, &experts);
        extra += dense + experts - (double)ct_model_block_params(&lw);
    }
    free(mine);
    if (st) return CT_ERR;
    extra /= (double)ct_config_shard_degree(c, world) * c->context_extension_degree;
    *out = mw;
    out->bytes[CT_MEM_ACTIVATIONS] = ma.bytes[CT_MEM_ACTIVATIONS];
    out->bytes[CT_MEM_PARAMS] += 4 * extra;
    out->bytes[CT_MEM_GRADS] += 4 * extra;
    out->bytes[CT_MEM_OPTIM] += 8 * extra;
    out->total = 0;
    for (int i = 0; i < CT_MEM_NCATEGORIES; i++) out->total += out->bytes[i];
    return CT_OK;
}

// A model the trainer runs as configured is sized as it allocates (the trainer's own memory check
// comes here); a mixture-of-experts layout it does not run yet, or runs with expert parallelism
// (whose expert-side buffers the stages allocate outside the sizing plan), through the stand-ins.
static ct_status size_any_pp_rank(const ct_model_config *m, const ct_config *c, int world, int pp_rank,
                                  ct_parallelize_cache *cache, ct_plan_memory *out) {
    ct_model_config trained;
    if (m->n_experts > 0 && (c->expert_parallel_degree > 1 || ct_model_config_from(&trained, c) != CT_OK))
        return size_moe_pp_rank(m, c, world, pp_rank, cache, out);
    return size_pp_rank(m, c, world, pp_rank, cache, out);
}

ct_status ct_plan_memory_pp_rank(const ct_model_config *m, const ct_config *c, int world, int pp_rank,
                                 ct_plan_memory *out) {
    ct_parallelize_cache cache = {0};
    ct_status st = size_any_pp_rank(m, c, world, pp_rank, &cache, out);
    ct_parallelize_cache_free(&cache);
    return st;
}

ct_status ct_plan_memory_rank_cached(const ct_model_config *m, const ct_config *c, int world,
                                    ct_parallelize_cache *cache, ct_plan_memory *out) {
    memset(out, 0, sizeof *out);
    ct_mesh_layout l;
    if (resolve(c, world, &l)) return CT_ERR;
    for (int r = 0; r < l.degree[CT_MESH_PP]; r++) {
        ct_plan_memory one;
        if (size_any_pp_rank(m, c, world, r, cache, &one)) return CT_ERR;
        if (r == 0 || one.total > out->total) *out = one;
    }
    return CT_OK;
}

ct_status ct_plan_memory_rank(const ct_model_config *m, const ct_config *c, int world, ct_plan_memory *out) {
    ct_parallelize_cache cache = {0};  // every pp rank of this layout runs one set of lists
    ct_status st = ct_plan_memory_rank_cached(m, c, world, &cache, out);
    ct_parallelize_cache_free(&cache);
    return st;
}

double ct_plan_memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024.0;
}
