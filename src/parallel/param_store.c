#include "parallel/param_store.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void ct_param_store_init_values(const ct_param_store *s, uint64_t seed) {
    for (int i = 0; i < s->count; i++) {
        const ct_param_shard *sh = &s->shards[i];
        ct_shard_iter it = CT_SHARD_ITER_INIT;
        ct_shard_run run;
        while (ct_shard_next_run(&sh->desc, &it, &run))
            ct_param_init_global(sh->param, seed, run.global, run.len, s->params + sh->offset + run.local);
    }
}

double ct_param_store_grad_sum_squares(const ct_param_store *s, const ct_kernels *k, const int coord[CT_DIM_COUNT]) {
    bool all_owned = true;
    for (int i = 0; i < s->count && all_owned; i++) all_owned = ct_shard_desc_owns_copy(&s->shards[i].desc, coord);
    // Everything here counts: one pass over the whole buffer (padding is zero), as a single
    // process computes it.
    if (all_owned) return k->sum_squares(s->grads, s->numel);
    double sum = 0;
    for (int i = 0; i < s->count; i++) {
        const ct_param_shard *sh = &s->shards[i];
        if (ct_shard_desc_owns_copy(&sh->desc, coord)) sum += k->sum_squares(s->grads + sh->offset, sh->desc.flat_count);
    }
    return sum;
}

void ct_param_store_gather(const ct_param_store *s, const ct_kernels *k, const int coord[CT_DIM_COUNT],
                           const ct_param_table *global, ct_group *all, float *full) {
    memset(full, 0, (size_t)global->total * sizeof(float));  // host buffer
    for (int i = 0; i < s->count; i++) {
        const ct_param_shard *sh = &s->shards[i];
        if (!ct_shard_desc_owns_copy(&sh->desc, coord)) continue;
        const ct_param *gp = ct_param_find(global, sh->param->name);
        if (!gp) ct_fatal("param_store", "no tensor %s in the global registry", sh->param->name);
        ct_shard_iter it = CT_SHARD_ITER_INIT;
        ct_shard_run run;
        while (ct_shard_next_run(&sh->desc, &it, &run))
            k->copy_to_host(full + gp->offset + run.global, s->params + sh->offset + run.local,
                            (size_t)run.len * sizeof(float));
    }
    ct_comm_all_reduce(all, full, full, (size_t)global->total, CT_F32, CT_COMM_SUM);
}

void ct_param_store_free(ct_param_store *s) {
    free(s->shards);
    memset(s, 0, sizeof *s);
}
