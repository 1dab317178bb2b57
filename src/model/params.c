#include "model/params.h"

#include <limits.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

// Adds a tensor of global shape (rows, cols); tp_dim says which dimension this rank holds
// 1/tp of (the tp_rank-th slice), -1 for a replicated tensor. A routed experts' tensor under
// expert parallelism holds the ep_rank-th 1/ep of its rows instead (its experts).
static void add(ct_param_table *t, int cap, const char *name, const ct_param_spec *spec, int group) {
    if (t->count == cap) ct_fatal("params", "registry overflow");
    ct_param *p = &t->params[t->count++];
    snprintf(p->name, sizeof p->name, "%s", name);
    long rows = spec->rows, cols = spec->cols;
    int tp_size = t->tp_size, tp_rank = t->tp_rank;
    p->ndim = cols > 1 ? 2 : 1;
    p->global_shape[0] = rows;
    p->global_shape[1] = cols;
    p->expert = spec->expert;
    if (spec->expert && t->ep_size > 1) tp_size = t->ep_size, tp_rank = t->ep_rank;
    p->tp_dim = spec->expert ? (t->ep_size > 1 ? 0 : -1) : tp_size > 1 ? spec->tp_dim : -1;
    if (p->tp_dim == 0) rows /= tp_size;
    if (p->tp_dim == 1) cols /= tp_size;
    p->tp_start = p->tp_dim == 0 ? tp_rank * rows : p->tp_dim == 1 ? tp_rank * cols : 0;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = rows * cols;
    p->offset = t->total;
    p->group = group;
    p->view = spec->view;
    p->init = spec->init;
    p->init_std = spec->init_std;
    p->read_bf16 = spec->read_bf16;
    t->total += p->numel;
}

// The embedding (group 0) and head (group L + 1) tensors every family has.
static ct_param_spec embedding_spec(const ct_model_config *m) {
    // Under bf16 both vocabulary matrices are read in bf16: the embedding lookup widens the rows
    // it takes, and the output projection multiplies in bf16.
    return (ct_param_spec){"tok_embeddings.weight", m->vocab_size, m->dim, 0, CT_INIT_NORMAL, 0.02, 0, true, false};
}
static ct_param_spec norm_spec(const ct_model_config *m) {
    return (ct_param_spec){"norm.weight", m->dim, 1, -1, CT_INIT_ONES, 0, 0, false, false};
}
static ct_param_spec output_spec(const ct_model_config *m) {
    return (ct_param_spec){"output.weight", m->vocab_size, m->dim, 0, CT_INIT_NORMAL, 0.02, 1, true, false};
}

// a += b·c, false on overflow.
static bool add_product(long *a, long b, long c) {
    long p;
    return !__builtin_mul_overflow(b, c, &p) && !__builtin_add_overflow(*a, p, a);
}

