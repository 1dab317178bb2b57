// One rank's set-up (parallel/parallelize.h), read top to bottom in TorchTitan's order: split the
// model into pipeline stages and place them; then, on this rank's stages, tensor parallel,
// context parallel, expert parallel, activation checkpointing, compile and data sharding; then the executor and
// the schedules it runs the stages by.
#include "parallel/parallelize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline_schedules.h"
#include "parallel/pipeline_split.h"
#include "parallel/schedule_lowering.h"

// ------------------------------------------------------------------ policies

ct_reshard_policy ct_parallelize_reshard_policy(const ct_config *cfg) {
    return cfg->fsdp_reshard_after_forward == CT_CFG_RESHARD_ALWAYS  ? CT_RESHARD_ALWAYS
           : cfg->fsdp_reshard_after_forward == CT_CFG_RESHARD_NEVER ? CT_RESHARD_NEVER
                                                                     : CT_RESHARD_DEFAULT;
}

ct_ac_policy ct_parallelize_ac_policy(const ct_config *cfg) {
    ct_cfg_ac ac = ct_config_ac(cfg);
    switch (ac.kind) {
    case CT_CFG_KEEP_INPUT: return (ct_ac_policy){CT_AC_FULL, 1};
    case CT_CFG_KEEP_OPS: return (ct_ac_policy){CT_AC_OPS, 1};
    case CT_CFG_KEEP_ELEMENTWISE: return (ct_ac_policy){CT_AC_ELEMENTWISE, 1};
    case CT_CFG_KEEP_EVERY_N: return (ct_ac_policy){CT_AC_FULL, ac.every};
    case CT_CFG_KEEP_ALL: break;
    }
    return (ct_ac_policy){CT_AC_NONE, 1};
}

int ct_parallelize_stages_per_rank(const ct_config *cfg, int pp) {
    ct_pp_kind kind;
    if (pp > 1 && cfg->pipeline_stages_per_rank == 1 && !cfg->pipeline_schedule_file[0] &&
        ct_pp_kind_parse(cfg->pipeline_schedule, &kind) == CT_OK &&
        (kind == CT_PP_INTERLEAVED_1F1B || kind == CT_PP_LOOPED_BFS || kind == CT_PP_ZBV))
        return 2;
    return cfg->pipeline_stages_per_rank;
}

ct_tp ct_parallelize_tp(const ct_config *cfg, const ct_kernels *k, ct_group *group, ct_param_store *store) {
    return (ct_tp){.k = k, .group = group, .sequence_parallel = cfg->sequence_parallel && group->size > 1,
                   .gather_logits = cfg->disable_loss_parallel, .store = store, .async = cfg->enable_async_comm};
}

ct_status ct_parallelize_dims(const ct_config *cfg, int tp, int cp, ct_parallel_dims *d) {
    d->cp_balance = cfg->cp_load_balancer == CT_CFG_CP_NONE ? CT_CP_CONTIGUOUS : CT_CP_HEADTAIL;
    if (ct_cp_check_seq_len(d->cp_balance, cp, cfg->seq_len)) return CT_ERR;
    d->seq_local = cfg->seq_len / cp;
    d->mb_seqs = cfg->pipeline_microbatch_size > 0 ? cfg->pipeline_microbatch_size : cfg->micro_batch_size;
    long tokens = (long)d->mb_seqs * d->seq_local;  // per micro-batch on this rank
    if (cfg->sequence_parallel && tp > 1 && tokens % tp)
        return ct_set_error("sequence_parallel.enable: %d sequences x %ld tokens = %ld tokens per micro-batch on this "
                            "rank do not split over compute_parallel_degree %d",
                            d->mb_seqs, d->seq_local, tokens, tp);
    return CT_OK;
}

// ------------------------------------------------------------------ pipeline split

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

