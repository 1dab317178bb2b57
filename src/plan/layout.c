// The run's layout from its configuration, and the building of its stages (plan/layout.h):
// moved here from train/stages.c and train/precision.c so that the planner's memory model runs
// the very code the trainer allocates with.
#include "plan/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/float_formats.h"
#include "parallel/pipeline_schedules.h"
#include "parallel/pipeline_split.h"

// ------------------------------------------------------------------ policies

ct_reshard_policy ct_layout_reshard_policy(const ct_config *cfg) {
    return !strcmp(cfg->fsdp_reshard_after_forward, "always")  ? CT_RESHARD_ALWAYS
           : !strcmp(cfg->fsdp_reshard_after_forward, "never") ? CT_RESHARD_NEVER
                                                               : CT_RESHARD_DEFAULT;
}

ct_ac_policy ct_layout_ac_policy(const ct_config *cfg) {
    if (!strcmp(cfg->ac_mode, "full")) return (ct_ac_policy){CT_AC_FULL, 1};
    if (!strcmp(cfg->ac_mode, "selective") || cfg->ac_selective) {
        if (!strcmp(cfg->ac_option, "op")) return (ct_ac_policy){CT_AC_OPS, 1};
        if (!strcmp(cfg->ac_option, "elementwise")) return (ct_ac_policy){CT_AC_ELEMENTWISE, 1};
        return (ct_ac_policy){CT_AC_FULL, atoi(cfg->ac_option)};
    }
    return (ct_ac_policy){CT_AC_NONE, 1};
}

int ct_layout_stages_per_rank(const ct_config *cfg, int pp) {
    ct_pp_kind kind;
    if (pp > 1 && cfg->pipeline_stages_per_rank == 1 && !cfg->pipeline_schedule_file[0] &&
        ct_pp_kind_parse(cfg->pipeline_schedule, &kind) == CT_OK &&
        (kind == CT_PP_INTERLEAVED_1F1B || kind == CT_PP_LOOPED_BFS || kind == CT_PP_ZBV))
        return 2;
    return cfg->pipeline_stages_per_rank;
}

// Whether an entry of the comma list `list` (each trimmed of spaces) is a substring of name (n
// chars). (Run for every layer of every layout the planner sizes: no copy, no formatting.)
static bool entry_in(const char *list, const char *name, size_t n) {
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        const char *b = p, *e = p + len;
        p = e + (*e == ',');
        while (b < e && *b == ' ') b++;
        while (e > b && e[-1] == ' ') e--;
        if (e > b && memmem(name, n, b, (size_t)(e - b))) return true;
    }
    return false;
}

// TorchTitan's rule: a linear layer stays in high precision when any filter entry is a substring
// of its name. The fused matrices answer to the names of their parts (wq, wk, wv; w1, w3), so a
// filter written for TorchTitan's unfused modules means the same here. prefix: "layers.<l>.".
static bool filtered(const char *filter, const char *prefix, ct_block_linear l) {
    static const char *parts[CT_BLOCK_LINEARS][3] = {
        {"attention.wq", "attention.wk", "attention.wv"}, {"attention.wo"},
        {"feed_forward.w1", "feed_forward.w3"}, {"feed_forward.w2"},
    };
    char name[96];
    size_t n = strlen(prefix);
    for (int i = 0; i < 3 && parts[l][i]; i++) {
        size_t m = strlen(parts[l][i]);
        memcpy(name, prefix, n);
        memcpy(name + n, parts[l][i], m);
        if (entry_in(filter, name, n + m)) return true;
    }
    return false;
}

