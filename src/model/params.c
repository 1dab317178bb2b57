#include "model/params.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

static void add(ct_param_table *t, int *cap, const char *name, long rows, long cols, int group, ct_init_kind init,
                double std) {
    if (t->count == *cap) ct_fatal("params", "registry overflow");
    ct_param *p = &t->params[t->count++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols > 1 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = rows * cols;
    p->offset = t->total;
    p->group = group;
    p->init = init;
    p->init_std = std;
    t->total += p->numel;
}

void ct_param_table_build(ct_param_table *t, const ct_llama_config *m) {
    memset(t, 0, sizeof *t);
    long C = m->dim, HS = m->head_dim, F = m->ffn_hidden, V = m->vocab_size;
    long NH = m->n_heads, NKV = m->n_kv_heads;
    int cap = 3 + 9 * m->n_layers;
    t->params = ct_xcalloc((size_t)cap, sizeof(ct_param));
    t->n_groups = m->n_layers + 2;
    t->group_offset = ct_xcalloc((size_t)t->n_groups + 1, sizeof(long));
    const double std = 0.02, std_out = 0.02 / sqrt(2.0 * m->n_layers);
    char name[CT_PARAM_NAME];

    t->group_offset[0] = 0;
    add(t, &cap, "tok_embeddings.weight", V, C, 0, CT_INIT_NORMAL, std);
    for (int l = 0; l < m->n_layers; l++) {
        int g = 1 + l;
        t->group_offset[g] = t->total;
#define P(suffix, rows, cols, init, s)                             \
    snprintf(name, sizeof name, "layers.%d.%s", l, suffix);        \
    add(t, &cap, name, rows, cols, g, init, s)
        P("attention_norm.weight", C, 1, CT_INIT_ONES, 0);
        P("attention.wq.weight", NH * HS, C, CT_INIT_NORMAL, std);
        P("attention.wk.weight", NKV * HS, C, CT_INIT_NORMAL, std);
        P("attention.wv.weight", NKV * HS, C, CT_INIT_NORMAL, std);
        P("attention.wo.weight", C, NH * HS, CT_INIT_NORMAL, std_out);
        P("ffn_norm.weight", C, 1, CT_INIT_ONES, 0);
        P("feed_forward.w1.weight", F, C, CT_INIT_NORMAL, std);
        P("feed_forward.w3.weight", F, C, CT_INIT_NORMAL, std);
        P("feed_forward.w2.weight", C, F, CT_INIT_NORMAL, std_out);
#undef P
    }
    t->group_offset[m->n_layers + 1] = t->total;
    add(t, &cap, "norm.weight", C, 1, m->n_layers + 1, CT_INIT_ONES, 0);
    add(t, &cap, "output.weight", V, C, m->n_layers + 1, CT_INIT_NORMAL, std);
    t->group_offset[t->n_groups] = t->total;
}

void ct_param_table_free(ct_param_table *t) {
    free(t->params);
    free(t->group_offset);
    memset(t, 0, sizeof *t);
}

const ct_param *ct_param_find(const ct_param_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (!strcmp(t->params[i].name, name)) return &t->params[i];
    return NULL;
}

void ct_param_init_range(const ct_param *p, uint64_t seed, long begin, long n, float *dst) {
    if (p->init == CT_INIT_ONES) {
        for (long i = 0; i < n; i++) dst[i] = 1.0f;
        return;
    }
    uint64_t key = ct_rng_key(seed, p->name);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) dst[i] = (float)(p->init_std * ct_rng_normal(key, (uint64_t)(begin + i)));
}

void ct_param_init_all(const ct_param_table *t, uint64_t seed, float *block) {
    for (int i = 0; i < t->count; i++) {
        const ct_param *p = &t->params[i];
        ct_param_init_range(p, seed, 0, p->numel, block + p->offset);
    }
}
