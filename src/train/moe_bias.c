#include "train/moe_bias.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/memory.h"

static int is_bias(const char *name, int *layer) {
    static const char suffix[] = ".moe.expert_bias";
    size_t n = strlen(name), k = sizeof suffix - 1;
    return n > k && !strcmp(name + n - k, suffix) && sscanf(name, "layers.%d.", layer) == 1;
}

void ct_moe_bias_init(ct_moe_bias *b, const ct_param_store *st, const ct_kernels *k, const ct_model_config *m) {
    memset(b, 0, sizeof *b);
    if (m->moe_bias_rate <= 0) return;
    b->E = m->n_experts;
    b->rate = (float)m->moe_bias_rate;
    int layer;
    for (int i = 0; i < st->count; i++) b->n += st->shards[i].desc.flat_count > 0 && is_bias(st->shards[i].param->name, &layer);
    b->offset = ct_xcalloc((size_t)b->n + 1, sizeof(long));
    b->first = ct_xcalloc((size_t)b->n + 1, sizeof(long));
    b->count = ct_xcalloc((size_t)b->n + 1, sizeof(long));
    b->layer = ct_xcalloc((size_t)b->n + 1, sizeof(int));
    long total = 0;
    int j = 0;
    for (int i = 0; i < st->count; i++) {
        const ct_param_shard *sh = &st->shards[i];
        if (sh->desc.flat_count <= 0 || !is_bias(sh->param->name, &layer)) continue;
        // A vector of E no tensor parallelism splits: local element 0 is expert flat_begin on.
        b->offset[j] = sh->offset, b->first[j] = ct_shard_desc_global_index(&sh->desc, 0);
        b->count[j] = sh->desc.flat_count, b->layer[j] = layer;
        total += b->count[j++];
    }
    ct_device dev = ct_kernels_device(k);
    b->kept = ct_mem_alloc_on(dev, CT_MEM_OTHER, (size_t)(total > 0 ? total : 1) * sizeof(float));
    b->delta = ct_mem_alloc_on(dev, CT_MEM_OTHER, (size_t)b->E * sizeof(float));
    b->counts = ct_mem_alloc_on(dev, CT_MEM_OTHER, (size_t)b->E * sizeof(int64_t));
}

void ct_moe_bias_free(ct_moe_bias *b) {
    free(b->offset), free(b->first), free(b->count), free(b->layer);
    ct_mem_free(b->kept), ct_mem_free(b->delta), ct_mem_free(b->counts);
    memset(b, 0, sizeof *b);
}

void ct_moe_bias_keep(const ct_moe_bias *b, const ct_kernels *k, const float *params) {
    long at = 0;
    for (int j = 0; j < b->n; j++) {
        k->copy(b->kept + at, params + b->offset[j], (size_t)b->count[j] * sizeof(float));
        at += b->count[j];
    }
}

void ct_moe_bias_step(const ct_moe_bias *b, const ct_kernels *k, float *params, const int64_t *load) {
    long at = 0;
    for (int j = 0; j < b->n; j++) {
        float *p = params + b->offset[j];
        k->copy(p, b->kept + at, (size_t)b->count[j] * sizeof(float));
        at += b->count[j];
        if (!load) continue;
        // The block's whole update from its load (the mean is over every expert), then this
        // piece's experts of it.
        k->zero(b->delta, (size_t)b->E * sizeof(float));
        k->copy_from_host(b->counts, load + (long)b->layer[j] * b->E, (size_t)b->E * sizeof(int64_t));
        k->moe_bias_update(b->delta, b->counts, b->E, b->rate);
        k->add_inplace(p, b->delta + b->first[j], b->count[j]);
    }
}