// A pipeline that does not fit its stages or its micro-batches, said with the settings that make
// it fit: the schedule generators speak of vpp and micro-batches, a run of what it was given.
static ct_status check_pipeline_fits(const ct_config *cfg, int n_layers, int pp, int vpp, int n_mb, int per_mb) {
    if (pp * vpp > n_layers)
        return ct_set_error("parallelism.pipeline_degree %d x parallelism.pipeline_stages_per_rank %d = %d stages, more "
                            "than the model's %d blocks: lower parallelism.pipeline_stages_per_rank (or the degree) to "
                            "at most %d stages",
                            pp, vpp, pp * vpp, n_layers, n_layers);
    ct_pp_kind kind;
    if (pp == 1 || cfg->pipeline_schedule_file[0]) return CT_OK;  // a file is checked by simulation
    if (ct_pp_kind_parse(cfg->pipeline_schedule, &kind)) return ct_set_error("pipeline_schedule: %s", ct_last_error());
    if (ct_pp_validate(kind, pp, vpp, n_mb) == CT_OK) return CT_OK;
    if (ct_pp_validate(kind, pp, vpp, pp) != CT_OK) {  // pp micro-batches suit every schedule: the stages do not
        int fits = ct_pp_validate(kind, pp, 1, pp) == CT_OK ? 1 : 2;
        return ct_set_error("pipeline_schedule %s runs %s stage%s per rank, not %d: set "
                            "parallelism.pipeline_stages_per_rank %d, or choose another pipeline_schedule",
                            cfg->pipeline_schedule, fits == 1 ? "one" : kind == CT_PP_ZBV ? "exactly 2" : "2 or more",
                            fits == 1 ? "" : "s", vpp, fits);
    }
    int accum = pp / gcd(per_mb, pp);  // the fewest accumulation steps that fill whole rounds of pp
    return ct_set_error("pipeline_schedule %s needs a multiple of parallelism.pipeline_degree %d micro-batches per "
                        "step, and this run has %d (gradient_accumulation_steps %d x micro_batch_size %d / %d sequences "
                        "per pipeline micro-batch): set gradient_accumulation_steps %d (or a multiple; "
                        "training.global_batch_size sets it too), or lower parallelism.pipeline_microbatch_size",
                        cfg->pipeline_schedule, pp, n_mb, cfg->gradient_accumulation_steps, cfg->micro_batch_size,
                        cfg->micro_batch_size / per_mb, accum);
}

// Which pp rank runs each stage, and which blocks each stage computes.
static ct_status place_stages(const ct_config *cfg, int n_layers, ct_parallelized *o, int pp, int vpp) {
    o->n_stages = pp * vpp;
    o->stage_rank = ct_xcalloc((size_t)o->n_stages, sizeof(int));
    o->first_layer = ct_xcalloc((size_t)o->n_stages + 1, sizeof(int));
    ct_pp_placement placement;
    if (ct_pp_placement_of(cfg->pipeline_schedule, &placement)) return CT_ERR;
    for (int s = 0; s < o->n_stages; s++) o->stage_rank[s] = ct_pp_stage_rank(placement, s, pp);
    return ct_pp_split_layers(n_layers, o->n_stages, cfg->pipeline_layers_per_stage, cfg->pipeline_split_points,
                              o->first_layer);
}

// ------------------------------------------------------------------ strategies on this rank's stages

// Context parallel replaces the attention of every stage with the ring (or all-gather) one.
static ct_status apply_cp(const ct_parallelize_env *env, ct_cp *cp, ct_stage_ops *ops) {
    if (env->cp->size <= 1) return CT_OK;
    const ct_config *cfg = env->cfg;
    ct_cp_rotate rotate = cfg->cp_rotate_method == CT_CFG_CP_RING ? CT_CP_RING : CT_CP_ALLGATHER;
    const ct_model_config *m = env->local_model;
    if (ct_cp_init_sizing(cp, env->k, env->cp, rotate, env->cp_balance, env->mb_seqs, cfg->seq_len, m->n_heads,
                          m->n_kv_heads, m->head_dim, env->sizing))
        return CT_ERR;
    ct_cp_apply(cp, ops);
    return CT_OK;
}

// Data sharding holds the parameter groups of this rank's stages only, and gathers them for the
// stages through ops->weights.
static void apply_fsdp(const ct_parallelize_env *env, ct_parallelized *o, ct_stage_ops *ops) {
    const ct_config *cfg = env->cfg;
    int n_groups = env->table->n_groups, L = env->model->n_layers, me = o->pp_rank;
    bool owned[n_groups];
    int group_stage[n_groups];
    for (int s = 0; s < o->n_stages; s++) {
        if (s == 0) group_stage[0] = 0;
        for (int l = o->first_layer[s]; l < o->first_layer[s + 1]; l++) group_stage[1 + l] = s;
        if (s == o->n_stages - 1) group_stage[L + 1] = s;
    }
    for (int g = 0; g < n_groups; g++) owned[g] = o->stage_rank[group_stage[g]] == me;
    ct_reshard_policy policy = ct_parallelize_reshard_policy(cfg);
    if (env->sizing)
        ct_fsdp_init_sizing(o->fsdp, env->k, env->table, env->fsdp, env->expert_shard, env->replicate, policy, owned,
                            group_stage, env->sizing);
    else
        ct_fsdp_init_placed(o->fsdp, env->k, env->table, env->fsdp, env->expert_shard, env->replicate, policy,
                            env->weights, env->grad_views, owned, group_stage);
    ct_fsdp_set_precision(o->fsdp, env->prec.compute, cfg->mixed_precision_reduce == CT_CFG_BF16 ? CT_BF16 : CT_F32,
                          env->prec.quantized);
    ct_fsdp_set_async(o->fsdp, cfg->enable_async_comm);
    ops->weights = ct_fsdp_weight_ops(o->fsdp);
}

