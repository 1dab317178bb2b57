// The model as stages on this rank, and the schedules the executor runs them by. Without a
// pipeline there is one stage holding every layer and the schedule is gradient accumulation
// (F0 B0 F1 B1 ...). With one, the layers are split into pipeline_degree x stages-per-rank
// stages placed on the pp ranks (round-robin, or V-shaped for ZBV); this rank builds its stages,
// its data sharding holds only their parameter groups, and the schedule is this rank's row of a
// generated (or hand-written) pipeline schedule, simulated over every rank before any work.
#include <stdlib.h>
#include <string.h>

#include "parallel/pipeline_schedules.h"
#include "parallel/pipeline_split.h"
#include "train/trainer.h"

static ct_reshard_policy reshard_policy(const ct_config *cfg) {
    return !strcmp(cfg->fsdp_reshard_after_forward, "always")  ? CT_RESHARD_ALWAYS
           : !strcmp(cfg->fsdp_reshard_after_forward, "never") ? CT_RESHARD_NEVER
                                                               : CT_RESHARD_DEFAULT;
}

// activation_checkpoint.*: none; full (every block); selective with option "op" (every block
// keeps its matmul and attention outputs) or N (every N-th block full).
static ct_ac_policy ac_policy(const ct_config *cfg) {
    if (!strcmp(cfg->ac_mode, "full")) return (ct_ac_policy){CT_AC_FULL, 1};
    if (!strcmp(cfg->ac_mode, "selective") || cfg->ac_selective) {
        if (!strcmp(cfg->ac_option, "op")) return (ct_ac_policy){CT_AC_OPS, 1};
        return (ct_ac_policy){CT_AC_FULL, atoi(cfg->ac_option)};
    }
    return (ct_ac_policy){CT_AC_NONE, 1};
}

static bool splits_backward(const ct_schedule *s) {
    for (int i = 0; i < s->count; i++)
        if (s->actions[i].kind == CT_ACT_BACKWARD_INPUT) return true;
    return false;
}

