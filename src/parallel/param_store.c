#include "parallel/param_store.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void ct_param_store_fill(const ct_param_store *s, const ct_kernels *k, ct_param_fill_fn fill, void *ctx) {
    long most = 0;
    for (int i = 0; i < s->count; i++)
        if (s->shards[i].desc.flat_count > most) most = s->shards[i].desc.flat_count;
    float *host = ct_xmalloc((size_t)(most > 0 ? most : 1) * sizeof(float));  // (most) one tensor's staging
    for (int i = 0; i < s->count; i++) {
        const ct_param_shard *sh = &s->shards[i];
        size_t bytes = (size_t)sh->desc.flat_count * sizeof(float);
        memset(host, 0, bytes);
        ct_shard_iter it = CT_SHARD_ITER_INIT;
        ct_shard_run run;
        while (ct_shard_next_run(&sh->desc, &it, &run)) fill(ctx, sh, &run, host + run.local);
        k->copy_from_host(s->params + sh->offset, host, bytes);
    }
    free(host);
}

static void init_run(void *ctx, const ct_param_shard *sh, const ct_shard_run *run, float *dst) {
    ct_param_init_global(sh->param, *(const uint64_t *)ctx, run->global, run->len, dst);
}

void ct_param_store_init_values(const ct_param_store *s, const ct_kernels *k, uint64_t seed) {
    ct_param_store_fill(s, k, init_run, &seed);
}

void ct_param_store_grad_sum_squares(const ct_param_store *s, const ct_kernels *k, const int coord[CT_DIM_COUNT],
                                     double *sum) {
    bool all_owned = true;
    for (int i = 0; i < s->count && all_owned; i++) all_owned = ct_shard_desc_owns_copy(&s->shards[i].desc, coord);
    // Everything here counts: one pass over the whole buffer (padding is zero), as a single
    // process computes it.
    if (all_owned) {
        k->sum_squares(sum, s->grads, s->numel);
        return;
    }
    for (int i = 0; i < s->count; i++) {
        const ct_param_shard *sh = &s->shards[i];
        if (ct_shard_desc_owns_copy(&sh->desc, coord)) k->sum_squares(sum, s->grads + sh->offset, sh->desc.flat_count);
    }
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