// This rank's stages, each running the operations the strategies filled.
static void build_stages(const ct_parallelize_env *env, ct_parallelized *o, ct_stage_ops ops, ct_ac_policy ac,
                         bool fused) {
    const ct_config *cfg = env->cfg;
    o->stages = ct_xcalloc((size_t)o->n_stages, sizeof(ct_stage));
    for (int s = 0; s < o->n_stages; s++) {
        if (o->stage_rank[s] != o->pp_rank) continue;
        ct_stage_spec spec = {
            .k = env->k, .cfg = env->local_model, .layer_begin = o->first_layer[s],
            .layer_end = o->first_layer[s + 1], .has_embedding = s == 0, .has_head = s == o->n_stages - 1,
            .B = env->mb_seqs, .T = env->seq_local, .pos = env->cp_pos, .max_pos = cfg->seq_len, .ops = ops,
            .weights = env->weights, .grads = env->grad_views, .prec = env->prec, .ac = ac, .fused = fused,
            .micro_batches = o->n_mb, .pack_weights = cfg->pack_weights, .sizing = env->sizing,
        };
        ct_stage_init(&o->stages[s], &spec);
    }
}

// ------------------------------------------------------------------ schedules

static bool splits_backward(const ct_schedule *s) {
    for (int i = 0; i < s->count; i++)
        if (s->actions[i].kind == CT_ACT_BACKWARD_INPUT) return true;
    return false;
}

static void copy_schedule(ct_schedule *dst, const ct_schedule *src) {
    ct_schedule_init(dst);
    for (int i = 0; i < src->count; i++) ct_schedule_push(dst, src->actions[i].kind, src->actions[i].stage, src->actions[i].mb);
}

static void free_lists(ct_parallelize_cache *c) {
    for (int r = 0; c->lists && r < c->pp; r++) ct_schedule_free(&c->lists[r]);
    free(c->lists);
    c->lists = NULL;
    c->name[0] = 0;
    c->pp = c->vpp = c->n_mb = 0;
}

void ct_parallelize_cache_free(ct_parallelize_cache *c) {
    free_lists(c);
    if (c->table_built) ct_param_table_free(&c->table);
    memset(c, 0, sizeof *c);
}

// This rank's generated list, from the cache when it holds the lists of (schedule, pp, vpp, n_mb).
static ct_status cached_schedule(ct_parallelize_cache *c, const ct_config *cfg, int pp, int vpp, int n_mb, int me,
                                 ct_schedule *out) {
    if (!c->lists || strcmp(c->name, cfg->pipeline_schedule) || c->pp != pp || c->vpp != vpp || c->n_mb != n_mb) {
        free_lists(c);
        c->lists = ct_xcalloc((size_t)pp, sizeof(ct_schedule));
        c->pp = pp;
        if (ct_pp_schedule_build(cfg->pipeline_schedule, pp, vpp, n_mb, c->lists)) {
            c->name[0] = 0;  // never matches: the next call builds again
            return CT_ERR;
        }
        snprintf(c->name, sizeof c->name, "%s", cfg->pipeline_schedule);
        c->vpp = vpp, c->n_mb = n_mb;
    }
    copy_schedule(out, &c->lists[me]);
    return CT_OK;
}

// Every pp rank's training list (generated, or read from pipeline_schedule_file), checked by
// simulating all of them together; this rank keeps its own. With a cache (env->cache), generated
// lists come from it without the check.
static ct_status pipeline_schedule(const ct_parallelize_env *env, ct_parallelized *o, int pp, int vpp) {
    const ct_config *cfg = env->cfg;
    int me = o->pp_rank;
    if (env->cache && !cfg->pipeline_schedule_file[0])
        return cached_schedule(env->cache, cfg, pp, vpp, o->n_mb, me, o->train_schedule);
    ct_schedule lists[pp];
    for (int r = 0; r < pp; r++) ct_schedule_init(&lists[r]);
    ct_status st = cfg->pipeline_schedule_file[0]
                       ? ct_pp_schedule_read_csv(cfg->pipeline_schedule_file, pp, lists)
                       : ct_pp_schedule_build(cfg->pipeline_schedule, pp, vpp, o->n_mb, lists);
    if (st == CT_OK) {
        ct_pp_sim_result sim;
        st = ct_pp_simulate(lists, pp, o->stage_rank, o->n_stages, o->n_mb, NULL, &sim);
        ct_pp_sim_result_free(&sim);
    }
    if (st == CT_OK) {
        *o->train_schedule = lists[me];
        ct_schedule_init(&lists[me]);
    }
    for (int r = 0; r < pp; r++) ct_schedule_free(&lists[r]);
    return st;
}