// Forward only, micro-batch by micro-batch through this rank's stages in model order: receives
// block and sends do not, so this order cannot deadlock whatever the placement.
static void forward_only(const ct_trainer *t, int me, ct_schedule *s) {
    for (int mb = 0; mb < t->n_mb; mb++)
        for (int st = 0; st < t->n_stages; st++) {
            if (t->stage_rank[st] != me) continue;
            if (st > 0 && t->stage_rank[st - 1] != me) ct_schedule_push(s, CT_ACT_RECV_F, st, mb);
            ct_schedule_push(s, CT_ACT_FORWARD, st, mb);
            if (st + 1 < t->n_stages && t->stage_rank[st + 1] != me) ct_schedule_push(s, CT_ACT_SEND_F, st, mb);
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
    for (int i = 0; i < s->count; i++) {
        const ct_action *a = &s->actions[i];
        for (int st = 0; st < n_stages; st++)
            if (first[st] == i) ct_schedule_push(&out, CT_ACT_UNSHARD, st, -1);
        ct_schedule_push(&out, a->kind, a->stage, a->mb);
        for (int st = 0; st < n_stages; st++)
            if (last[st] == i) ct_schedule_push(&out, CT_ACT_RESHARD, st, -1);
    }
    ct_schedule_free(s);
    *s = out;
}

// Every pp rank's training list (generated, or read from pipeline_schedule_file), checked by
// simulating all of them together; this rank keeps its own.
static ct_status pipeline_schedule(ct_trainer *t, int pp, int vpp, int me) {
    const ct_config *cfg = &t->cfg;
    ct_schedule lists[pp];
    for (int r = 0; r < pp; r++) ct_schedule_init(&lists[r]);
    ct_status st = cfg->pipeline_schedule_file[0]
                       ? ct_pp_schedule_read_csv(cfg->pipeline_schedule_file, pp, lists)
                       : ct_pp_schedule_build(cfg->pipeline_schedule, pp, vpp, t->n_mb, lists);
    if (st == CT_OK) {
        ct_pp_sim_result sim;
        st = ct_pp_simulate(lists, pp, t->stage_rank, t->n_stages, t->n_mb, NULL, &sim);
        ct_pp_sim_result_free(&sim);
    }
    if (st == CT_OK) {
        t->train_schedule = lists[me];
        ct_schedule_init(&lists[me]);
    }
    for (int r = 0; r < pp; r++) ct_schedule_free(&lists[r]);
    return st;
}

// Which pp rank runs each stage, and which blocks each stage computes.
static ct_status place_stages(ct_trainer *t, int pp, int vpp) {
    const ct_config *cfg = &t->cfg;
    t->n_stages = pp * vpp;
    t->stage_rank = ct_xcalloc((size_t)t->n_stages, sizeof(int));
    t->first_layer = ct_xcalloc((size_t)t->n_stages + 1, sizeof(int));
    ct_pp_placement placement;
    if (ct_pp_placement_of(cfg->pipeline_schedule, &placement)) return CT_ERR;
    for (int s = 0; s < t->n_stages; s++) t->stage_rank[s] = ct_pp_stage_rank(placement, s, pp);
    return ct_pp_split_layers(t->model.n_layers, t->n_stages, cfg->pipeline_layers_per_stage,
                              cfg->pipeline_split_points, t->first_layer);
}

// Stages per rank: as set, except that a looped schedule (interleaved 1F1B, looped BFS, ZBV)
// cannot run one stage per rank, so the default 1 means 2 there, as in TorchTitan.
static int stages_per_rank(const ct_config *cfg, int pp) {
    ct_pp_kind kind;
    if (pp > 1 && cfg->pipeline_stages_per_rank == 1 && !cfg->pipeline_schedule_file[0] &&
        ct_pp_kind_parse(cfg->pipeline_schedule, &kind) == CT_OK &&
        (kind == CT_PP_INTERLEAVED_1F1B || kind == CT_PP_LOOPED_BFS || kind == CT_PP_ZBV))
        return 2;
    return cfg->pipeline_stages_per_rank;
}

ct_status ct_trainer_build_stages(ct_trainer *t) {
    const ct_config *cfg = &t->cfg;
    int pp = t->mesh.dim[CT_MESH_PP].size, me = t->mesh.dim[CT_MESH_PP].rank, vpp = stages_per_rank(cfg, pp);
    if (pp == 1 && vpp > 1)
        return ct_set_error("parallelism.pipeline_stages_per_rank %d needs parallelism.pipeline_degree > 1", vpp);
    if (place_stages(t, pp, vpp)) return CT_ERR;

    // Data sharding holds the parameter groups of this rank's stages only.
    int n_groups = t->table.n_groups, L = t->model.n_layers;
    bool owned[n_groups];
    int group_stage[n_groups];
    for (int s = 0; s < t->n_stages; s++) {
        if (s == 0) group_stage[0] = 0;
        for (int l = t->first_layer[s]; l < t->first_layer[s + 1]; l++) group_stage[1 + l] = s;
        if (s == t->n_stages - 1) group_stage[L + 1] = s;
    }
    for (int g = 0; g < n_groups; g++) owned[g] = t->stage_rank[group_stage[g]] == me;
    ct_fsdp_init_placed(&t->fsdp, t->k, &t->table, &t->mesh.fsdp, &t->mesh.dim[CT_MESH_DP_REPLICATE],
                        reshard_policy(cfg), &t->weights, &t->grad_views, owned, group_stage);
    ct_fsdp_set_precision(&t->fsdp, t->prec.compute, !strcmp(cfg->mixed_precision_reduce, "bf16") ? CT_BF16 : CT_F32);
    ct_fsdp_set_async(&t->fsdp, cfg->enable_async_comm);

    // The operations every stage of this rank shares, filled in TorchTitan's order: tp, cp,
    // then data sharding.
    int seqs = t->mb_seqs;
    ct_stage_ops ops = ct_stage_ops_local(t->k);
    ct_tp_apply(&t->tp, &ops);
    ct_group *cp = &t->mesh.dim[CT_MESH_CP];
    if (cp->size > 1) {
        ct_cp_rotate rotate = strcmp(cfg->cp_rotate_method, "ring") ? CT_CP_ALLGATHER : CT_CP_RING;
        const ct_llama_config *m = &t->local_model;
        if (ct_cp_init(&t->cp, t->k, cp, rotate, t->cp_balance, seqs, cfg->seq_len, m->n_heads, m->n_kv_heads,
                       m->head_dim))
            return CT_ERR;
        ct_cp_apply(&t->cp, &ops);
    }
    ops.weights = ct_fsdp_weight_ops(&t->fsdp);
    t->stages = ct_xcalloc((size_t)t->n_stages, sizeof(ct_stage));
    ct_stage *mine[t->n_stages];
    for (int s = 0; s < t->n_stages; s++) {
        mine[s] = NULL;
        if (t->stage_rank[s] != me) continue;
        ct_stage_spec spec = {
            .k = t->k, .cfg = &t->local_model, .layer_begin = t->first_layer[s], .layer_end = t->first_layer[s + 1],
            .has_embedding = s == 0, .has_head = s == t->n_stages - 1, .B = seqs, .T = t->seq_local,
            .pos = t->cp_pos, .max_pos = cfg->seq_len, .ops = ops,
            .weights = &t->weights, .grads = &t->grad_views, .prec = t->prec, .ac = ac_policy(cfg),
            .fused = cfg->compile,
        };
        ct_stage_init(&t->stages[s], &spec);
        mine[s] = &t->stages[s];
    }
    ct_executor_init(&t->exec, t->n_stages, mine, pp > 1 ? &t->mesh.dim[CT_MESH_PP] : NULL,
                     pp > 1 ? t->stage_rank : NULL);
    ct_executor_add_reducer(&t->exec, ct_fsdp_reduce_replicas, &t->fsdp);
    ct_executor_add_reducer(&t->exec, ct_tp_reduce_replicated_grads, &t->tp);

    // Micro-batches: each accumulation micro-batch, cut into pipeline micro-batches of `seqs`.
    t->n_mb = cfg->gradient_accumulation_steps * (cfg->micro_batch_size / seqs);
    long mb_tokens = (long)seqs * t->seq_local;
    t->mbs = ct_xcalloc((size_t)t->n_mb, sizeof(ct_microbatch));
    for (int i = 0; i < t->n_mb; i++) t->mbs[i] = (ct_microbatch){t->inputs + i * mb_tokens, t->targets + i * mb_tokens};

    if (pp == 1) {
        ct_schedule_accumulation(&t->train_schedule, 0, t->n_mb, true);
    } else {
        if (pipeline_schedule(t, pp, vpp, me)) return CT_ERR;
        if (t->mesh.fsdp.size > 1 && reshard_policy(cfg) == CT_RESHARD_DEFAULT)
            unshard_per_stage(&t->train_schedule, t->n_stages);
    }
    if (ac_policy(cfg).kind != CT_AC_NONE && splits_backward(&t->train_schedule))
        return ct_set_error("activation checkpointing with pipeline_schedule %s is not supported yet: its weight pass "
                            "would need the recomputed activations after they are gone",
                            cfg->pipeline_schedule_file[0] ? cfg->pipeline_schedule_file : cfg->pipeline_schedule);
    forward_only(t, me, &t->eval_schedule);
    const ct_schedule *lists[2] = {&t->train_schedule, &t->eval_schedule};
    int n_mb[2] = {t->n_mb, t->n_mb};
    bool training[2] = {true, false};
    return ct_executor_plan(&t->exec, lists, n_mb, training, 2);
}