// MXFP8 under tp: a 32-element block along a contraction dimension that tp splits must lie on one
// rank, or its scale would be a shard's (a block straddling two ranks). The split contraction
// extents: wo's and w2's inputs (forward), wqkv's and w13's outputs (input gradient), each part
// of the fused matrices on its own (q, k, v; w1, w3), so the local blocks are the whole model's.
static ct_status mxfp8_blocks_fit(const ct_model_config *m, int tp, unsigned linears) {
    if (tp <= 1) return CT_OK;
    struct {
        unsigned used_by;
        const char *what;
        long global;
    } dims[] = {
        {1u << CT_LINEAR_WQKV | 1u << CT_LINEAR_WO, "model.n_heads x head_dim", (long)m->n_heads * m->head_dim},
        {1u << CT_LINEAR_WQKV, "model.n_kv_heads x head_dim", (long)m->n_kv_heads * m->head_dim},
        {1u << CT_LINEAR_W13 | 1u << CT_LINEAR_W2, "FFN hidden size", m->ffn_hidden},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if ((linears & dims[i].used_by) && (dims[i].global / tp) % CT_MX_BLOCK)
            return ct_set_error("quantization.mxfp8.enable with parallelism.compute_parallel_degree %d: %s %ld / %d = "
                                "%ld per rank is not a multiple of the 32-element MXFP8 block (a block would straddle "
                                "two tensor-parallel ranks)",
                                tp, dims[i].what, dims[i].global, tp, dims[i].global / tp);
    return CT_OK;
}

ct_status ct_layout_precision(const ct_config *c, const ct_model_config *m, int tp, ct_precision *p, uint8_t **f8) {
    int n_layers = m->n_layers;
    *p = ct_precision_fp32();
    *f8 = NULL;
    if (!strcmp(c->mixed_precision, "bf16")) p->compute = CT_BF16;
    if (!c->float8 && !c->mxfp8) return CT_OK;
    // The output projection is fused with the loss, which computes in fp32 (a vocabulary-sized
    // 8-bit matmul would also cost the most accuracy); TorchTitan filters it by default too.
    if (!entry_in(c->quant_filter, "output", strlen("output")))
        return ct_set_error("quantization.filter_fqns \"%s\": the output projection cannot run in 8 bits here; "
                            "keep \"output\" in the filter",
                            c->quant_filter);
    // Under tensor parallel a rank holds a slice of each weight and of the row-parallel inputs,
    // so a scale taken on its own slice (a tensor's amax, a row's amax) would be the slice's,
    // and the numbers would depend on the layout. The 8-bit matmuls agree on every amax that
    // spans a split dimension with a MAX all-reduce over the tp group (model/linear.h), so tp runs
    // use the single-process scales. MXFP8's blocks need that each shard's extent of a split
    // contraction dimension be a multiple of 32, checked below.
    p->quantized = true;
    p->recipe = c->mxfp8 ? CT_F8_RECIPE_MXFP8
                : !strcmp(c->float8_recipe, "rowwise") ? CT_F8_RECIPE_ROWWISE
                                                       : CT_F8_RECIPE_TENSORWISE;
    *f8 = ct_xcalloc((size_t)n_layers, 1);
    for (int l = 0; l < n_layers; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        for (int i = 0; i < CT_BLOCK_LINEARS; i++)
            if (!filtered(c->quant_filter, prefix, (ct_block_linear)i)) (*f8)[l] |= (uint8_t)(1u << i);
    }
    p->f8_layers = *f8;
    unsigned used = 0;  // the block linears some layer runs in 8 bits
    for (int l = 0; l < n_layers; l++) used |= (*f8)[l];
    if (c->mxfp8 && mxfp8_blocks_fit(m, tp, used)) {
        free(*f8);
        *f8 = NULL;
        p->f8_layers = NULL;
        return CT_ERR;
    }
    return CT_OK;
}

// ------------------------------------------------------------------ schedules

static bool splits_backward(const ct_schedule *s) {
    for (int i = 0; i < s->count; i++)
        if (s->actions[i].kind == CT_ACT_BACKWARD_INPUT) return true;
    return false;
}

// Forward only, micro-batch by micro-batch through this rank's stages in model order: receives
// block and sends do not, so this order cannot deadlock whatever the placement.
static void forward_only(const ct_layout_stages *o, int me, ct_schedule *s) {
    for (int mb = 0; mb < o->n_mb; mb++)
        for (int st = 0; st < o->n_stages; st++) {
            if (o->stage_rank[st] != me) continue;
            if (st > 0 && o->stage_rank[st - 1] != me) ct_schedule_push(s, CT_ACT_RECV_F, st, mb);
            ct_schedule_push(s, CT_ACT_FORWARD, st, mb);
            if (st + 1 < o->n_stages && o->stage_rank[st + 1] != me) ct_schedule_push(s, CT_ACT_SEND_F, st, mb);
        }
    ct_schedule_push(s, CT_ACT_RESHARD, -1, -1);
}

// Under a pipeline, data sharding gathers each stage once per step: UNSHARD before the stage's
// first action and RESHARD after its last, so a stage's groups are not gathered again for every
// micro-batch and its gradient is reduce-scattered once (TorchTitan keeps pipeline stages
// unsharded between forward and backward for the same reason). The price is the stage's whole
// parameters and gradient while it is held; reshard_after_forward = always keeps per-use gathers.
static void unshard_per_stage(ct_schedule *s, int n_stages) {
    int first[n_stages], last[n_stages];
    for (int st = 0; st < n_stages; st++) first[st] = last[st] = -1;
    for (int i = 0; i < s->count; i++) {
        int st = s->actions[i].stage;
        if (st < 0 || s->actions[i].mb < 0) continue;
        if (first[st] < 0) first[st] = i;
        last[st] = i;
    }
    ct_schedule out;
    ct_schedule_init(&out);
    for (int i = 0; i < s->count; i++) {  // (first[st] and last[st] are actions of stage st)
        const ct_action *a = &s->actions[i];
        int st = a->stage;
        bool counted = st >= 0 && a->mb >= 0;
        if (counted && first[st] == i) ct_schedule_push(&out, CT_ACT_UNSHARD, st, -1);
        ct_schedule_push(&out, a->kind, a->stage, a->mb);
        if (counted && last[st] == i) ct_schedule_push(&out, CT_ACT_RESHARD, st, -1);
    }
    ct_schedule_free(s);
    *s = out;
}

void ct_layout_schedule_cache_free(ct_layout_schedule_cache *c) {
    for (int r = 0; c->lists && r < c->pp; r++) ct_schedule_free(&c->lists[r]);
    free(c->lists);
    memset(c, 0, sizeof *c);
}

static void copy_schedule(ct_schedule *dst, const ct_schedule *src) {
    ct_schedule_init(dst);
    for (int i = 0; i < src->count; i++) ct_schedule_push(dst, src->actions[i].kind, src->actions[i].stage, src->actions[i].mb);
}

// This rank's generated list, from the caller's cache when it holds the same schedule's lists
// (cache NULL: built here and dropped).
static ct_status sizing_schedule(ct_layout_schedule_cache *cache, const ct_config *cfg, int pp, int vpp, int n_mb,
                                 int me, ct_schedule *out) {
    ct_layout_schedule_cache none = {0};
    ct_layout_schedule_cache *c = cache ? cache : &none;
    ct_status st = CT_OK;
    if (!c->lists || strcmp(c->name, cfg->pipeline_schedule) || c->pp != pp || c->vpp != vpp || c->n_mb != n_mb) {
        ct_layout_schedule_cache_free(c);
        c->lists = ct_xcalloc((size_t)pp, sizeof(ct_schedule));
        for (int r = 0; r < pp; r++) ct_schedule_init(&c->lists[r]);
        c->pp = pp;
        st = ct_pp_schedule_build(cfg->pipeline_schedule, pp, vpp, n_mb, c->lists);
        if (st == CT_OK) {  // on a failure the name stays empty, which never matches
            snprintf(c->name, sizeof c->name, "%s", cfg->pipeline_schedule);
            c->vpp = vpp, c->n_mb = n_mb;
        }
    }
    if (st == CT_OK) copy_schedule(out, &c->lists[me]);
    if (c == &none) ct_layout_schedule_cache_free(&none);
    return st;
}

// Every pp rank's training list (generated, or read from pipeline_schedule_file), checked by
// simulating all of them together; this rank keeps its own. Sizing (the planner) takes generated
// generated lists without the check: the generators are checked by their own tests and a run
// checks its lists again at start-up; a schedule file is always read and checked.
static ct_status pipeline_schedule(const ct_layout_env *env, ct_layout_stages *o, int pp, int vpp, int me) {
    const ct_config *cfg = env->cfg;
    if (env->sizing && !cfg->pipeline_schedule_file[0])
        return sizing_schedule(env->schedule_cache, cfg, pp, vpp, o->n_mb, me, o->train_schedule);
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

// Which pp rank runs each stage, and which blocks each stage computes.
static ct_status place_stages(const ct_config *cfg, int n_layers, ct_layout_stages *o, int pp, int vpp) {
    o->n_stages = pp * vpp;
    o->stage_rank = ct_xcalloc((size_t)o->n_stages, sizeof(int));
    o->first_layer = ct_xcalloc((size_t)o->n_stages + 1, sizeof(int));
    ct_pp_placement placement;
    if (ct_pp_placement_of(cfg->pipeline_schedule, &placement)) return CT_ERR;
    for (int s = 0; s < o->n_stages; s++) o->stage_rank[s] = ct_pp_stage_rank(placement, s, pp);
    return ct_pp_split_layers(n_layers, o->n_stages, cfg->pipeline_layers_per_stage, cfg->pipeline_split_points,
                              o->first_layer);
}

// ------------------------------------------------------------------ stages

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

ct_status ct_layout_build_stages(const ct_layout_env *env, ct_layout_stages *o) {
    const ct_config *cfg = env->cfg;
    int pp = env->pp->size, me = env->pp->rank, vpp = ct_layout_stages_per_rank(cfg, pp);
    if (pp == 1 && vpp > 1)
        return ct_set_error("parallelism.pipeline_stages_per_rank %d needs parallelism.pipeline_degree > 1", vpp);
    int per_mb = cfg->micro_batch_size / env->mb_seqs;
    if (check_pipeline_fits(cfg, env->model->n_layers, pp, vpp, cfg->gradient_accumulation_steps * per_mb, per_mb))
        return CT_ERR;
    if (place_stages(cfg, env->model->n_layers, o, pp, vpp)) return CT_ERR;

    // Data sharding holds the parameter groups of this rank's stages only.
    int n_groups = env->table->n_groups, L = env->model->n_layers;
    bool owned[n_groups];
    int group_stage[n_groups];
    for (int s = 0; s < o->n_stages; s++) {
        if (s == 0) group_stage[0] = 0;
        for (int l = o->first_layer[s]; l < o->first_layer[s + 1]; l++) group_stage[1 + l] = s;
        if (s == o->n_stages - 1) group_stage[L + 1] = s;
    }
    for (int g = 0; g < n_groups; g++) owned[g] = o->stage_rank[group_stage[g]] == me;
    if (env->sizing)
        ct_fsdp_init_sizing(o->fsdp, env->k, env->table, env->fsdp, env->replicate, ct_layout_reshard_policy(cfg),
                            owned, group_stage, env->sizing);
    else
        ct_fsdp_init_placed(o->fsdp, env->k, env->table, env->fsdp, env->replicate, ct_layout_reshard_policy(cfg),
                            env->weights, env->grad_views, owned, group_stage);
    ct_fsdp_set_precision(o->fsdp, env->prec.compute,
                          !strcmp(cfg->mixed_precision_reduce, "bf16") ? CT_BF16 : CT_F32);
    ct_fsdp_set_async(o->fsdp, cfg->enable_async_comm);

    // The operations every stage of this rank shares, filled in TorchTitan's order: tp, cp,
    // then data sharding.
    int seqs = env->mb_seqs;
    ct_stage_ops ops = ct_stage_ops_local(env->k);
    ct_tp_apply(env->tp, &ops);
    if (env->cp->size > 1) {
        ct_cp_rotate rotate = strcmp(cfg->cp_rotate_method, "ring") ? CT_CP_ALLGATHER : CT_CP_RING;
        const ct_model_config *m = env->local_model;
        if (ct_cp_init_sizing(o->cp, env->k, env->cp, rotate, env->cp_balance, seqs, cfg->seq_len, m->n_heads,
                              m->n_kv_heads, m->head_dim, env->sizing))
            return CT_ERR;
        ct_cp_apply(o->cp, &ops);
    }
    ops.weights = ct_fsdp_weight_ops(o->fsdp);
    o->stages = ct_xcalloc((size_t)o->n_stages, sizeof(ct_stage));
    ct_stage *mine[o->n_stages];
    for (int s = 0; s < o->n_stages; s++) {
        mine[s] = NULL;
        if (o->stage_rank[s] != me) continue;
        ct_stage_spec spec = {
            .k = env->k, .cfg = env->local_model, .layer_begin = o->first_layer[s],
            .layer_end = o->first_layer[s + 1], .has_embedding = s == 0, .has_head = s == o->n_stages - 1,
            .B = seqs, .T = env->seq_local, .pos = env->cp_pos, .max_pos = cfg->seq_len, .ops = ops,
            .weights = env->weights, .grads = env->grad_views, .prec = env->prec, .ac = ct_layout_ac_policy(cfg),
            .fused = cfg->compile, .sizing = env->sizing,
        };
        ct_stage_init(&o->stages[s], &spec);
        mine[s] = &o->stages[s];
    }
    ct_executor_init(o->exec, o->n_stages, mine, pp > 1 ? env->pp : NULL, pp > 1 ? o->stage_rank : NULL);

    // Micro-batches: each accumulation micro-batch, cut into pipeline micro-batches of `seqs`.
    o->n_mb = cfg->gradient_accumulation_steps * (cfg->micro_batch_size / seqs);
    if (pp == 1) {
        ct_schedule_accumulation(o->train_schedule, 0, o->n_mb, true);
    } else {
        if (pipeline_schedule(env, o, pp, vpp, me)) return CT_ERR;
        if (env->fsdp->size > 1 && ct_layout_reshard_policy(cfg) == CT_RESHARD_DEFAULT)
            unshard_per_stage(o->train_schedule, o->n_stages);
    }
    if (ct_layout_ac_policy(cfg).kind != CT_AC_NONE && splits_backward(o->train_schedule))
        return ct_set_error("activation checkpointing with pipeline_schedule %s is not supported yet: its weight pass "
                            "would need the recomputed activations after they are gone",
                            cfg->pipeline_schedule_file[0] ? cfg->pipeline_schedule_file : cfg->pipeline_schedule);
    forward_only(o, me, o->eval_schedule);
    const ct_schedule *lists[2] = {o->train_schedule, o->eval_schedule};
    int n_mb[2] = {o->n_mb, o->n_mb};
    bool training[2] = {true, false};
    return ct_executor_plan(o->exec, lists, n_mb, training, 2);
}

// ------------------------------------------------------------------ sizes

long ct_layout_step_tokens(const ct_config *cfg) {
    return (long)cfg->gradient_accumulation_steps * cfg->micro_batch_size * cfg->seq_len;
}

// Async saves copy the owned parameters and both AdamW moments (3 x owned), plus the step.
long ct_layout_ckpt_staging_floats(long owned) { return 3 * owned + 1; }