ct_status ct_param_count(const ct_model_config *m, int *n_tensors, long *n_elements) {
#define POSITIVE(f) \
    if (m->f <= 0) return ct_set_error("model: " #f " %d must be positive", m->f)
    POSITIVE(dim);
    POSITIVE(n_layers);
    POSITIVE(n_heads);
    POSITIVE(n_kv_heads);
    POSITIVE(head_dim);
    POSITIVE(ffn_hidden);
    POSITIVE(vocab_size);
#undef POSITIVE
    if (!m->family) return ct_set_error("model: no model family (model.name)");
    // t->count is an int: 3 + (tensors per block) L must fit.
    if (m->n_layers > (INT_MAX - 3) / CT_BLOCK_MAX_PARAMS)
        return ct_set_error("model: n_layers %d: the registry holds at most %d layers", m->n_layers,
                            (INT_MAX - 3) / CT_BLOCK_MAX_PARAMS);
    // Every dimension is below 2^31; every product and sum after that is checked, whatever the
    // config (the caller may not have validated it).
    long total = 0;
    int count = 3;
    ct_param_spec e = embedding_spec(m), nf = norm_spec(m), o = output_spec(m);
    bool ok = add_product(&total, e.rows, e.cols) && add_product(&total, nf.rows, nf.cols) &&
              add_product(&total, o.rows, o.cols);
    for (int l = 0; ok && l < m->n_layers; l++) {
        ct_param_spec specs[CT_BLOCK_MAX_PARAMS];
        int n = m->family->block_params(m, l, specs);
        count += n;
        for (int i = 0; ok && i < n; i++) ok = specs[i].rows > 0 && add_product(&total, specs[i].rows, specs[i].cols);
    }
    if (!ok)
        return ct_set_error("model: dim %d, n_layers %d, n_heads %d, n_kv_heads %d, ffn_hidden %d, vocab_size %d: "
                            "the parameter count overflows",
                            m->dim, m->n_layers, m->n_heads, m->n_kv_heads, m->ffn_hidden, m->vocab_size);
    *n_tensors = count;
    *n_elements = total;
    return CT_OK;
}

void ct_param_table_build(ct_param_table *t, const ct_model_config *m) { ct_param_table_build_local(t, m, 0, 1, 0, 1); }

void ct_param_table_build_tp(ct_param_table *t, const ct_model_config *m, int tp_rank, int tp_size) {
    ct_param_table_build_local(t, m, tp_rank, tp_size, 0, 1);
}

void ct_param_table_build_local(ct_param_table *t, const ct_model_config *m, int tp_rank, int tp_size, int ep_rank,
                                int ep_size) {
    memset(t, 0, sizeof *t);
    t->tp_rank = tp_rank;
    t->tp_size = tp_size;
    t->ep_rank = ep_rank;
    t->ep_size = ep_size;
    int cap;
    long n_elements;
    // Callers validate dimensions first; this catches the one that did not, before the
    // registry's int and long arithmetic can overflow or a wrapped count reaches calloc.
    if (ct_param_count(m, &cap, &n_elements) != CT_OK) ct_fatal("params", "%s", ct_last_error());
    t->params = ct_xcalloc((size_t)cap, sizeof(ct_param));
    t->n_groups = m->n_layers + 2;
    t->group_offset = ct_xcalloc((size_t)t->n_groups + 1, sizeof(long));
    t->group_first = ct_xcalloc((size_t)t->n_groups + 1, sizeof(int));
    char name[CT_PARAM_NAME];

    ct_param_spec e = embedding_spec(m);
    add(t, cap, e.name, &e, 0);
    for (int l = 0; l < m->n_layers; l++) {
        int g = 1 + l;
        t->group_offset[g] = t->total;
        t->group_first[g] = t->count;
        ct_param_spec specs[CT_BLOCK_MAX_PARAMS];
        int n = m->family->block_params(m, l, specs);
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "layers.%d.%s", l, specs[i].name);
            add(t, cap, name, &specs[i], g);
        }
    }
    int head = m->n_layers + 1;
    t->group_offset[head] = t->total;
    t->group_first[head] = t->count;
    ct_param_spec nf = norm_spec(m), o = output_spec(m);
    add(t, cap, nf.name, &nf, head);
    add(t, cap, o.name, &o, head);
    t->group_offset[t->n_groups] = t->total;
    t->group_first[t->n_groups] = t->count;
}

void ct_param_table_free(ct_param_table *t) {
    free(t->params);
    free(t->group_first);
    free(t->group_offset);
    memset(t, 0, sizeof *t);
}

const ct_param *ct_param_find(const ct_param_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (!strcmp(t->params[i].name, name)) return &t->params[i];
    return NULL;
}

long ct_param_global_index(const ct_param *p, long local) {
    if (p->tp_dim == 0) return p->tp_start * p->shape[1] + local;
    if (p->tp_dim == 1) {
        long row = local / p->shape[1], col = local % p->shape[1];
        return row * p->global_shape[1] + p->tp_start + col;
    }
    return local;
}

void ct_param_init_range(const ct_param *p, uint64_t seed, long begin, long n, float *dst) {
    if (p->init == CT_INIT_ONES) {
        for (long i = 0; i < n; i++) dst[i] = 1.0f;
        return;
    }
    uint64_t key = ct_rng_key(seed, p->name);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        dst[i] = (float)(p->init_std * ct_rng_normal(key, (uint64_t)ct_param_global_index(p, begin + i)));
}

void ct_param_init_global(const ct_param *p, uint64_t seed, long global_begin, long n, float *dst) {
    if (p->init == CT_INIT_ONES) {
        for (long i = 0; i < n; i++) dst[i] = 1.0f;
        return;
    }
    uint64_t key = ct_rng_key(seed, p->name);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) dst[i] = (float)(p->init_std * ct_rng_normal(key, (uint64_t)(global_begin + i)));
}

void ct_param_init_all(const ct_param_table *t, uint64_t seed, float *block) {
    for (int i = 0; i < t->count; i++) {
        const ct_param *p = &t->params[i];
        ct_param_init_range(p, seed, 0, p->numel, block + p->offset);
    }
}
