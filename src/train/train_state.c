#include "train/train_state.h"

#include <stdlib.h>

ct_train_position ct_train_state_position(const ct_train_state *s) {
    return (ct_train_position){*s->step, *s->optimizer_step, ct_loader_get_state(s->data)};
}

ct_status ct_train_state_set_position(ct_train_state *s, const ct_train_position *p) {
    if (ct_loader_set_state(s->data, p->data)) return CT_ERR;
    *s->step = p->step;
    *s->optimizer_step = p->optimizer_step;
    return CT_OK;
}

bool ct_train_state_owns(const ct_train_state *s, const ct_param_shard *sh) {
    return sh->desc.flat_count > 0 && ct_shard_desc_owns_copy(&sh->desc, s->mesh->coord);
}

const float *ct_train_state_live(const ct_train_state *s, const ct_param_shard *sh, ct_dcp_kind kind) {
    return s->tensors[kind] + sh->offset;
}

ct_status ct_train_state_load(ct_train_state *s, int n_kinds, ct_train_state_read_fn read, void *ctx) {
    const ct_param_store *st = s->store;
    long most = 1;
    for (int i = 0; i < st->count; i++)
        if (st->shards[i].desc.flat_count > most) most = st->shards[i].desc.flat_count;
    float *host = ct_xmalloc((size_t)most * sizeof(float));  // (most) one shard, on its way to the device
    ct_status r = CT_OK;
    for (int i = 0; i < st->count && r == CT_OK; i++) {
        const ct_param_shard *sh = &st->shards[i];
        if (sh->desc.flat_count == 0) continue;
        for (int k = 0; k < n_kinds && r == CT_OK; k++) {
            r = read(ctx, sh->param->name, (ct_dcp_kind)k, &sh->desc, host);
            if (r == CT_OK)
                s->k->copy_from_host(s->tensors[k] + sh->offset, host, (size_t)sh->desc.flat_count * sizeof(float));
        }
    }
    free(host);
    return r;
}
