// The model as stages on this rank, and the schedules the executor runs them by. Without a
// pipeline there is one stage holding every layer and the schedule is gradient accumulation
// (F0 B0 F1 B1 ...). With one, the layers are split into pipeline_degree x stages-per-rank
// stages placed on the pp ranks (round-robin, or V-shaped for ZBV); this rank builds its stages,
// its data sharding holds only their parameter groups, and the schedule is this rank's row of a
// generated (or hand-written) pipeline schedule, simulated over every rank before any work.
#include <stdlib.h>

#include "plan/layout.h"
#include "train/trainer.h"

ct_status ct_trainer_build_stages(ct_trainer *t) {
    const ct_config *cfg = &t->cfg;
    // The building itself is plan/layout.c's, which the planner's memory model runs too.
    ct_layout_env env = {
        .cfg = cfg, .k = t->k, .model = &t->model, .local_model = &t->local_model, .table = &t->table,
        .fsdp = &t->mesh.fsdp, .replicate = &t->mesh.dim[CT_MESH_DP_REPLICATE], .cp = &t->mesh.dim[CT_MESH_CP],
        .pp = &t->mesh.dim[CT_MESH_PP], .tp = &t->tp, .prec = t->prec, .cp_balance = t->cp_balance,
        .cp_pos = t->cp_pos, .seq_local = t->seq_local, .mb_seqs = t->mb_seqs, .weights = &t->weights,
        .grad_views = &t->grad_views,
    };
    ct_layout_stages out = {.fsdp = &t->fsdp, .cp = &t->cp, .exec = &t->exec, .train_schedule = &t->train_schedule,
                            .eval_schedule = &t->eval_schedule};
    ct_status st = ct_layout_build_stages(&env, &out);
    // What was made is the trainer's to free, also after a failure.
    t->n_stages = out.n_stages;
    t->stage_rank = out.stage_rank;
    t->first_layer = out.first_layer;
    t->stages = out.stages;
    t->n_mb = out.n_mb;
    if (st) return CT_ERR;
    ct_executor_add_reducer(&t->exec, ct_fsdp_reduce_replicas, &t->fsdp);
    ct_executor_add_reducer(&t->exec, ct_tp_reduce_replicated_grads, &t->tp);
    t->exec.trace = cfg->trace_actions;

    // Micro-batches: views into this step's tokens, `mb_seqs` sequences each.
    long mb_tokens = (long)t->mb_seqs * t->seq_local;
    t->mbs = ct_xcalloc((size_t)t->n_mb, sizeof(ct_microbatch));
    for (int i = 0; i < t->n_mb; i++)
        t->mbs[i] = (ct_microbatch){t->inputs + i * mb_tokens, t->targets + i * mb_tokens,
                                    t->docs ? t->docs + i * mb_tokens : NULL,
                                    t->rope_pos ? t->rope_pos + i * mb_tokens : NULL};
    return CT_OK;
}
