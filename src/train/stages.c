// The model as stages on this rank, and the schedules the executor runs them by: the trainer's
// call of ct_parallelize (parallel/parallelize.h) with its own groups, dimensions and views, and
// the micro-batches those schedules run, as views into the step's tokens.
#include <stdlib.h>

#include "parallel/parallelize.h"
#include "train/trainer.h"

ct_status ct_trainer_build_stages(ct_trainer *t) {
    ct_parallelize_env env = {
        .cfg = &t->cfg, .k = t->k, .model = &t->model, .local_model = &t->local_model, .table = &t->table,
        .fsdp = &t->mesh.fsdp, .replicate = &t->mesh.dim[CT_MESH_DP_REPLICATE], .cp = &t->mesh.dim[CT_MESH_CP],
        .pp = &t->mesh.dim[CT_MESH_PP], .ep = &t->mesh.ep, .expert_shard = &t->mesh.expert_shard, .tp = &t->tp, .prec = t->prec, .cp_balance = t->cp_balance,
        .cp_pos = t->cp_pos, .seq_local = t->seq_local, .mb_seqs = t->mb_seqs, .weights = &t->weights,
        .grad_views = &t->grad_views,
    };
    t->par = (ct_parallelized){.fsdp = &t->fsdp, .cp = &t->cp, .exec = &t->exec, .train_schedule = &t->train_schedule,
                               .eval_schedule = &t->eval_schedule};
    if (ct_parallelize(&env, &t->par)) return CT_ERR;  // ct_trainer_free frees what was built
    t->n_mb = t->par.n_mb;
    t->exec.trace = t->cfg.trace_actions;  // profiling.trace_actions: each action printed as it starts

    // Mixture of experts: this rank's stages add their blocks' load-balancing losses to the step's
    // fourth scalar; the choosing biases found in the store; the job's loads per step kept.
    for (int s = 0; s < t->par.n_stages; s++)
        if (t->model.moe_aux_coeff > 0 && t->par.stage_rank[s] == t->mesh.dim[CT_MESH_PP].rank)
            t->par.stages[s].aux_sum = (float *)(t->scalars + 3);
    ct_moe_bias_init(&t->moe_bias, &t->fsdp.store, t->k, &t->model);
    if (t->model.n_experts > 0)
        t->moe_load = ct_xcalloc((size_t)t->model.n_layers * (size_t)t->model.n_experts, sizeof(int64_t));

    // Micro-batches: views into this step's tokens, `mb_seqs` sequences each.
    long mb_tokens = (long)t->mb_seqs * t->seq_local;
    t->mbs = ct_xcalloc((size_t)t->n_mb, sizeof(ct_microbatch));
    for (int i = 0; i < t->n_mb; i++)
        t->mbs[i] = (ct_microbatch){t->inputs + i * mb_tokens, t->targets + i * mb_tokens,
                                    t->docs ? t->docs + i * mb_tokens : NULL,
                                    t->rope_pos ? t->rope_pos + i * mb_tokens : NULL};
    return CT_OK;
}