// The training list (gradient accumulation, or this rank's row of the pipeline's, lowered for
// data sharding) and the forward-only list, and the executor's slots planned for both.
static ct_status plan_schedules(const ct_parallelize_env *env, ct_parallelized *o, int pp, int vpp, ct_ac_policy ac) {
    const ct_config *cfg = env->cfg;
    if (pp == 1) {
        ct_schedule_accumulation(o->train_schedule, 0, o->n_mb, true);
    } else {
        if (pipeline_schedule(env, o, pp, vpp)) return CT_ERR;
        if (env->fsdp->size > 1 && ct_parallelize_reshard_policy(cfg) == CT_RESHARD_DEFAULT)
            ct_schedule_unshard_per_stage(o->train_schedule, o->n_stages);
    }
    if (ac.kind != CT_AC_NONE && splits_backward(o->train_schedule))
        return ct_set_error("activation checkpointing with pipeline_schedule %s is not supported yet: its weight pass "
                            "would need the recomputed activations after they are gone",
                            cfg->pipeline_schedule_file[0] ? cfg->pipeline_schedule_file : cfg->pipeline_schedule);
    ct_schedule_forward_only(o->stage_rank, o->n_stages, o->pp_rank, o->n_mb, o->eval_schedule);
    const ct_schedule *lists[2] = {o->train_schedule, o->eval_schedule};
    int n_mb[2] = {o->n_mb, o->n_mb};
    bool training[2] = {true, false};
    return ct_executor_plan(o->exec, lists, n_mb, training, 2);
}

// ------------------------------------------------------------------ the whole set-up

ct_status ct_parallelize(const ct_parallelize_env *env, ct_parallelized *o) {
    const ct_config *cfg = env->cfg;
    int pp = env->pp->size, vpp = ct_parallelize_stages_per_rank(cfg, pp);
    o->pp_rank = env->pp->rank;
    ct_schedule_init(o->train_schedule);
    ct_schedule_init(o->eval_schedule);
    if (pp == 1 && vpp > 1)
        return ct_set_error("parallelism.pipeline_stages_per_rank %d needs parallelism.pipeline_degree > 1", vpp);

    // Pipeline split: the micro-batches (each accumulation micro-batch cut into pipeline
    // micro-batches of mb_seqs sequences), the stages and where they run.
    int per_mb = cfg->micro_batch_size / env->mb_seqs;
    o->n_mb = cfg->gradient_accumulation_steps * per_mb;
    if (check_pipeline_fits(cfg, env->model->n_layers, pp, vpp, o->n_mb, per_mb)) return CT_ERR;
    if (place_stages(cfg, env->model->n_layers, o, pp, vpp)) return CT_ERR;

    // The operations every stage of this rank shares, each strategy filling its entries.
    ct_stage_ops ops = ct_stage_ops_local(env->k);
    ct_tp_apply(env->tp, &ops);
    if (env->ep && env->ep->size > 1) ops.experts = ct_expert_parallel_ops(env->ep);
    if (apply_cp(env, o->cp, &ops)) return CT_ERR;
    ct_ac_policy ac = ct_parallelize_ac_policy(cfg);
    bool fused = cfg->compile;
    apply_fsdp(env, o, &ops);
    build_stages(env, o, ops, ac, fused);

    // The executor over this rank's stages, its gradient reducers, and the schedules it runs.
    ct_stage *mine[o->n_stages];
    for (int s = 0; s < o->n_stages; s++) mine[s] = o->stage_rank[s] == o->pp_rank ? &o->stages[s] : NULL;
    ct_executor_init(o->exec, o->n_stages, mine, pp > 1 ? env->pp : NULL, pp > 1 ? o->stage_rank : NULL);
    ct_executor_add_reducer(o->exec, ct_fsdp_reduce_replicas, o->fsdp);
    ct_executor_add_reducer(o->exec, ct_tp_reduce_replicated_grads, env->tp);
    return plan_schedules(env, o, pp, vpp, ac);
}

void ct_parallelized_free(ct_parallelized *p) {
    if (p->exec) ct_executor_free(p->exec);
    if (p->train_schedule) ct_schedule_free(p->train_schedule);
    if (p->eval_schedule) ct_schedule_free(p->eval_schedule);
    for (int s = 0; p->stages && s < p->n_stages; s++)
        if (p->stage_rank[s] == p->pp_rank) ct_stage_free(&p->stages[s]);
    free(p->stages);
    free(p->stage_rank);
    free(p->first_layer);
    if (p->cp) ct_cp_free(p->cp);
    if (p->fsdp) ct_fsdp_free(p->fsdp);
    p->pp_rank = p->n_stages = p->n_mb = 0;
    p->stage_rank = p->first_layer = NULL;
    p->stages = NULL;
}
